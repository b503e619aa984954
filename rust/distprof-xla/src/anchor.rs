//! Anchors: the lines of XLA source the hooks are placed relative to, and how they are found.
//! Matching is by substring on one line, so a churned neighbourhood (renamed macros, moved
//! functions, reformatted arguments elsewhere) does not matter as long as the anchor line is
//! still there.

/// Which of the matching lines an anchor designates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrence {
    /// Exactly one line may match; several matches are an error (the place is ambiguous).
    Unique,
    /// The first matching line (for "the first #include", "the first load(").
    First,
}

/// A line of XLA source that locates an edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// Text the line must contain.
    pub pattern: &'static str,
    pub occurrence: Occurrence,
    /// Tried (with the same occurrence rule) only when `pattern` matches no line: the spelling
    /// of an older XLA, e.g. the rule that owned a file before it got its own target.
    pub fallback: Option<&'static str>,
}

impl Anchor {
    pub const fn unique(pattern: &'static str) -> Self {
        Self { pattern, occurrence: Occurrence::Unique, fallback: None }
    }
    pub const fn first(pattern: &'static str) -> Self {
        Self { pattern, occurrence: Occurrence::First, fallback: None }
    }
    pub const fn or(self, fallback: &'static str) -> Self {
        Self { fallback: Some(fallback), ..self }
    }
    /// How messages name the anchor.
    pub fn describe(&self) -> String {
        match self.fallback {
            None => self.pattern.to_owned(),
            Some(f) => format!("{}` (or, in older XLA, `{f}", self.pattern),
        }
    }
}

/// Lines we insert all name distprof; they are never anchors, so that re-running `apply` on a
/// patched file finds the same upstream lines as the first run (exact idempotence), e.g. our own
/// `load(` line is not taken for "the first load(".
pub fn is_ours(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.contains("distprof") || lower.contains("distributed_profiling")
}

/// Result of looking an anchor up in a file.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// 0-based line index.
    At(usize),
    Missing,
    /// 1-based line numbers of every match, for the error message.
    Ambiguous(Vec<usize>),
}

/// Finds `anchor` among `lines[from..to]`, falling back to its older spelling.
pub fn find(lines: &[String], anchor: Anchor, from: usize, to: usize) -> Found {
    match (find_pattern(lines, anchor.pattern, anchor.occurrence, from, to), anchor.fallback) {
        (Found::Missing, Some(fallback)) => find_pattern(lines, fallback, anchor.occurrence, from, to),
        (found, _) => found,
    }
}

fn find_pattern(lines: &[String], pattern: &str, occurrence: Occurrence, from: usize, to: usize) -> Found {
    let to = to.min(lines.len());
    let mut hits = (from..to).filter(|&i| lines[i].contains(pattern) && !is_ours(&lines[i]));
    let Some(first) = hits.next() else {
        return Found::Missing;
    };
    match occurrence {
        Occurrence::First => Found::At(first),
        Occurrence::Unique => {
            let rest: Vec<usize> = hits.collect();
            if rest.is_empty() {
                Found::At(first)
            } else {
                Found::Ambiguous(std::iter::once(first).chain(rest).map(|i| i + 1).collect())
            }
        }
    }
}

/// Index of the last line of the C++ statement that contains `lines[call]`, where the
/// statement starts at line `from` (after a previous statement or block). Parentheses are
/// counted from `from`, so a statement split over many lines (`ASSIGN_OR_RETURN(\n x,\n f(...));`)
/// ends where its parentheses balance and the line ends with `;`.
pub fn statement_end(lines: &[String], from: usize, call: usize) -> Option<usize> {
    let mut depth: i64 = 0;
    for (i, line) in lines.iter().enumerate().skip(from) {
        let code = line.split("//").next().unwrap_or("");
        depth += code.matches('(').count() as i64 - code.matches(')').count() as i64;
        if i >= call && depth == 0 && code.trim_end().ends_with(';') {
            return Some(i);
        }
    }
    None
}

/// Index of the last line of the include block that starts at `first_include`: the last
/// preprocessor line, before the first line of code, that leaves the `#if` nesting where
/// `first_include` sits (a file wrapped whole in `#if TENSORFLOW_USE_ROCM` has its includes
/// one level in). Lines after it at that nesting are code, so what goes there follows every
/// unconditional include and the conditional blocks among them, as Google style puts a
/// conditional include. Our own lines are skipped, so a patched file ends at the same line.
pub fn include_block_end(lines: &[String], first_include: usize) -> usize {
    let depth_change = |directive: &str| -> i32 {
        let word = directive.trim_start_matches('#').trim_start();
        if word.starts_with("if") {
            1
        } else if word.starts_with("endif") {
            -1
        } else {
            0
        }
    };
    let (mut depth, mut end, mut in_comment, mut continued) = (0i32, first_include, false, false);
    for (i, line) in lines.iter().enumerate().skip(first_include) {
        let text = line.trim();
        if continued {
            // The next line of a directive ending in `\` (a long `#if ... || \`).
            continued = text.ends_with('\\');
            if !continued && depth == 0 {
                end = i;
            }
            continue;
        }
        if in_comment {
            in_comment = !text.contains("*/");
            continue;
        }
        if text.is_empty() || text.starts_with("//") || is_ours(line) {
            continue;
        }
        if text.starts_with("/*") {
            in_comment = !text.contains("*/");
            continue;
        }
        if !text.starts_with('#') {
            break;
        }
        depth += depth_change(text);
        continued = text.ends_with('\\');
        if depth == 0 && !continued {
            end = i;
        }
        if depth < 0 {
            // The `#endif` of a block opened before the first include: the block holding
            // the includes ends here, and so does the include block.
            break;
        }
    }
    end
}

/// Leading whitespace of a line.
pub fn indentation(line: &str) -> &str {
    let trimmed = line.trim_start_matches([' ', '\t']);
    &line[..line.len() - trimmed.len()]
}
