//! Golden files: a test's output compared with a checked-in copy, regenerated with
//! `DISTPROF_BLESS=1` as the config field table and schema are
//! (rust/distprof/src/config/docs.rs, whose unit tests cannot link this crate), and the one
//! normaliser that takes out what differs between runs (temporary paths, timings).

use std::path::{Path, PathBuf};

/// The repository's root (this crate is `rust/distprof-testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Asserts that `actual` is the content of the golden file `path`; with `DISTPROF_BLESS` set
/// in the environment it writes `actual` there first. `regenerate` is the command that
/// blesses this test, named in the failure.
pub fn assert_golden(path: &Path, actual: &str, regenerate: &str) {
    if std::env::var_os("DISTPROF_BLESS").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("creating the golden directory");
        }
        distprof::atomic_file::write(path, actual.as_bytes()).expect("writing the golden file");
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output (first at line {}):\n--- golden\n{}\n--- output\n{}\n\
             If the change is intended, regenerate it with\n  DISTPROF_BLESS=1 {regenerate}",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end of file>"),
            actual.lines().nth(first).unwrap_or("<end of output>"),
        );
    }
}

/// `text` with each of `paths` replaced by its placeholder (longest first, so that a path
/// inside another is not cut in two) and every timing `in 1.23 s` / `1.23 s)` written as
/// `<T> s`.
pub fn normalise(text: &str, paths: &[(&Path, &str)]) -> String {
    let mut paths: Vec<(String, &str)> =
        paths.iter().map(|(p, name)| (p.display().to_string(), *name)).collect();
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = text.to_string();
    for (p, name) in &paths {
        out = out.replace(p.as_str(), name);
    }
    let mut timed = String::with_capacity(out.len());
    let mut rest = out.as_str();
    // A timing is a decimal number directly followed by " s" and a word boundary.
    while let Some(at) = rest.find(" s") {
        let (head, tail) = rest.split_at(at);
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.').len();
        let number = &head[head.len() - digits..];
        let boundary = !tail[2..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if number.contains('.') && number.starts_with(|c: char| c.is_ascii_digit()) && boundary {
            timed.push_str(&head[..head.len() - digits]);
            timed.push_str("<T> s");
        } else {
            timed.push_str(head);
            timed.push_str(" s");
        }
        rest = &tail[2..];
    }
    timed.push_str(rest);
    timed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_replaces_paths_longest_first_and_timings() {
        let text = "merged 3 nodes in 0.19 s -> /tmp/a/b/out.pb (/tmp/a); 3 s stays; 2.5 sigma stays\n";
        let got = normalise(text, &[(Path::new("/tmp/a"), "<TMP>"), (Path::new("/tmp/a/b"), "<OUT>")]);
        assert_eq!(got, "merged 3 nodes in <T> s -> <OUT>/out.pb (<TMP>); 3 s stays; 2.5 sigma stays\n");
    }
}
