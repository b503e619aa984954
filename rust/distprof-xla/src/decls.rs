//! The declarations behind every identifier a hook passes, read from the tree being patched.
//!
//! A hook call compiles only if each name it passes is declared where the call site can see
//! it, and XLA renames members between versions (the coordination agent's `task_` of type
//! `CoordinatedTask` became the `int`-like `task_id_` in jax 0.9.1, which is why an earlier
//! agent hook could not follow the file path). So every hook offers one or
//! more [`CallForm`]s, each listing what it needs declared; [`choose`] picks the first form
//! whose declarations this tree has, and names what is missing when none fits. Matching is
//! textual (a declaration fragment such as `TaskId task_id_` inside the right class or
//! function), which is what a reader checking the patch by eye would do; the compile check
//! (patches/xla/compile_check.sh) confirms it with a compiler where the headers allow.

use std::path::Path;

/// Where a passed name must be declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A parameter or local of the function enclosing the call site, declared between the
    /// function's signature and the anchor.
    Enclosing,
    /// A member of a class or struct defined in one of `files` (relative to the XLA root) or in
    /// the hooked file itself.
    Member { class: ClassName, files: Vec<&'static str> },
}

/// Which class a [`Scope::Member`] lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassName {
    Named(&'static str),
    /// The class of the method enclosing the call site (`X` in `absl::Status X::Connect() {`).
    OfEnclosingMethod,
}

/// One name a call passes and the declarations that make it valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decl {
    /// As written in the call, e.g. `options.node_id` or `task_id_`.
    pub passes: &'static str,
    /// Any of these fragments declares it (type and name, e.g. `TaskId task_id_`).
    pub declared_as: Vec<&'static str>,
    pub scope: Scope,
}

/// One spelling of a hook call and what it needs declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallForm {
    pub call: &'static str,
    pub decls: Vec<Decl>,
}

/// Where a passed name was found declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub passes: &'static str,
    /// Relative to the XLA root.
    pub file: String,
    /// 1-based.
    pub line: usize,
    pub text: String,
}

/// The form chosen for one hook at one call site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub form: CallForm,
    pub declared: Vec<Declared>,
}

/// Why a form did not fit: the first of its names found nowhere, and where it was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub call: &'static str,
    pub passes: &'static str,
    pub looked_for: String,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// `fragment` occurs in `line` as whole tokens (not inside a longer identifier).
