//! `distprof validate`: happens-before violations of collectives.
//!
//! A collective cannot finish on any participant before it has started on every participant,
//! so the i-th occurrence of each collective must overlap on all nodes:
//! `max(start) < min(end)`. Where it does not, the clocks are wrong by at least
//! `max(start) - min(end)` (the gap). Counting violations on the raw traces and after the
//! clock model is applied shows what the correction bought.
//!
//! Collectives are found by XLA's `hlo_op` stat (host executor and GPU kernels carry it) or by
//! an event name containing `nccl`/`rccl`, and matched by HLO op name (`all-reduce`,
//! `all-gather`, `reduce-scatter`, `all-to-all`, `collective-permute`,
//! `collective-broadcast`, and their `-start`/`-done` halves). The key is
//! (`hlo_module`, op name); a participant is one plane of one node.

use crate::merge::prescan::{is_event_plane, plane_name, prescan};
use crate::merge::timemap::NodeTimeMap;
use crate::merge::protobuf::{Fields, WireError, LEN};
use crate::merge::{find_inputs, load_node, MergeError};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

const COLLECTIVE_OPS: &[&str] = &[
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
];

/// True when an HLO op or kernel name is a cross-device collective (ASCII case ignored;
/// no allocation: it runs for every event that names an op).
pub fn is_collective(name: &str) -> bool {
    let n = name.as_bytes();
    let at = |i: usize, pat: &str| n.get(i..i + pat.len()).is_some_and(|w| w.eq_ignore_ascii_case(pat.as_bytes()));
    let contains = |pat: &str| (0..n.len()).any(|i| at(i, pat));
    COLLECTIVE_OPS
        .iter()
        .any(|op| at(0, op) || n.iter().enumerate().any(|(i, &c)| c == b'%' && at(i + 1, op)))
        || contains("nccl")
        || contains("rccl")
}

/// One collective occurrence on one participant, ps on the chosen timeline.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub start_ps: i128,
    pub end_ps: i128,
    /// Where it lies: the plane's place among the node's event planes (from 0) and the
    /// line's place in its plane (from 1), as the merge numbers Chrome pids and tids.
    pub plane: u32,
    pub line: u32,
}

/// Per (key) -> per participant -> occurrences in time order.
pub type Collectives = BTreeMap<(String, String), BTreeMap<(u32, String), Vec<Span>>>;

/// Result of one check.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Violations {
    /// Occurrences compared (each seen on at least two participants).
    pub checked: u64,
    pub violations: u64,
    /// Largest `max(start) - min(end)` over violations, ns (0 when none).
    pub worst_gap_ns: f64,
    /// Smallest overlap `min(end) - max(start)` over all occurrences, ns; negative = violation.
    pub min_overlap_ns: f64,
}

pub fn count_violations(c: &Collectives) -> Violations {
    let mut v = Violations {
        min_overlap_ns: f64::INFINITY,
        ..Default::default()
    };
    for parts in c.values() {
        if parts.len() < 2 {
            continue;
        }
        let n = parts.values().map(Vec::len).min().unwrap_or(0);
        for i in 0..n {
            let max_start = parts.values().map(|s| s[i].start_ps).max().unwrap_or(0);
            let min_end = parts.values().map(|s| s[i].end_ps).min().unwrap_or(0);
            v.checked += 1;
            let overlap_ns = (min_end - max_start) as f64 / 1000.0;
            v.min_overlap_ns = v.min_overlap_ns.min(overlap_ns);
            if max_start >= min_end {
                v.violations += 1;
                v.worst_gap_ns = v.worst_gap_ns.max(-overlap_ns);
            }
        }
    }
    if v.checked == 0 {
        v.min_overlap_ns = 0.0;
    }
    v
}

/// Both sides of the check.
#[derive(Debug, Clone, Serialize)]
pub struct ValidateReport {
    pub nodes: usize,
    pub collective_kinds: usize,
    /// On the clocks as recorded.
    pub before: Violations,
    /// With each node's clock model applied (equal to `before` for merge outputs).
    pub after: Violations,
}

