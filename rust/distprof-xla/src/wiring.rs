//! The Bazel wiring: the `third_party/distributed_profiling/` package we write into XLA's tree
//! (modelled on `third_party/compute_library`), the repository declaration in `workspace2.bzl`,
//! and `local_defines` + deps on the targets that own the hooked files.
//!
//! The `config_setting` lives in XLA's tree, not in `@distributed_profiling`: select keys are
//! always resolved, so a key in the external repository would download it even with the feature
//! off. Without `--define enable_distributed_profiling=true` every select below yields `[]`, the
//! repository is never fetched, and the build equals upstream's.

use crate::anchor::Anchor;
use crate::edit::{Edit, Placement};

pub const PACKAGE: &str = "third_party/distributed_profiling";
pub const WORKSPACE2: &str = "workspace2.bzl";
pub const PJRT_CLIENT_BUILD: &str = "xla/pjrt/gpu/BUILD";
pub const ROCM_TRACER_BUILD: &str = "xla/backends/profiler/gpu/BUILD";

/// Where `@distributed_profiling` comes from: a release tarball holding `lib/libdistprof.a`,
/// `cc_hooks/distprof_hooks.h` and a `BUILD.bazel` with the `pjrt_hooks` and `profiler_hooks`
/// targets, or a local directory holding the same.
/// Build values with [`Release::archive`] or [`Release::local`], which refuse what would break
/// XLA's build or the Starlark it is written into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Canonical URL of the tarball; `tf_mirror_urls` adds the mirror XLA's rule requires first.
    pub url: String,
    /// Hex SHA-256 of the tarball.
    pub sha256: String,
    /// Top directory inside the tarball ("" for none).
    pub strip_prefix: String,
    /// When set, `@distributed_profiling` is this directory and the three archive fields are
    /// unused.
    pub local_dir: Option<String>,
}

/// A release the tool refuses to write into XLA's tree.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReleaseError {
    /// XLA's `tf_mirror_urls` gives a non-https URL no mirror, and `tf_http_archive` refuses an
    /// archive with a single URL while `workspace2.bzl` loads, i.e. in every build.
    #[error("release URL {url:?} is not https: XLA's tf_mirror_urls gives it no mirror and tf_http_archive then fails while workspace2.bzl loads, breaking every XLA build with the define on or off; publish the archive at an https:// URL, or use --local-dir")]
    NotHttps { url: String },
    #[error("release SHA-256 {sha256:?} is not 64 hex digits; pass the output of `sha256sum <archive>`")]
    BadChecksum { sha256: String },
    #[error("release SHA-256 is all zeros (the placeholder); pass the archive's real SHA-256 (`sha256sum <archive>`)")]
    PlaceholderChecksum,
    #[error("{what} {value:?} holds a control character, which cannot be written into a Starlark string; pass it without")]
    ControlCharacter { what: &'static str, value: String },
    #[error("--local-dir {dir}: {problem}")]
    LocalDir { dir: String, problem: &'static str },
}

fn no_control(what: &'static str, value: &str) -> Result<(), ReleaseError> {
    if value.chars().any(char::is_control) {
        return Err(ReleaseError::ControlCharacter { what, value: value.to_owned() });
    }
    Ok(())
}

impl Release {
    /// An https archive and its SHA-256 (lower-cased).
    pub fn archive(url: &str, sha256: &str, strip_prefix: &str) -> Result<Self, ReleaseError> {
        no_control("release URL", url)?;
        no_control("strip prefix", strip_prefix)?;
        if !url.starts_with("https://") {
            return Err(ReleaseError::NotHttps { url: url.to_owned() });
        }
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ReleaseError::BadChecksum { sha256: sha256.to_owned() });
        }
        if sha256.bytes().all(|b| b == b'0') {
            return Err(ReleaseError::PlaceholderChecksum);
        }
        Ok(Self {
            url: url.to_owned(),
            sha256: sha256.to_ascii_lowercase(),
            strip_prefix: strip_prefix.to_owned(),
            local_dir: None,
        })
    }

    /// A local directory (absolute: a repository rule resolves a relative one against its own
    /// directory, which is never what is meant) holding `BUILD.bazel`.
    pub fn local(dir: &std::path::Path) -> Result<Self, ReleaseError> {
        let shown = dir.display().to_string();
        let problem = |problem| ReleaseError::LocalDir { dir: shown.clone(), problem };
        if !dir.is_absolute() {
            return Err(problem("not an absolute path; Bazel would resolve it against XLA's root"));
        }
        if !dir.join("BUILD.bazel").is_file() && !dir.join("BUILD").is_file() {
            return Err(problem("no BUILD.bazel there; pass the directory `distprof xla package` wrote"));
        }
        let path = dir.to_str().ok_or_else(|| problem("not valid UTF-8"))?;
        no_control("--local-dir", path)?;
        Ok(Self { local_dir: Some(path.to_owned()), ..Self::default() })
    }
}

