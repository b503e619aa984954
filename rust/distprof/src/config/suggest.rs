//! "Did you mean": the closest known name to a mistyped one, by edit distance.

/// Normalizes the spellings people use for the same name: `probeCadenceUs`,
/// `probe-cadence-us` and `PROBE_CADENCE_US` all become `probecadenceus`.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Levenshtein distance with adjacent transpositions (optimal string alignment), so
/// `cadnece` is one edit from `cadence`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j] = distance between a[..i] and b[..j]; three rows suffice for transpositions.
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(prev2[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `input`, if it is close enough to be a plausible typo: at most
/// a third of the candidate's length in edits (and at least 2), so `port` does not suggest
/// `probe_port` but `probe_prot` does.
pub fn closest<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = normalize(input);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&wanted, &normalize(c)), c))
        .filter(|(d, c)| *d <= (normalize(c).chars().count() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// " (did you mean `x`?)" or nothing.
pub fn did_you_mean<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(input, candidates) {
        Some(c) => format!("did you mean `{c}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("cadence", "cadnece"), 1); // one adjacent swap
        assert_eq!(edit_distance("cadence", "cdaecne"), 2); // two swaps
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("hull", "hul"), 1);
    }

    #[test]
    fn suggestions() {
        let names = [
            "probe_cadence_us",
            "probe_port",
            "packet_spacing_us",
            "estimator",
        ];
        assert_eq!(closest("probe_cadance_us", names), Some("probe_cadence_us"));
        assert_eq!(closest("probeCadenceUs", names), Some("probe_cadence_us"));
        assert_eq!(closest("probe-prot", names), Some("probe_port"));
        assert_eq!(closest("estimater", names), Some("estimator"));
        assert_eq!(closest("port", names), None);
        assert_eq!(closest("completely_unrelated", names), None);
        assert_eq!(
            did_you_mean("estimater", names),
            "did you mean `estimator`?"
        );
        assert_eq!(did_you_mean("zzz", names), "");
    }
}
