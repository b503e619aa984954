//! An XLA source tree: which files distprof edits there, and the plan for all of them.

use crate::anchor::{self, Found};
use crate::decls::{self, Declared};
use crate::edit::{self, Change, Edit, Planned};
use crate::error::{PatchError, PatchErrors};
use crate::hooks::{self, HookEdit};
use crate::wiring::{self, Release};
use std::path::{Path, PathBuf};

/// One file distprof edits by anchor.
#[derive(Debug, Clone)]
pub struct FileSpec {
    /// Relative to the XLA root.
    pub path: &'static str,
    /// One of the core C++ files (counted against the 30-line budget).
    pub core: bool,
    pub edits: Vec<Edit>,
    /// Hook calls, each in the form the tree's declarations allow.
    pub hooks: Vec<HookEdit>,
    /// What the file is for, for "file not found" messages.
    pub purpose: &'static str,
}

/// Every edited and generated file for the tree at hand.
#[derive(Debug, Clone)]
pub struct Layout {
    pub files: Vec<FileSpec>,
    /// Written whole: (path, content).
    pub generated: Vec<(String, String)>,
}

/// The two core files with their hooks (hook 1 in the PJRT GPU client; hooks 2 and 3 in the
/// ROCm GPU tracer), their owning BUILD files and `workspace2.bzl`.
pub fn layout(release: &Release) -> Layout {
    let files = vec![
        FileSpec {
            path: hooks::PJRT_CLIENT,
            core: true,
            edits: hooks::pjrt_client_edits(),
            hooks: hooks::pjrt_client_hooks(),
            purpose: "hook 1",
        },
        FileSpec {
            path: hooks::ROCM_TRACER,
            core: true,
            edits: hooks::rocm_tracer_edits(),
            hooks: hooks::rocm_tracer_hooks(),
            purpose: "hooks 2 and 3",
        },
        FileSpec {
            path: wiring::PJRT_CLIENT_BUILD,
            core: false,
            edits: wiring::owner_build_edits(PJRT_CLIENT_SRCS, None, "pjrt_hooks"),
            hooks: Vec::new(),
            purpose: "build wiring of hook 1",
        },
        FileSpec {
            path: wiring::ROCM_TRACER_BUILD,
            core: false,
            edits: wiring::owner_build_edits(ROCM_TRACER_SRCS, Some(ROCM_TRACER_OLDER_RULE), "profiler_hooks"),
            hooks: Vec::new(),
            purpose: "build wiring of hooks 2 and 3",
        },
        FileSpec {
            path: wiring::WORKSPACE2,
            core: false,
            edits: wiring::workspace2_edits(),
            hooks: Vec::new(),
            purpose: "declaration of @distributed_profiling",
        },
    ];
    Layout { files, generated: wiring::package_files(release) }
}

const PJRT_CLIENT_SRCS: &str = "srcs = [\"se_gpu_pjrt_client.cc\"],";
const ROCM_TRACER_SRCS: &str = "srcs = [\"device_tracer_rocm.cc\"],";
/// Before 0.7.2 `device_tracer_rocm.cc` was a source of `tsl_gpu_library(name = "device_tracer")`.
const ROCM_TRACER_OLDER_RULE: &str = "name = \"device_tracer\",";

/// The plan for one edited file.
#[derive(Debug, Clone)]
pub struct FilePlan {
    pub path: &'static str,
    pub core: bool,
    pub lines: Vec<String>,
    pub planned: Vec<(Edit, Planned)>,
}

impl FilePlan {
    pub fn pending(&self) -> Vec<Change> {
        self.planned
            .iter()
            .filter_map(|(_, p)| match p {
                Planned::Pending(c) => Some(c.clone()),
                Planned::Present => None,
            })
            .collect()
    }
    pub fn original(&self) -> String {
        self.lines.concat()
    }
    pub fn patched(&self) -> String {
        edit::apply_changes(&self.lines, &self.pending())
    }
}

/// State of a generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GeneratedState {
    Absent,
    Same,
    Differs,
}

/// One hook call site: the form chosen and where each name it passes is declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSite {
    pub file: &'static str,
    pub purpose: &'static str,
    pub call: &'static str,
    pub declared: Vec<Declared>,
}

/// The plan for a whole tree; built only when every anchor was found.
#[derive(Debug, Clone)]
pub struct Plan {
    pub root: PathBuf,
    pub files: Vec<FilePlan>,
    pub sites: Vec<HookSite>,
    pub generated: Vec<(String, String, GeneratedState)>,
}

fn read(root: &Path, rel: &str, purpose: &'static str) -> Result<String, PatchError> {
    let path = root.join(rel);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(PatchError::FileMissing { file: PathBuf::from(rel), purpose })
        }
        Err(e) => Err(PatchError::Io { file: path, message: e.to_string() }),
    }
}

