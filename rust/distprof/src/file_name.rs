//! File names built from values distprof did not choose: host names read from traces and
//! planes, run and session names. Such a value becomes exactly one path component inside
//! the output directory, whatever it holds: `../../etc`, `a/b`, an empty string, control
//! characters or a leading dot cannot name a file elsewhere or a hidden one.
//!
//! Kept: ASCII letters, digits, `.`, `-`, `_` (every valid host name is unchanged). Every
//! other byte becomes `_`; a name starting with `.` (so also `.` and `..`) or empty gets a
//! leading `_`; the result is at most [`MAX_COMPONENT_BYTES`] long.

/// Leaves room for the prefixes and suffixes distprof adds (`node<N>.`, `.xplane.pb`) in
/// the 255-byte limit of common file systems.
pub const MAX_COMPONENT_BYTES: usize = 128;

/// `value` as one safe path component (see the module documentation).
pub fn component(value: &str) -> String {
    let mut out: String = value
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .take(MAX_COMPONENT_BYTES)
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
        out.truncate(MAX_COMPONENT_BYTES);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Component, Path};

    #[test]
    fn real_host_names_are_unchanged() {
        for h in ["gpu-node-07", "node1.cluster.example.com", "h_2", "10.0.0.3"] {
            assert_eq!(component(h), h);
        }
    }

    #[test]
    fn nothing_escapes_or_hides() {
        let cases = [
            ("../../etc", "_.._.._etc"),
            ("..", "_.."),
            (".", "_."),
            ("", "_"),
            ("a/b", "a_b"),
            ("/etc/passwd", "_etc_passwd"),
            (".hidden", "_.hidden"),
            ("x\0y\n", "x_y_"),
            ("hôte", "h_te"),
        ];
        for (value, want) in cases {
            let got = component(value);
            assert_eq!(got, want, "{value:?}");
            let path = Path::new("/out").join(&got);
            let parts: Vec<_> = path.components().collect();
            assert_eq!(parts.len(), 3, "{value:?} -> {got:?}");
            assert!(matches!(parts[2], Component::Normal(_)), "{value:?} -> {got:?}");
        }
    }

    #[test]
    fn long_names_are_cut() {
        assert_eq!(component(&"a".repeat(1000)).len(), MAX_COMPONENT_BYTES);
        assert_eq!(component(&".".repeat(1000)).len(), MAX_COMPONENT_BYTES);
    }
}
