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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("l{i}\n")).collect()
    }

    #[test]
    fn distant_changes_make_separate_hunks_with_shifted_new_numbers() {
        let changes = [
            Change { at: 2, remove: 0, insert: vec!["a\n".into()] },
            Change { at: 15, remove: 1, insert: vec!["b\n".into(), "c\n".into()] },
        ];
        let diff = file_diff("f", &lines(20), &changes);
        let expected = "diff --git a/f b/f\n--- a/f\n+++ b/f\n\
            @@ -1,5 +1,6 @@\n l1\n l2\n+a\n l3\n l4\n l5\n\
            @@ -13,7 +14,8 @@\n l13\n l14\n l15\n-l16\n+b\n+c\n l17\n l18\n l19\n";
        assert_eq!(diff, expected);
        assert_eq!(added_lines(&diff), 3);
    }

    #[test]
    fn close_changes_share_one_hunk_and_file_edges_clip_context() {
        let changes = [
            Change { at: 0, remove: 0, insert: vec!["top\n".into()] },
            Change { at: 5, remove: 0, insert: vec!["end\n".into()] },
        ];
        let diff = file_diff("f", &lines(5), &changes);
        assert_eq!(
            diff,
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,5 +1,7 @@\n+top\n l1\n l2\n l3\n l4\n l5\n+end\n"
        );
    }
}