/// `value` as a Starlark string literal.
pub fn starlark_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Default for Release {
    /// No source: what a shipped series and `apply` without `--local-dir`/`--release-url` write.
    /// No distprof archive is published, so there is nothing to point at; with
    /// `--repo_env=DISTRIBUTED_PROFILING=1` the repository is then the stand-in, whose targets
    /// fail the build saying what to pass (a placeholder URL would fail the download instead).
    fn default() -> Self {
        Self { url: String::new(), sha256: String::new(), strip_prefix: String::new(), local_dir: None }
    }
}

/// Files we write whole: path relative to the XLA root, and content.
pub fn package_files(release: &Release) -> Vec<(String, String)> {
    let build = r#"# Written by distprof (`distprof xla apply`). Switch for distributed profiling; see
# build_defs.bzl. Public because config_setting visibility is enforced since Bazel 6.
package(default_visibility = ["//visibility:public"])

exports_files(["build_defs.bzl", "workspace.bzl"])

config_setting(
    name = "enabled",
    define_values = {"enable_distributed_profiling": "true"},
)
"#;
    let defs = r#"# Written by distprof (`distprof xla apply`). Macros selecting on
# --define enable_distributed_profiling=true; without it they all return [].

def if_distributed_profiling(if_true, if_false = []):
    """Returns `if_true` when distributed profiling is enabled, else `if_false`."""

    # str(Label(...)) resolves against this file's repository (`@xla` inside a jax build) and,
    # unlike a Label key, is accepted by every Bazel from 4 to 8.
    return select({
        str(Label("//third_party/distributed_profiling:enabled")): if_true,
        "//conditions:default": if_false,
    })

def distributed_profiling_defines():
    """The macro guarding every hook; for `local_defines`, so it never leaks to dependents."""
    return if_distributed_profiling(["XLA_ENABLE_DISTRIBUTED_PROFILING=1"])

def distributed_profiling_deps(target):
    """`@distributed_profiling//:<target>` when enabled, else nothing (nothing is fetched)."""
    return if_distributed_profiling(["@distributed_profiling//:" + target])
"#;
    let source = match &release.local_dir {
        Some(dir) => format!("_SOURCE = struct(path = {}, url = None, sha256 = None, strip_prefix = None)", starlark_string(dir)),
        None if release.url.is_empty() => "_SOURCE = struct(path = None, url = None, sha256 = None, strip_prefix = None)".to_owned(),
        None => format!(
            "_SOURCE = struct(path = None, url = {}, sha256 = {}, strip_prefix = {})",
            starlark_string(&release.url),
            starlark_string(&release.sha256),
            starlark_string(&release.strip_prefix),
        ),
    };
    let workspace = WORKSPACE_BZL.replace("_SOURCE = None", &source);
    vec![
        (format!("{PACKAGE}/BUILD.bazel"), build.to_owned()),
        (format!("{PACKAGE}/build_defs.bzl"), defs.to_owned()),
        (format!("{PACKAGE}/workspace.bzl"), workspace),
    ]
}