/// Reads every input, extracts collectives, and counts violations before and after correction.
/// `models` as in [`crate::merge::MergeOptions::models`].
pub fn validate(
    inputs: &[PathBuf],
    allow_uncorrected: bool,
    models: &[distprof::model::NodeClockModel],
) -> Result<ValidateReport, MergeError> {
    let paths = find_inputs(inputs)?;
    let (mut before, mut after) = (Collectives::new(), Collectives::new());
    for (i, p) in paths.iter().enumerate() {
        let n = load_node(p, i as u32, allow_uncorrected, models)?;
        let buf = std::fs::read(p).map_err(|e| MergeError::Io {
            path: p.clone(),
            err: e,
        })?;
        let info = prescan(&buf).map_err(|e| MergeError::Wire {
            path: p.clone(),
            err: e,
        })?;
        // The same events twice: as recorded (identity) and as corrected.
        let start_ns = info.profile_start_ns.unwrap_or(0);
        for (map, into) in [(&NodeTimeMap::identity(), &mut before), (&n.map, &mut after)] {
            scan(&buf, n.node, start_ns, map, into).map_err(|e| MergeError::Wire {
                path: p.clone(),
                err: e,
            })?;
        }
    }
    for c in [&mut before, &mut after] {
        sort_occurrences(c);
    }
    Ok(ValidateReport {
        nodes: paths.len(),
        collective_kinds: before.len(),
        before: count_violations(&before),
        after: count_violations(&after),
    })
}

const RELATIVE_LIMIT_NS: i64 = 100_000_000_000_000_000;

/// Puts every participant's occurrences in time order (scan adds them line by line), so
/// that the i-th of each is the same occurrence.
pub fn sort_occurrences(c: &mut Collectives) {
    for parts in c.values_mut() {
        for spans in parts.values_mut() {
            spans.sort_by_key(|s| s.start_ps);
        }
    }
}

/// Adds one node's collectives, mapped by `map`, to `out`.
pub fn scan(
    buf: &[u8],
    node: u32,
    profile_start_ns: i64,
    map: &NodeTimeMap,
    out: &mut Collectives,
) -> Result<(), WireError> {
    let mut f = Fields::new(buf, 0);
    let mut event_planes = 0u32;
    while let Some(x) = f.next_field()? {
        if x.number != 1 || x.wire_type != LEN {
            continue;
        }
        let name = plane_name(x.bytes)?;
        if !is_event_plane(name) {
            continue;
        }
        let plane_index = event_planes;
        event_planes += 1;
        let device = name.starts_with(b"/device:");
        let plane = String::from_utf8_lossy(name).into_owned();
        // Metadata first (encoders write lines before maps).
        let mut ccl_event_names: HashMap<i64, String> = HashMap::new();
        let mut stat_names: HashMap<i64, String> = HashMap::new();
        let mut lines = Vec::new();
        let mut pf = Fields::new(x.bytes, 0);
        while let Some(y) = pf.next_field()? {
            match y.number {
                3 => lines.push(y.bytes),
                4 | 5 => {
                    let (k, v) = map_entry(y.bytes)?;
                    let name = String::from_utf8_lossy(v).into_owned();
                    if y.number == 4 {
                        // Only the names a collective can be found by (`*ccl*`).
                        if name.to_ascii_lowercase().contains("ccl") {
                            ccl_event_names.insert(k, name);
                        }
                    } else {
                        stat_names.insert(k, name);
                    }
                }
                _ => {}
            }
        }
        let id_of = |n: &str| {
            stat_names
                .iter()
                .find(|(_, v)| v.as_str() == n)
                .map(|(k, _)| *k)
        };
        let (hlo_op, hlo_module) = (id_of("hlo_op"), id_of("hlo_module"));
        for (line_index, line) in (1u32..).zip(lines) {
            let (mut ts, mut events) = (0i64, Vec::new());
            let mut lf = Fields::new(line, 0);
            while let Some(y) = lf.next_field()? {
                match y.number {
                    3 => ts = y.int as i64,
                    4 => events.push(y.bytes),
                    _ => {}
                }
            }
            let base_ns = if ts < RELATIVE_LIMIT_NS {
                ts + profile_start_ns
            } else {
                ts
            };
            for ev in events {
                let (mut meta, mut off, mut dur, mut op, mut module) =
                    (0i64, 0i64, 0i64, None::<Cow<'_, str>>, None::<Cow<'_, str>>);
                let mut ef = Fields::new(ev, 0);
                while let Some(z) = ef.next_field()? {
                    match z.number {
                        1 => meta = z.int as i64,
                        2 => off = z.int as i64,
                        3 => dur = z.int as i64,
                        4 => {
                            let (sid, val) = stat_value(z.bytes, &stat_names)?;
                            if Some(sid) == hlo_op {
                                op = val;
                            } else if Some(sid) == hlo_module {
                                module = val;
                            }
                        }
                        _ => {}
                    }
                }
                let name = match op {
                    Some(o) => o,
                    None => match ccl_event_names.get(&meta) {
                        Some(n) => Cow::Borrowed(n.as_str()),
                        None => continue,
                    },
                };
                if !is_collective(&name) {
                    continue;
                }
                let (name, module) = (name.into_owned(), module.map(Cow::into_owned).unwrap_or_default());
                let s = base_ns as i128 * 1000 + off as i128;
                let e = s + dur as i128;
                let (s, e) = if device {
                    (map.device_to_g_ps(s), map.device_to_g_ps(e))
                } else {
                    (map.host_to_g_ps(s), map.host_to_g_ps(e))
                };
                out.entry((module, name))
                    .or_default()
                    .entry((node, plane.clone()))
                    .or_default()
                    .push(Span {
                        start_ps: s,
                        end_ps: e,
                        plane: plane_index,
                        line: line_index,
                    });
            }
        }
    }
    Ok(())
}

