//! Inserts, verifies and regenerates distprof's hooks in an XLA source tree by anchor.
//!
//! Three operations, each reporting every problem at once and naming the file and anchor:
//! - [`apply`]: inserts the hooks and the Bazel wiring; exactly idempotent (a second run
//!   changes nothing).
//! - [`check`]: verifies a patched tree holds exactly what `apply` writes.
//! - [`diff`]: from a clean tree, the patch series `git apply` / `patch -p1` read.
//! - [`package::write`]: the `@distributed_profiling` repository the patched build depends on.
//!
//! Nothing is written unless every anchor of every file was found.

pub mod anchor;
pub mod decls;
pub mod edit;
pub mod error;
pub mod hooks;
pub mod package;
pub mod tree;
pub mod unified;
pub mod wiring;

pub use error::{PatchError, PatchErrors};
pub use tree::HookSite;
pub use wiring::{Release, ReleaseError};

use edit::Planned;
use std::path::{Path, PathBuf};
use tree::GeneratedState;

/// At most this many lines may be added to the core C++ files together, so the patch
/// stays reviewable and cheap to carry through XLA upgrades.
pub const CORE_ADDED_LINES_BUDGET: usize = 30;

/// Per-file outcome of `apply` or `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    pub path: String,
    pub core: bool,
    /// Edits made by this run (0 for `check`, and for `apply` on a patched file).
    pub edits_made: usize,
    pub edits_total: usize,
    /// Lines distprof adds to this file (whether by this run or before).
    pub added_lines: usize,
}

/// What `apply` or `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub files: Vec<FileReport>,
    /// Every hook call site, its call form and where the names it passes are declared.
    pub sites: Vec<HookSite>,
    /// Generated files written by this run.
    pub written: Vec<String>,
}

impl Report {
    pub fn core_added_lines(&self) -> usize {
        self.files.iter().filter(|f| f.core).map(|f| f.added_lines).sum()
    }
    pub fn changed(&self) -> bool {
        !self.written.is_empty() || self.files.iter().any(|f| f.edits_made > 0)
    }
}

fn added_lines(plan: &tree::FilePlan) -> usize {
    plan.planned.iter().map(|(e, _)| edit::added_line_count(&plan.lines, e)).sum()
}

fn report(plan: &tree::Plan, made: bool, written: Vec<String>) -> Report {
    Report {
        files: plan
            .files
            .iter()
            .map(|f| FileReport {
                path: f.path.to_owned(),
                core: f.core,
                edits_made: if made { f.pending().len() } else { 0 },
                edits_total: f.planned.len(),
                added_lines: added_lines(f),
            })
            .collect(),
        sites: plan.sites.clone(),
        written,
    }
}

fn write(root: &Path, rel: &str, content: &str) -> Result<(), PatchError> {
    let path = root.join(rel);
    let io = |e: std::io::Error| PatchError::Io { file: path.clone(), message: e.to_string() };
    if let Some(dir) = path.parent() {
        distprof_atomic_file::create_dir_all(dir).map_err(io)?;
    }
    // Whole or not at all: a killed `distprof xla apply` never leaves half a source file.
    distprof_atomic_file::write(&path, content.as_bytes()).map_err(io)
}

/// Inserts every missing hook and wiring edit into the XLA tree at `root` and (re)writes the
/// `third_party/distributed_profiling/` package. Writes nothing if any anchor is missing or
/// ambiguous.
pub fn apply(root: &Path, release: &Release) -> Result<Report, PatchErrors> {
    let plan = tree::plan(root, release)?;
    let mut errors = Vec::new();
    for file in &plan.files {
        if !file.pending().is_empty() {
            if let Err(e) = write(root, file.path, &file.patched()) {
                errors.push(e);
            }
        }
    }
    let mut written = Vec::new();
    for (rel, content, state) in &plan.generated {
        if *state != GeneratedState::Same {
            match write(root, rel, content) {
                Ok(()) => written.push(rel.clone()),
                Err(e) => errors.push(e),
            }
        }
    }
    if errors.is_empty() {
        Ok(report(&plan, true, written))
    } else {
        Err(PatchErrors(errors))
    }
}

