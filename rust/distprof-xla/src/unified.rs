//! Unified diffs of our own changes, in the form `git apply` and `patch -p1` read. The changes
//! are known exactly (insertions and one-line replacements at known lines), so no diff
//! algorithm is needed: each change becomes a hunk, with neighbouring hunks merged when their
//! context overlaps, as `diff -U3` does.

use crate::edit::Change;

/// Lines of context around each change.
const CONTEXT_LINES: usize = 3;

fn push_line(out: &mut String, prefix: char, line: &str) {
    out.push(prefix);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// Diff of the file `path` (relative, `/`-separated) from `lines` to `lines` with `changes`.
/// Returns "" when there are no changes.
pub fn file_diff(path: &str, lines: &[String], changes: &[Change]) -> String {
    if changes.is_empty() {
        return String::new();
    }
    let mut changes: Vec<&Change> = changes.iter().collect();
    changes.sort_by_key(|c| c.at);
    // Group changes whose context windows touch.
    let mut groups: Vec<Vec<&Change>> = Vec::new();
    for change in changes {
        match groups.last_mut() {
            Some(group) => {
                let last = group.last().expect("groups are never empty");
                if change.at <= last.at + last.remove + 2 * CONTEXT_LINES {
                    group.push(change);
                } else {
                    groups.push(vec![change]);
                }
            }
            None => groups.push(vec![change]),
        }
    }
    let mut out = format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n");
    let mut shift: i64 = 0; // new line number minus old line number before the current hunk
    for group in groups {
        let first = group[0];
        let last = group[group.len() - 1];
        let start = first.at.saturating_sub(CONTEXT_LINES);
        let end = (last.at + last.remove + CONTEXT_LINES).min(lines.len());
        let mut body = String::new();
        let (mut old_count, mut new_count) = (0usize, 0usize);
        let mut i = start;
        for change in &group {
            for line in &lines[i..change.at] {
                push_line(&mut body, ' ', line);
                old_count += 1;
                new_count += 1;
            }
            for line in &lines[change.at..change.at + change.remove] {
                push_line(&mut body, '-', line);
                old_count += 1;
            }
            for line in &change.insert {
                push_line(&mut body, '+', line);
                new_count += 1;
            }
            i = change.at + change.remove;
        }
        for line in &lines[i..end] {
            push_line(&mut body, ' ', line);
            old_count += 1;
            new_count += 1;
        }
        // Unified diff numbers are 1-based; an empty range names the line before it.
        let old_start = if old_count == 0 { start } else { start + 1 };
        let new_start_0 = start as i64 + shift;
        let new_start = if new_count == 0 { new_start_0 } else { new_start_0 + 1 };
        out.push_str(&format!("@@ -{old_start},{old_count} +{new_start},{new_count} @@\n"));
        out.push_str(&body);
        shift += new_count as i64 - old_count as i64;
    }
    out
}

/// Diff creating the file `path` with `content`.
pub fn new_file_diff(path: &str, content: &str) -> String {
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    let mut out = format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
        lines.len()
    );
    for line in lines {
        push_line(&mut out, '+', line);
    }
    out
}

/// Number of `+` lines in a diff body (not counting the `+++` header).
pub fn added_lines(diff: &str) -> usize {
    diff.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")).count()
}