/// `third_party/distributed_profiling/workspace.bzl`: a configure-style repository rule, as XLA
/// declares its optional local dependencies (`*_configure` rules reading `--repo_env`). A
/// repository rule cannot see `--define`, and `bazel query 'deps(...)'`, `fetch`, `sync` and
/// `vendor` follow every `select()` branch, so nothing may be fetched unless the user names the
/// repository: without a `--repo_env` below it is a stand-in whose targets fail the build with
/// the fix in the message, which keeps those commands working offline with the feature off.
/// `_SOURCE = None` is replaced by the source `apply` was given (all `None`: none).
const WORKSPACE_BZL: &str = r#"# Written by distprof (`distprof xla apply`). @distributed_profiling, configured like XLA's
# optional local dependencies: nothing is fetched or read unless the build names it with
#   --repo_env=DISTRIBUTED_PROFILING=1                   the source below (given to `apply`)
#   --repo_env=DISTRIBUTED_PROFILING_PATH=/abs/dir       a local directory (WORKSPACE, BUILD.bazel)
#   --repo_env=DISTRIBUTED_PROFILING_URL=https://...  --repo_env=DISTRIBUTED_PROFILING_SHA256=<hex>
#       [--repo_env=DISTRIBUTED_PROFILING_STRIP_PREFIX=<dir>]   an archive
# together with --define enable_distributed_profiling=true. Otherwise the repository is a
# stand-in whose targets fail the build naming these flags, so query, fetch, sync and vendor
# work with the feature off and without access to distprof.

_SOURCE = None

_ENV = [
    "DISTRIBUTED_PROFILING",
    "DISTRIBUTED_PROFILING_PATH",
    "DISTRIBUTED_PROFILING_URL",
    "DISTRIBUTED_PROFILING_SHA256",
    "DISTRIBUTED_PROFILING_STRIP_PREFIX",
]

_TARGETS = ["pjrt_hooks", "profiler_hooks"]

# What the stand-in's targets say when built: no --repo_env named a source, or
# DISTRIBUTED_PROFILING=1 did and `apply` was given none.
_NOT_CONFIGURED = "@distributed_profiling is not configured; with --define enable_distributed_profiling=true also pass --repo_env=DISTRIBUTED_PROFILING=1, or --repo_env=DISTRIBUTED_PROFILING_PATH=<dir>, or --repo_env=DISTRIBUTED_PROFILING_URL=<https url> with --repo_env=DISTRIBUTED_PROFILING_SHA256=<hex>"
_NO_SOURCE = "@distributed_profiling has no source: --repo_env=DISTRIBUTED_PROFILING=1 uses the one given to distprof xla apply, and this tree was patched without one (a shipped patch series, or apply without --local-dir or --release-url); pass --repo_env=DISTRIBUTED_PROFILING_PATH=<the directory distprof xla package wrote> instead, or --repo_env=DISTRIBUTED_PROFILING_URL=<https url> with --repo_env=DISTRIBUTED_PROFILING_SHA256=<hex>, or run distprof xla apply --local-dir <that directory>"

_STANDIN = """
package(default_visibility = ["//visibility:public"])

[genrule(
    name = name + "_unconfigured",
    outs = [name + "_unconfigured.cc"],
    cmd = "echo 'distprof: %s' >&2; exit 1",
) for name in %s]

[cc_library(name = name, srcs = [name + "_unconfigured.cc"]) for name in %s]
"""

def _standin(ctx, message):
    ctx.file("WORKSPACE", "workspace(name = \"distributed_profiling\")\n")
    ctx.file("BUILD.bazel", _STANDIN % (message, _TARGETS, _TARGETS))

def _env(ctx, name):
    return ctx.os.environ.get(name, "")

def _use_dir(ctx, path):
    if not path.startswith("/"):
        fail("DISTRIBUTED_PROFILING_PATH=%s: not an absolute path" % path)
    root = ctx.path(path)
    if not root.exists:
        fail("DISTRIBUTED_PROFILING_PATH=%s: no such directory" % path)
    for entry in root.readdir():
        ctx.symlink(entry, entry.basename)