/// (key, name) of an event/stat metadata map entry.
fn map_entry(entry: &[u8]) -> Result<(i64, &[u8]), WireError> {
    let (mut key, mut name) = (0i64, &b""[..]);
    let mut f = Fields::new(entry, 0);
    while let Some(x) = f.next_field()? {
        match x.number {
            1 => key = x.int as i64,
            2 => {
                let mut g = Fields::new(x.bytes, 0);
                while let Some(z) = g.next_field()? {
                    if z.number == 2 {
                        name = z.bytes;
                    }
                }
            }
            _ => {}
        }
    }
    Ok((key, name))
}

/// (metadata id, string value) of an XStat; ref values resolve through the stat names.
/// Borrowed: most stats are not the ones looked for.
fn stat_value<'a>(
    stat: &'a [u8],
    names: &'a HashMap<i64, String>,
) -> Result<(i64, Option<Cow<'a, str>>), WireError> {
    let (mut id, mut val) = (0i64, None);
    let mut f = Fields::new(stat, 0);
    while let Some(x) = f.next_field()? {
        match x.number {
            1 => id = x.int as i64,
            5 => val = Some(String::from_utf8_lossy(x.bytes)),
            7 => val = names.get(&(x.int as i64)).map(|n| Cow::Borrowed(n.as_str())),
            _ => {}
        }
    }
    Ok((id, val))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_collectives() {
        for n in [
            "all-reduce",
            "all-gather.3",
            "reduce-scatter-start",
            "ncclDevKernel_AllReduce",
            "rccl_kernel",
            "all-to-all",
            "All-Gather-Start",
            "%all-reduce.5 = f32[8] all-reduce(x)",
            "fused %collective-permute",
            "xNCCLx",
        ] {
            assert!(is_collective(n), "{n}");
        }
        for n in [
            "end: all-reduce",
            "fusion.2",
            "wrapped_reduce",
            "broadcast_multiply_fusion",
            "",
            "%",
            "%all-reduc",
            "ncc",
        ] {
            assert!(!is_collective(n), "{n}");
        }
    }

    #[test]
    fn counts_overlap_violations_and_gaps() {
        let mut c = Collectives::new();
        let key = (String::from("m"), String::from("all-reduce"));
        let sp = |s: i128, e: i128| Span {
            start_ps: s * 1000,
            end_ps: e * 1000,
            plane: 0,
            line: 1,
        };
        c.entry(key.clone()).or_default().insert(
            (0, "p".into()),
            vec![sp(0, 100), sp(200, 300), sp(400, 500)],
        );
        c.entry(key).or_default().insert(
            (1, "p".into()),
            vec![sp(50, 150), sp(310, 400), sp(450, 460)],
        );
        let v = count_violations(&c);
        assert_eq!(
            v,
            Violations {
                checked: 3,
                violations: 1,
                worst_gap_ns: 10.0,
                min_overlap_ns: -10.0
            }
        );
    }
}
