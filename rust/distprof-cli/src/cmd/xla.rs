//! `distprof xla apply|check|diff --xla-dir DIR`: inserts, verifies and regenerates the hooks in
//! an XLA source tree by anchor; `distprof xla package --out DIR`: writes the
//! `@distributed_profiling` repository those hooks build against.

use clap::Subcommand;
use distprof_xla::{Release, Report};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

/// Which report `print_report` writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Apply,
    Check,
}

#[derive(Subcommand)]
enum Action {
    /// Insert the hooks and the Bazel wiring (idempotent; writes nothing if an anchor is missing).
    Apply(TreeArgs),
    /// Verify a patched tree holds exactly what `apply` writes (exit 1 if not).
    Check {
        #[command(flatten)]
        tree: TreeArgs,
        /// End with one JSON line: anchors_ok, declarations_ok, added_core_lines, the hook
        /// sites with the declaration of every name they pass, and any problems.
        #[arg(long)]
        json: bool,
    },
    /// Write the patch series computed from a clean tree.
    Diff {
        #[command(flatten)]
        tree: TreeArgs,
        /// Directory for the series, e.g. patches/xla/<version>/ (its *.patch files are replaced).
        #[arg(long)]
        out: PathBuf,
    },
    /// Write the @distributed_profiling repository (BUILD.bazel on XLA's real targets, the hook
    /// sources, the cxx bridge headers and the staticlib) into a new directory.
    Package {
        /// The new directory (given to `apply --local-dir`, or packed as the release archive).
        #[arg(long)]
        out: PathBuf,
        /// The distprof-ffi staticlib, e.g. target/release/libdistprof_ffi.a.
        #[arg(long)]
        staticlib: PathBuf,
        /// The cxx bridge headers of the same cargo build: <cargo target dir>/cxxbridge.
        #[arg(long)]
        cxxbridge: PathBuf,
    },
}

#[derive(clap::Args)]
struct TreeArgs {
    /// Root of the XLA source tree (the directory holding workspace2.bzl).
    #[arg(long)]
    xla_dir: PathBuf,
    /// URL of the distprof release tarball written into third_party/distributed_profiling/workspace.bzl.
    #[arg(long)]
    release_url: Option<String>,
    /// Hex SHA-256 of that tarball.
    #[arg(long)]
    release_sha256: Option<String>,
    /// Top directory inside the tarball.
    #[arg(long)]
    release_strip_prefix: Option<String>,
    /// Declare @distributed_profiling as this local directory (absolute; holding WORKSPACE and
    /// BUILD.bazel) instead of a release archive.
    #[arg(long, conflicts_with_all = ["release_url", "release_sha256", "release_strip_prefix"])]
    local_dir: Option<PathBuf>,
}