def _use_archive(ctx, url, sha256, strip_prefix):
    if not url.startswith("https://"):
        fail("DISTRIBUTED_PROFILING_URL=%s: not https; publish the archive at an https URL or use DISTRIBUTED_PROFILING_PATH" % url)
    if len(sha256) != 64:
        fail("DISTRIBUTED_PROFILING_SHA256=%s: not 64 hex digits; pass the output of `sha256sum <archive>`" % sha256)
    ctx.download_and_extract(url = url, sha256 = sha256, stripPrefix = strip_prefix)

def _distributed_profiling_configure_impl(ctx):
    if _env(ctx, "DISTRIBUTED_PROFILING_PATH"):
        _use_dir(ctx, _env(ctx, "DISTRIBUTED_PROFILING_PATH"))
    elif _env(ctx, "DISTRIBUTED_PROFILING_URL"):
        _use_archive(
            ctx,
            _env(ctx, "DISTRIBUTED_PROFILING_URL"),
            _env(ctx, "DISTRIBUTED_PROFILING_SHA256"),
            _env(ctx, "DISTRIBUTED_PROFILING_STRIP_PREFIX"),
        )
    elif _env(ctx, "DISTRIBUTED_PROFILING") == "1":
        if _SOURCE.path:
            _use_dir(ctx, _SOURCE.path)
        elif _SOURCE.url:
            _use_archive(ctx, _SOURCE.url, _SOURCE.sha256, _SOURCE.strip_prefix)
        else:
            _standin(ctx, _NO_SOURCE)
    else:
        _standin(ctx, _NOT_CONFIGURED)

distributed_profiling_configure = repository_rule(
    implementation = _distributed_profiling_configure_impl,
    environ = _ENV,
)

def repo():
    distributed_profiling_configure(name = "distributed_profiling")
"#;

pub fn workspace2_edits() -> Vec<Edit> {
    vec![
        Edit::Insert {
            anchor: Anchor::unique("load(\"//third_party:repo.bzl\", \"tf_http_archive\", \"tf_mirror_urls\")"),
            placement: Placement::After,
            text: vec!["load(\"//third_party/distributed_profiling:workspace.bzl\", distributed_profiling = \"repo\")".into()],
            indent: false,
            purpose: "load of the @distributed_profiling declaration",
        },
        Edit::Insert {
            anchor: Anchor::unique("def _initialize_third_party():"),
            placement: Placement::AfterDefHeader,
            text: vec!["    distributed_profiling()".into()],
            indent: false,
            purpose: "declaration of @distributed_profiling",
        },
    ]
}

/// Edits of the BUILD file owning `src`: the macros' load, `local_defines`, and the hooks
/// target of `@distributed_profiling` prepended to `deps`.
/// `srcs_line` (`srcs = ["x.cc"],`) identifies the owning rule in every version, whatever its
/// name (`se_gpu_pjrt_client` up to 0.10.x, `se_gpu_pjrt_client_impl` after).
/// `older_rule` names the rule that owned the file in older XLA (e.g. `device_tracer` before the
/// ROCm tracer got its own target in 0.7.2).
pub fn owner_build_edits(srcs_line: &'static str, older_rule: Option<&'static str>, hooks_target: &str) -> Vec<Edit> {
    let rule = match older_rule {
        Some(name) => Anchor::unique(srcs_line).or(name),
        None => Anchor::unique(srcs_line),
    };
    vec![
        Edit::Insert {
            // Loads must precede other statements; before the first one is always valid.
            anchor: Anchor::first("load("),
            placement: Placement::Before,
            text: vec![
                "load(\"//third_party/distributed_profiling:build_defs.bzl\", \"distributed_profiling_defines\", \"distributed_profiling_deps\")".into(),
            ],
            indent: false,
            purpose: "load of the distributed_profiling macros",
        },
        Edit::Insert {
            anchor: rule,
            placement: Placement::After,
            text: vec!["local_defines = distributed_profiling_defines(),".into()],
            indent: true,
            purpose: "the hook macro on the owning target",
        },
        Edit::ReplaceInRule {
            rule,
            find: "deps = [",
            replace: format!("deps = distributed_profiling_deps(\"{hooks_target}\") + ["),
            purpose: "the hooks library in the owning target's deps",
        },
    ]
}
