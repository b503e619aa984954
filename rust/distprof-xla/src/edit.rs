//! Edits: what goes where relative to an anchor, and how to tell whether it is already there.
//! Every edit is planned against the file as read; a planned edit is either already present
//! (skipped, which makes `apply` exactly idempotent) or a [`Change`] to make.

use crate::anchor::{self, Anchor, Found};
use crate::error::PatchError;
use std::path::Path;

/// Where inserted lines go relative to the anchor line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Before,
    After,
    /// After the end of the statement containing `call`, which must start within
    /// `within_lines` lines after the anchor (e.g. the `BuildDistributedDevices(` call that
    /// follows the `TF_RET_CHECK` anchor, however its wrapping macro is spelled).
    AfterStatement { call: &'static str, within_lines: usize },
    /// After the end of the statement that starts on the anchor line (an assignment whose
    /// arguments continue on the next lines).
    AfterAnchorStatement,
    /// After a `def` line and its one-line docstring, if any.
    AfterDefHeader,
    /// After the include block that starts at the anchor (`anchor::include_block_end`).
    AfterIncludes,
    /// Before the `return` statement holding `call`, which must start within `within_lines`
    /// lines after the anchor.
    BeforeReturn { call: &'static str, within_lines: usize },
}

/// One change to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Insert `text` (one entry per line, no newlines). With `indent`, every line not starting
    /// with `#` gets the anchor line's indentation, so a hook matches the code around it.
    Insert { anchor: Anchor, placement: Placement, text: Vec<String>, indent: bool, purpose: &'static str },
    /// Inside the Bazel rule that starts at `rule` (up to its closing `)` line), replace `find`
    /// by `replace` on the one line holding it, e.g. `deps = [` by `deps = <ours> + [`.
    ReplaceInRule { rule: Anchor, find: &'static str, replace: String, purpose: &'static str },
}

impl Edit {
    pub fn purpose(&self) -> &'static str {
        match self {
            Edit::Insert { purpose, .. } | Edit::ReplaceInRule { purpose, .. } => purpose,
        }
    }
    /// The anchor named in messages.
    pub fn anchor_text(&self) -> &'static str {
        match self {
            Edit::Insert { anchor, .. } => anchor.pattern,
            Edit::ReplaceInRule { find, .. } => find,
        }
    }
}

/// Replace `remove` lines at `at` (0-based, in the file as read) by `insert` (each ending in
/// a newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub at: usize,
    pub remove: usize,
    pub insert: Vec<String>,
}

/// An edit either already present or still to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    Present,
    Pending(Change),
}

/// Splits a file into lines that keep their newline, so writing them back is byte-exact.
pub fn split_lines(text: &str) -> Vec<String> {
    text.split_inclusive('\n').map(str::to_owned).collect()
}

fn locate(lines: &[String], anchor: Anchor, file: &Path, purpose: &'static str) -> Result<usize, PatchError> {
    match anchor::find(lines, anchor, 0, lines.len()) {
        Found::At(i) => Ok(i),
        Found::Missing => Err(PatchError::AnchorMissing {
            file: file.to_owned(),
            anchor: anchor.describe(),
            purpose,
        }),
        Found::Ambiguous(lines) => Err(PatchError::AnchorAmbiguous {
            file: file.to_owned(),
            anchor: anchor.describe(),
            lines,
            purpose,
        }),
    }
}

fn missing(file: &Path, anchor: &str, purpose: &'static str) -> PatchError {
    PatchError::AnchorMissing { file: file.to_owned(), anchor: anchor.to_owned(), purpose }
}

fn same(lines: &[String], at: usize, text: &[String]) -> bool {
    at + text.len() <= lines.len() && lines[at..at + text.len()] == *text
}

/// XLA's column limit (Google style, its `.clang-format`).
pub const COLUMN_LIMIT: usize = 80;

/// A call line longer than [`COLUMN_LIMIT`] broken as clang-format breaks it: as many
/// arguments per line as fit, continuation lines aligned just after the opening parenthesis.
/// A line without `(` or with an argument too long to fit stays as it is.
pub fn wrap_call(line: &str) -> Vec<String> {
    let Some(open) = line.find('(') else {
        return vec![line.to_owned()];
    };
    if line.len() <= COLUMN_LIMIT {
        return vec![line.to_owned()];
    }
    let (head, args) = line.split_at(open + 1);
    let align = " ".repeat(head.len());
    let parts: Vec<&str> = args.split(", ").collect();
    let mut out = vec![head.to_owned()];
    for (i, part) in parts.iter().enumerate() {
        let piece = if i + 1 < parts.len() { format!("{part},") } else { (*part).to_owned() };
        let current = out.last_mut().expect("out starts with the head");
        let fresh = current.len() == head.len() && i == 0 || current.trim().is_empty();
        if fresh {
            current.push_str(&piece);
        } else if current.len() + 1 + piece.len() <= COLUMN_LIMIT {
            current.push(' ');
            current.push_str(&piece);
        } else {
            out.push(format!("{align}{piece}"));
        }
    }
    out
}

/// The lines an insert writes: each ending in a newline, code lines indented by `pad`, and a
/// C++ hook call (`distprof::...(`) wrapped at XLA's column limit; preprocessor, blank and
/// Starlark lines as given (Buildifier, not clang-format, formats XLA's BUILD files).
fn render(text: &[String], pad: &str) -> Vec<String> {
    text.iter()
        .flat_map(|t| {
            if t.starts_with('#') || t.is_empty() {
                vec![format!("{t}\n")]
            } else if t.starts_with("distprof::") {
                wrap_call(&format!("{pad}{t}")).into_iter().map(|l| format!("{l}\n")).collect()
            } else {
                vec![format!("{pad}{t}\n")]
            }
        })
        .collect()
}