pub fn declares(line: &str, fragment: &str) -> bool {
    let text = code(line);
    let mut from = 0;
    while let Some(pos) = text[from..].find(fragment) {
        let at = from + pos;
        let before = text[..at].chars().next_back();
        let after = text[at + fragment.len()..].chars().next();
        let starts_clean = !fragment.starts_with(is_ident) || !before.is_some_and(is_ident);
        let ends_clean = !fragment.ends_with(is_ident) || !after.is_some_and(is_ident);
        if starts_clean && ends_clean {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Index of the first line of the function enclosing line `at`: the nearest line at or before
/// it that starts in column 0 and is code (not a preprocessor line, comment or closing brace).
pub fn enclosing_function(lines: &[String], at: usize) -> Option<usize> {
    (0..=at.min(lines.len().saturating_sub(1))).rev().find(|&i| {
        let l = &lines[i];
        let first = l.chars().next();
        first.is_some_and(|c| !c.is_whitespace())
            && !l.starts_with('#')
            && !l.starts_with("//")
            && !l.starts_with('}')
            && !l.starts_with(')')
    })
}

/// `X` in a method definition's first lines `... X::Method(`.
fn method_class(lines: &[String], start: usize) -> Option<String> {
    let signature: String = lines[start..(start + 3).min(lines.len())].concat();
    let head = signature.split('(').next()?;
    let name = head.split_whitespace().last()?;
    let mut parts: Vec<&str> = name.split("::").collect();
    parts.pop()?;
    parts.pop().map(str::to_owned)
}

/// Line ranges `[open, close]` of every definition of class or struct `name` in `lines`.
fn class_bodies(lines: &[String], name: &str) -> Vec<(usize, usize)> {
    let mut bodies = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let text = code(line).trim();
        let defines = ["class ", "struct "].iter().any(|kw| {
            text.strip_prefix(kw).and_then(|rest| rest.strip_prefix(name)).is_some_and(|rest| {
                rest.is_empty() || rest.starts_with([' ', '{', ':'])
            })
        });
        if defines && !text.ends_with(';') {
            if let Some(close) = (i + 1..lines.len()).find(|&j| lines[j].trim_end() == "};") {
                bodies.push((i, close));
            }
        }
    }
    bodies
}

/// Reads `rel` under `root` as lines, or `None` when it is absent.
fn read_lines(root: &Path, rel: &str) -> Option<Vec<String>> {
    std::fs::read_to_string(root.join(rel)).ok().map(|t| t.lines().map(str::to_owned).collect())
}

fn find_in(lines: &[String], range: std::ops::RangeInclusive<usize>, decl: &Decl, file: &str) -> Option<Declared> {
    range.filter(|&i| i < lines.len()).find_map(|i| {
        decl.declared_as.iter().any(|f| declares(&lines[i], f)).then(|| Declared {
            passes: decl.passes,
            file: file.to_owned(),
            line: i + 1,
            text: lines[i].trim().to_owned(),
        })
    })
}

/// Looks up one name for a call site at line `anchor` of `file` (lines `lines`).
fn resolve(root: &Path, file: &str, lines: &[String], anchor: usize, decl: &Decl) -> Result<Declared, String> {
    let start = enclosing_function(lines, anchor);
    match &decl.scope {
        Scope::Enclosing => {
            let start = start.ok_or_else(|| format!("no function encloses line {} of {file}", anchor + 1))?;
            find_in(lines, start..=anchor, decl, file).ok_or_else(|| {
                format!("`{}` in the function at {file}:{}", decl.declared_as.join("` or `"), start + 1)
            })
        }
        Scope::Member { class, files } => {
            let class = match class {
                ClassName::Named(n) => (*n).to_owned(),
                ClassName::OfEnclosingMethod => start
                    .and_then(|s| method_class(lines, s))
                    .ok_or_else(|| format!("line {} of {file} is not inside a method `X::f(`", anchor + 1))?,
            };
            let mut searched = Vec::new();
            for rel in std::iter::once(&file).chain(files.iter().filter(|f| **f != file)) {
                let other;
                let text = if *rel == file {
                    lines
                } else {
                    match read_lines(root, rel) {
                        Some(l) => {
                            other = l;
                            &other
                        }
                        None => continue,
                    }
                };
                searched.push(*rel);
                for (open, close) in class_bodies(text, &class) {
                    if let Some(found) = find_in(text, open..=close, decl, rel) {
                        return Ok(found);
                    }
                }
            }
            Err(format!("`{}` in class {class} (searched {})", decl.declared_as.join("` or `"), searched.join(", ")))
        }
    }
}

/// The first of `forms` whose every name is declared for a call site at line `anchor` (0-based)
/// of `file`; otherwise why each form failed.
pub fn choose(root: &Path, file: &str, lines: &[String], anchor: usize, forms: &[CallForm]) -> Result<Chosen, Vec<Unfit>> {
    let mut unfit = Vec::new();
    'forms: for form in forms {
        let mut declared = Vec::new();
        for decl in &form.decls {
            match resolve(root, file, lines, anchor, decl) {
                Ok(d) => declared.push(d),
                Err(looked_for) => {
                    unfit.push(Unfit { call: form.call, passes: decl.passes, looked_for });
                    continue 'forms;
                }
            }
        }
        return Ok(Chosen { form: form.clone(), declared });
    }
    Err(unfit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_fragment_matches_whole_tokens_only() {
        assert!(declares("  CoordinationService::TaskId task_id_;", "TaskId task_id_"));
        assert!(!declares("  CoordinationService::TaskId task_id_x;", "TaskId task_id_"));
        assert!(!declares("  MyTaskId task_id_;", "TaskId task_id_"));
        assert!(!declares("  // CoordinatedTask task_;", "CoordinatedTask task_"));
        assert!(declares("  static uint64_t GetTimestamp();", "static uint64_t GetTimestamp()"));
    }

    #[test]
    fn members_are_looked_up_in_the_class_of_the_enclosing_method() {
        let text = lines(
            "class Other {\n  int task_id_;\n};\nclass Agent : public Base {\n  CoordinatedTask task_;\n};\n\
             absl::Status Agent::Connect() {\n  LOG(INFO) << \"connected\";\n}\n",
        );
        let form = |call, frag| CallForm {
            call,
            decls: vec![Decl {
                passes: "x",
                declared_as: vec![frag],
                scope: Scope::Member { class: ClassName::OfEnclosingMethod, files: vec![] },
            }],
        };
        // `task_id_` exists only in another class: the first form does not fit.
        let forms = [form("A(task_id_);", "int task_id_"), form("A(task_.task_id());", "CoordinatedTask task_")];
        let chosen = choose(Path::new("/nonexistent"), "a.cc", &text, 7, &forms).unwrap();
        assert_eq!(chosen.form.call, "A(task_.task_id());");
        assert_eq!(chosen.declared[0].line, 5);
        let err = choose(Path::new("/nonexistent"), "a.cc", &text, 7, &forms[..1]).unwrap_err();
        assert!(err[0].looked_for.contains("class Agent"), "{err:?}");
    }

    #[test]
    fn locals_must_precede_the_call_site_in_the_same_function() {
        let text = lines("void F(const Opts& options) {\n#if X\n  auto kv = 1;\n#endif\n  HOOK;\n}\nvoid G() {\n  HOOK;\n}\n");
        let decl = Decl { passes: "options", declared_as: vec!["Opts& options"], scope: Scope::Enclosing };
        assert_eq!(resolve(Path::new("/"), "f.cc", &text, 4, &decl).unwrap().line, 1);
        assert!(resolve(Path::new("/"), "f.cc", &text, 7, &decl).is_err());
    }
}
