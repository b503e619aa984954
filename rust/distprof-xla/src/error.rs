//! What can stop `apply`, `check` or `diff`. Every variant names the file and the anchor or
//! value involved and says what to do next, because the reader is someone upgrading XLA.

use std::path::PathBuf;

/// One problem found in an XLA tree. `apply`, `check` and `diff` collect all of them before
/// reporting, so a user sees everything that moved in one run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// A file the hooks or the build wiring go into does not exist.
    #[error("{file}: file not found (needed for {purpose}); is --xla-dir the root of an XLA checkout (it holds workspace2.bzl)?")]
    FileMissing { file: PathBuf, purpose: &'static str },
    /// An anchor line is not in the file: XLA moved or rewrote it.
    #[error("{file}: anchor `{anchor}` not found ({purpose}); XLA moved this code: find the new place by hand, then update the anchor in rust/distprof-xla/src/hooks.rs or wiring.rs")]
    AnchorMissing { file: PathBuf, anchor: String, purpose: &'static str },
    /// An anchor that must be unique matches several lines, so the place is ambiguous.
    #[error("{file}: anchor `{anchor}` is ambiguous: it matches lines {lines:?} ({purpose}); make the anchor more specific")]
    AnchorAmbiguous { file: PathBuf, anchor: String, lines: Vec<usize>, purpose: &'static str },
    /// No call form of a hook passes only names this version declares.
    #[error("{file}: no call form of {purpose} fits this XLA version ({tried}); XLA renamed what the hook passes: add a call form in rust/distprof-xla/src/hooks.rs")]
    NoDeclaredCallForm { file: PathBuf, purpose: &'static str, tried: String },
    /// A hook call in the file is not the form this version's declarations allow, e.g. written
    /// by an older distprof that picked the form by file path.
    #[error("{file}:{line}: hook call `{found}` is not the form this version declares (`{expected}`); restore the file (`git checkout -- {file}`) and run `distprof xla apply`")]
    UndeclaredHookCall { file: PathBuf, line: usize, found: String, expected: String },
    /// A file distprof no longer patches still holds what an older distprof wrote there (the
    /// coordination agent's hook and its BUILD wiring, removed when hook 3 moved to the ROCm
    /// tracer); it would call a hook or name a target that no longer exists.
    #[error("{file}:{line}: `{found}` was written by an older distprof (the coordination agent hook, removed); restore the file (`git checkout -- {file}`) and run `distprof xla apply`")]
    LeftoverHook { file: PathBuf, line: usize, found: String },
    /// `check` found an edit that is not (or not exactly) in the tree.
    #[error("{file}: not patched: {purpose} (expected after/at anchor `{anchor}`); run `distprof xla apply`")]
    NotApplied { file: PathBuf, anchor: String, purpose: &'static str },
    /// A file written entirely by distprof differs from what this version of the tool writes.
    #[error("{file}: differs from the content distprof writes; run `distprof xla apply` to rewrite it")]
    GeneratedDiffers { file: PathBuf },
    /// `diff` needs the upstream text of every file and got a patched one.
    #[error("{file}: already patched; run `distprof xla diff` on a clean checkout (e.g. `git -C <xla> stash`)")]
    AlreadyPatched { file: PathBuf },
    /// Reading or writing a file failed.
    #[error("{file}: {message}")]
    Io { file: PathBuf, message: String },
}

/// All problems of one run, in file order.
#[derive(Debug, PartialEq, Eq)]
pub struct PatchErrors(pub Vec<PatchError>);

impl std::fmt::Display for PatchErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} problem(s):", self.0.len())?;
        for error in &self.0 {
            write!(f, "\n  - {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PatchErrors {}