fn same_anchor(a: &PatchError, b: &PatchError) -> bool {
    match (a, b) {
        (
            PatchError::AnchorMissing { file: fa, anchor: aa, .. },
            PatchError::AnchorMissing { file: fb, anchor: ab, .. },
        ) => fa == fb && aa == ab,
        _ => false,
    }
}

/// Chooses the call form of `hook` from the declarations the tree has, and refuses a hook call
/// already in the file in another form (it would not compile, or hooks another value).
fn plan_hook(
    root: &Path,
    spec: &FileSpec,
    lines: &[String],
    hook: &HookEdit,
    errors: &mut Vec<PatchError>,
) -> Option<(Edit, HookSite)> {
    let file = Path::new(spec.path);
    let at = match anchor::find(lines, hook.anchor, 0, lines.len()) {
        Found::At(i) => i,
        // edit::plan reports the missing or ambiguous anchor.
        _ => {
            // edit::plan names the missing or ambiguous anchor.
            if let Err(e) = edit::plan(lines, &hook.edit(hook.forms[0].call), file) {
                errors.push(e);
            }
            return None;
        }
    };
    let text: Vec<String> = lines.iter().map(|l| l.trim_end_matches('\n').to_owned()).collect();
    let chosen = match decls::choose(root, spec.path, &text, at, &hook.forms) {
        Ok(c) => c,
        Err(unfit) => {
            let tried = unfit
                .iter()
                .map(|u| format!("`{}` needs `{}` declared as {}", u.call, u.passes, u.looked_for))
                .collect::<Vec<_>>()
                .join("; ");
            errors.push(PatchError::NoDeclaredCallForm { file: file.to_owned(), purpose: hook.purpose, tried });
            return None;
        }
    };
    let prefix = hook.call_prefix();
    for (i, line) in text.iter().enumerate() {
        let found = line.trim();
        // A long call is wrapped (edit::wrap_call): its first line is a prefix of the call.
        if found.starts_with(prefix) && !chosen.form.call.starts_with(found) {
            errors.push(PatchError::UndeclaredHookCall {
                file: file.to_owned(),
                line: i + 1,
                found: found.to_owned(),
                expected: chosen.form.call.to_owned(),
            });
        }
    }
    let site = HookSite { file: spec.path, purpose: hook.purpose, call: chosen.form.call, declared: chosen.declared };
    Some((hook.edit(chosen.form.call), site))
}

/// Files an older distprof patched (the coordination agent and its BUILD, both copies) and this
/// one does not: whatever of distprof is left there would not build against today's package.
const NO_LONGER_PATCHED: [&str; 4] = [
    "xla/pjrt/distributed/coordination/coordination_service_agent.cc",
    "xla/pjrt/distributed/coordination/BUILD",
    "xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc",
    "xla/tsl/distributed_runtime/coordination/BUILD",
];

fn leftovers(root: &Path, errors: &mut Vec<PatchError>) {
    for rel in NO_LONGER_PATCHED {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else { continue };
        if let Some((i, line)) = text.lines().enumerate().find(|(_, l)| anchor::is_ours(l)) {
            errors.push(PatchError::LeftoverHook { file: PathBuf::from(rel), line: i + 1, found: line.trim().to_owned() });
        }
    }
}

/// Reads every file and locates every anchor; returns all problems at once.
pub fn plan(root: &Path, release: &Release) -> Result<Plan, PatchErrors> {
    let layout = layout(release);
    let mut errors = Vec::new();
    leftovers(root, &mut errors);
    let mut files = Vec::new();
    let mut sites = Vec::new();
    for spec in &layout.files {
        let text = match read(root, spec.path, spec.purpose) {
            Ok(t) => t,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let lines = edit::split_lines(&text);
        let mut edits = spec.edits.clone();
        for hook in &spec.hooks {
            if let Some((e, site)) = plan_hook(root, spec, &lines, hook, &mut errors) {
                edits.push(e);
                sites.push(site);
            }
        }
        let mut planned = Vec::new();
        for e in &edits {
            match edit::plan(&lines, e, Path::new(spec.path)) {
                Ok(p) => planned.push((e.clone(), p)),
                // Several edits may share an anchor (a BUILD rule's `srcs` line locates both
                // `local_defines` and `deps`); one message per missing anchor is enough.
                Err(err) if errors.iter().any(|seen| same_anchor(seen, &err)) => {}
                Err(err) => errors.push(err),
            }
        }
        files.push(FilePlan { path: spec.path, core: spec.core, lines, planned });
    }
    let mut generated = Vec::new();
    for (rel, content) in layout.generated {
        let state = match std::fs::read_to_string(root.join(&rel)) {
            Ok(existing) if existing == content => GeneratedState::Same,
            Ok(_) => GeneratedState::Differs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => GeneratedState::Absent,
            Err(e) => {
                errors.push(PatchError::Io { file: root.join(&rel), message: e.to_string() });
                continue;
            }
        };
        generated.push((rel, content, state));
    }
    if errors.is_empty() {
        Ok(Plan { root: root.to_owned(), files, sites, generated })
    } else {
        Err(PatchErrors(errors))
    }
}