/// Verifies that the tree at `root` holds exactly what [`apply`] writes.
pub fn check(root: &Path, release: &Release) -> Result<Report, PatchErrors> {
    let plan = tree::plan(root, release)?;
    let mut errors = Vec::new();
    for file in &plan.files {
        for (e, p) in &file.planned {
            if matches!(p, Planned::Pending(_)) {
                errors.push(PatchError::NotApplied {
                    file: PathBuf::from(file.path),
                    anchor: e.anchor_text().to_owned(),
                    purpose: e.purpose(),
                });
            }
        }
    }
    for (rel, _, state) in &plan.generated {
        match state {
            GeneratedState::Same => {}
            GeneratedState::Absent => errors.push(PatchError::FileMissing {
                file: PathBuf::from(rel),
                purpose: "the distributed_profiling package written by `distprof xla apply`",
            }),
            GeneratedState::Differs => errors.push(PatchError::GeneratedDiffers { file: PathBuf::from(rel) }),
        }
    }
    if errors.is_empty() {
        Ok(report(&plan, false, Vec::new()))
    } else {
        Err(PatchErrors(errors))
    }
}

/// One patch file of a series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchFile {
    pub name: String,
    pub content: String,
}

/// The patch series for one XLA version, and its added-line counts per core file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub patches: Vec<PatchFile>,
    /// (core file, added lines), in hook order.
    pub core_added: Vec<(String, usize)>,
}

/// Computes the patch series from the clean XLA tree at `root`: `0001-distprof-hooks.patch`
/// (the core files) and `0002-distprof-build-wiring.patch` (BUILD files, workspace2.bzl,
/// the new package).
pub fn diff(root: &Path, release: &Release) -> Result<Series, PatchErrors> {
    let plan = tree::plan(root, release)?;
    let mut errors = Vec::new();
    for file in &plan.files {
        if file.planned.iter().any(|(_, p)| matches!(p, Planned::Present)) {
            errors.push(PatchError::AlreadyPatched { file: PathBuf::from(file.path) });
        }
    }
    for (rel, _, state) in &plan.generated {
        if *state != GeneratedState::Absent {
            errors.push(PatchError::AlreadyPatched { file: PathBuf::from(rel) });
        }
    }
    if !errors.is_empty() {
        return Err(PatchErrors(errors));
    }
    let header = |what: &str| {
        format!(
            "distprof: {what}.\nGenerated by `distprof xla diff`; apply with `git apply` or `patch -p1` from the XLA root.\n\n"
        )
    };
    let mut hooks = header("hooks in the PJRT GPU client and the ROCm GPU tracer");
    let mut wiring = header("Bazel wiring (--define enable_distributed_profiling=true) and @distributed_profiling");
    let mut core_added = Vec::new();
    for file in &plan.files {
        let d = unified::file_diff(file.path, &file.lines, &file.pending());
        if file.core {
            core_added.push((file.path.to_owned(), unified::added_lines(&d)));
            hooks.push_str(&d);
        } else {
            wiring.push_str(&d);
        }
    }
    for (rel, content, _) in &plan.generated {
        wiring.push_str(&unified::new_file_diff(rel, content));
    }
    Ok(Series {
        patches: vec![
            PatchFile { name: "0001-distprof-hooks.patch".into(), content: hooks },
            PatchFile { name: "0002-distprof-build-wiring.patch".into(), content: wiring },
        ],
        core_added,
    })
}

/// Writes a series into `out_dir` (created if needed), replacing earlier `*.patch` files there so
/// a regenerated series never mixes with a stale one.
pub fn write_series(series: &Series, out_dir: &Path) -> std::io::Result<()> {
    distprof_atomic_file::create_dir_all(out_dir)?;
    for entry in std::fs::read_dir(out_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "patch") {
            std::fs::remove_file(path)?;
        }
    }
    for patch in &series.patches {
        distprof_atomic_file::write(&out_dir.join(&patch.name), patch.content.as_bytes())?;
    }
    Ok(())
}