/// How many lines `edit` adds to the file read as `lines` (0 for a replacement).
pub fn added_line_count(lines: &[String], edit: &Edit) -> usize {
    match edit {
        Edit::Insert { anchor, text, indent, .. } => {
            let pad = match anchor::find(lines, *anchor, 0, lines.len()) {
                Found::At(a) if *indent => anchor::indentation(&lines[a]),
                _ => "",
            };
            render(text, pad).len()
        }
        Edit::ReplaceInRule { .. } => 0,
    }
}

/// Plans one edit against `lines`.
pub fn plan(lines: &[String], edit: &Edit, file: &Path) -> Result<Planned, PatchError> {
    match edit {
        Edit::Insert { anchor, placement, text, indent, purpose } => {
            let a = locate(lines, *anchor, file, purpose)?;
            let pad = if *indent { anchor::indentation(&lines[a]) } else { "" };
            let text = render(text, pad);
            let at = match placement {
                Placement::Before => {
                    if a >= text.len() && same(lines, a - text.len(), &text) {
                        return Ok(Planned::Present);
                    }
                    a
                }
                Placement::BeforeReturn { call, within_lines } => {
                    let at = (a + 1..(a + 1 + within_lines).min(lines.len()))
                        .find(|&i| lines[i].trim_start().starts_with("return ") && lines[i].contains(call))
                        .ok_or_else(|| missing(file, &format!("return ...{call}"), purpose))?;
                    if at >= text.len() && same(lines, at - text.len(), &text) {
                        return Ok(Planned::Present);
                    }
                    at
                }
                Placement::AfterIncludes => anchor::include_block_end(lines, a) + 1,
                Placement::After => a + 1,
                Placement::AfterStatement { call, within_lines } => {
                    let call_at = (a + 1..(a + 1 + within_lines).min(lines.len()))
                        .find(|&i| lines[i].contains(call))
                        .ok_or_else(|| missing(file, call, purpose))?;
                    anchor::statement_end(lines, a + 1, call_at).ok_or_else(|| missing(file, "end of statement `;`", purpose))? + 1
                }
                Placement::AfterAnchorStatement => {
                    anchor::statement_end(lines, a, a).ok_or_else(|| missing(file, "end of statement `;`", purpose))? + 1
                }
                Placement::AfterDefHeader => {
                    let next = lines.get(a + 1).map(|l| l.trim()).unwrap_or("");
                    let one_line_doc = next.len() >= 6 && next.starts_with("\"\"\"") && next.ends_with("\"\"\"");
                    if one_line_doc {
                        a + 2
                    } else {
                        a + 1
                    }
                }
            };
            if !matches!(placement, Placement::Before | Placement::BeforeReturn { .. }) && same(lines, at, &text) {
                return Ok(Planned::Present);
            }
            Ok(Planned::Pending(Change { at, remove: 0, insert: text }))
        }
        Edit::ReplaceInRule { rule, find, replace, purpose } => {
            let start = locate(lines, *rule, file, purpose)?;
            let end = (start..lines.len()).find(|&i| lines[i].trim_end() == ")").unwrap_or(lines.len());
            let hits: Vec<usize> = (start..end).filter(|&i| lines[i].contains(find)).collect();
            match hits.as_slice() {
                [one] => Ok(Planned::Pending(Change {
                    at: *one,
                    remove: 1,
                    insert: vec![lines[*one].replacen(find, replace, 1)],
                })),
                [] if (start..end).any(|i| lines[i].contains(replace.as_str())) => Ok(Planned::Present),
                [] => Err(missing(file, find, purpose)),
                many => Err(PatchError::AnchorAmbiguous {
                    file: file.to_owned(),
                    anchor: (*find).to_owned(),
                    lines: many.iter().map(|i| i + 1).collect(),
                    purpose,
                }),
            }
        }
    }
}

/// Applies changes planned against `lines` (in any order, non-overlapping) and returns the new
/// text.
pub fn apply_changes(lines: &[String], changes: &[Change]) -> String {
    let mut sorted: Vec<&Change> = changes.iter().collect();
    sorted.sort_by_key(|c| c.at);
    let mut out = String::new();
    let mut next = 0;
    for change in sorted {
        for line in &lines[next..change.at] {
            out.push_str(line);
        }
        for line in &change.insert {
            out.push_str(line);
        }
        next = change.at + change.remove;
    }
    for line in &lines[next..] {
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_call_is_wrapped_at_the_column_limit_aligned_after_its_parenthesis() {
        let call = "  distprof::OnGpuClientCreated(pjrt_platform_name, options.enable_mock_nccl, options.node_id, options.num_nodes, kv_store);";
        let lines = wrap_call(call);
        assert_eq!(
            lines,
            [
                "  distprof::OnGpuClientCreated(pjrt_platform_name, options.enable_mock_nccl,",
                "                               options.node_id, options.num_nodes, kv_store);",
            ]
        );
        assert!(lines.iter().all(|l| l.len() <= COLUMN_LIMIT));
        assert_eq!(lines.join(" ").split_whitespace().collect::<String>(), call.split_whitespace().collect::<String>());
        let short = "  distprof::OnTraceStop();";
        assert_eq!(wrap_call(short), [short]);
    }
}