impl TreeArgs {
    /// The release to write: a local directory, an https archive with its SHA-256, or (nothing
    /// given) none: the build then names it with `--repo_env=DISTRIBUTED_PROFILING_PATH` (or
    /// URL + SHA256) or `--override_repository`.
    fn release(&self) -> anyhow::Result<Release> {
        if let Some(dir) = &self.local_dir {
            return Ok(Release::local(dir)?);
        }
        match (&self.release_url, &self.release_sha256) {
            (None, None) if self.release_strip_prefix.is_none() => Ok(Release::default()),
            (Some(url), Some(sha)) => {
                let prefix = self.release_strip_prefix.clone().unwrap_or_default();
                Ok(Release::archive(url, sha, &prefix)?)
            }
            _ => anyhow::bail!(
                "--release-url and --release-sha256 go together (and --release-strip-prefix needs both); pass the archive's https URL and `sha256sum <archive>`"
            ),
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        if !self.xla_dir.join("workspace2.bzl").is_file() {
            anyhow::bail!(
                "--xla-dir {}: no workspace2.bzl there; pass the root of an XLA checkout",
                self.xla_dir.display()
            );
        }
        Ok(())
    }
}

fn print_report(op: Op, report: &Report) {
    let verb = if op == Op::Apply { "patched" } else { "verified" };
    println!("{verb}: {}", if report.changed() { "changes written" } else { "no change needed" });
    for f in &report.files {
        println!(
            "  {:<70} {}/{} edits{}  +{} lines{}",
            f.path,
            if op == Op::Apply { f.edits_made } else { f.edits_total },
            f.edits_total,
            if op == Op::Apply { " made" } else { " present" },
            f.added_lines,
            if f.core { " (core)" } else { "" }
        );
    }
    for w in &report.written {
        println!("  wrote {w}");
    }
    println!(
        "core files: +{} lines (budget {})",
        report.core_added_lines(),
        distprof_xla::CORE_ADDED_LINES_BUDGET
    );
}

/// The one-line summary of `check --json`. `declarations_ok` is true only when every hook site
/// was planned and every name it passes was found declared in this tree.
fn check_json(result: &Result<Report, distprof_xla::PatchErrors>) -> serde_json::Value {
    use distprof_xla::PatchError as E;
    let errors: &[E] = match result {
        Ok(_) => &[],
        Err(e) => &e.0,
    };
    let anchor_problem =
        |e: &E| matches!(e, E::AnchorMissing { .. } | E::AnchorAmbiguous { .. } | E::FileMissing { .. } | E::Io { .. });
    let declaration_problem =
        |e: &E| matches!(e, E::NoDeclaredCallForm { .. } | E::UndeclaredHookCall { .. } | E::LeftoverHook { .. });
    let anchors_ok = !errors.iter().any(anchor_problem);
    let declarations_ok = anchors_ok && !errors.iter().any(declaration_problem);
    let (sites, added) = match result {
        Ok(r) => (
            r.sites
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "file": s.file,
                        "hook": s.purpose,
                        "call": s.call,
                        "declared": s.declared.iter().map(|d| serde_json::json!({
                            "passes": d.passes,
                            "at": format!("{}:{}", d.file, d.line),
                            "text": d.text,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect::<Vec<_>>(),
            Some(r.core_added_lines()),
        ),
        Err(_) => (Vec::new(), None),
    };
    serde_json::json!({
        "ok": result.is_ok(),
        "anchors_ok": anchors_ok,
        "declarations_ok": declarations_ok,
        "added_core_lines": added,
        "added_core_lines_budget": distprof_xla::CORE_ADDED_LINES_BUDGET,
        "sites": sites,
        "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Apply(tree) => {
            tree.validate()?;
            let report = distprof_xla::apply(&tree.xla_dir, &tree.release()?)?;
            print_report(Op::Apply, &report);
            Ok(ExitCode::SUCCESS)
        }
        Action::Check { tree, json } => {
            tree.validate()?;
            let result = distprof_xla::check(&tree.xla_dir, &tree.release()?);
            match &result {
                Ok(report) => print_report(Op::Check, report),
                Err(errors) => eprintln!("distprof: {} is not patched exactly: {errors}", tree.xla_dir.display()),
            }
            if json {
                println!("{}", check_json(&result));
            }
            Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Action::Package { out, staticlib, cxxbridge } => {
            let files = distprof_xla::package::write(&out, &staticlib, &cxxbridge)?;
            println!("wrote {} files of @distributed_profiling into {}", files.len(), out.display());
            Ok(ExitCode::SUCCESS)
        }
        Action::Diff { tree, out } => {
            tree.validate()?;
            let series = distprof_xla::diff(&tree.xla_dir, &tree.release()?)?;
            distprof_xla::write_series(&series, &out)
                .map_err(|e| anyhow::anyhow!("--out {}: {e}", out.display()))?;
            for p in &series.patches {
                println!("wrote {}", out.join(&p.name).display());
            }
            let total: usize = series.core_added.iter().map(|(_, n)| n).sum();
            for (path, n) in &series.core_added {
                println!("  {path}: +{n}");
            }
            println!("core files: +{total} lines (budget {})", distprof_xla::CORE_ADDED_LINES_BUDGET);
            Ok(ExitCode::SUCCESS)
        }
    }
}
