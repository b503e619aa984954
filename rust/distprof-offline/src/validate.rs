//! `distprof validate`: happens-before violations of collectives.
//!
//! A collective cannot finish on any participant before it has started on every participant,
//! so the i-th occurrence of each collective must overlap on all nodes:
//! `max(start) < min(end)`. Where it does not, the clocks are wrong by at least
//! `max(start) - min(end)` (the gap). Counting violations on the raw traces and after the
//! clock model is applied shows what the correction bought.
//!
//! Collectives are found by what XLA records of each op (`collective`: the HLO opcode from
//! the trace's own HLO modules, the `hlo_category` and `long_name` stats, JAX's op names)
//! and matched by op name; async ops count as their `-start` and `-done` halves. The key is
//! (`hlo_module`, op name); a participant is one plane of one node. The inputs go through
//! merge's own checks first (`merge::load_checked`): one run, each node once, raw traces or
//! one merge's outputs but not both.

pub mod collective;

use crate::merge::prescan::{is_event_plane, plane_name};
use crate::merge::timemap::NodeTimeMap;
use crate::merge::protobuf::{Fields, WireError, LEN};
use crate::merge::{load_checked, MergeError, MergeOptions};
use collective::{is_ccl_kernel, kind_of, opcode_in_text, HloOpcodes};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

/// True when an HLO op or kernel name is a cross-device collective by its name alone (an
/// opcode, JAX's name for one, or a collective library's kernel).
pub fn is_collective(name: &str) -> bool {
    kind_of(name).is_some() || opcode_in_text(name).and_then(kind_of).is_some() || is_ccl_kernel(name)
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
    /// The event's place among its line's events (from 0), as the merge's rewrite counts them.
    pub event: u32,
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

/// One kind of collective as found: how many events on all nodes, under which op names.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct KindSeen {
    pub events: u64,
    pub ops: BTreeSet<String>,
}

/// What one scan of one trace found besides the collectives themselves.
#[derive(Debug, Clone, Default)]
pub struct ScanStats {
    /// Events that name an XLA op (`hlo_op`).
    pub xla_op_events: u64,
    /// Events on device planes.
    pub device_events: u64,
    /// A few XLA op names that are no collective, for the message when none is.
    pub some_ops: BTreeSet<String>,
    /// The collectives by kind.
    pub kinds: BTreeMap<String, KindSeen>,
}

impl ScanStats {
    fn add(&mut self, other: ScanStats) {
        self.xla_op_events += other.xla_op_events;
        self.device_events += other.device_events;
        for op in other.some_ops {
            if self.some_ops.len() < 5 {
                self.some_ops.insert(op);
            }
        }
        for (k, v) in other.kinds {
            let e = self.kinds.entry(k).or_default();
            e.events += v.events;
            e.ops.extend(v.ops);
        }
    }
}

/// Both sides of the check.
#[derive(Debug, Clone, Serialize)]
pub struct ValidateReport {
    pub nodes: usize,
    /// Distinct collectives (module and op) seen.
    pub collective_kinds: usize,
    /// The collectives found, by kind (`all-reduce`, `all-gather-start`, ...): events on
    /// all nodes and their op names.
    pub kinds: BTreeMap<String, KindSeen>,
    /// The inputs are the outputs of a merge (on G already: before and after are equal).
    pub merged: bool,
    /// On the clocks as recorded.
    pub before: Violations,
    /// With each node's clock model applied (equal to `before` for merge outputs).
    pub after: Violations,
}

/// Why validate could not check.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error("{inputs}: none of the {xla_op_events} XLA op events ({some_ops}) and {device_events} device events in {traces} trace(s) is a collective (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, send/recv, or their -start/-done halves): there is nothing to check; profile steps of the job that communicate across devices")]
    NoCollectives { inputs: String, traces: usize, xla_op_events: u64, device_events: u64, some_ops: String },
}

/// Reads every input, extracts collectives, and counts violations before and after
/// correction. The inputs pass merge's checks that they belong together (`opts.force`
/// skips those a merge lets it skip); the models come from `opts` as in a merge.
pub fn validate(inputs: &[PathBuf], opts: &MergeOptions) -> Result<ValidateReport, ValidateError> {
    let (nodes, _, _) = load_checked(inputs, opts, true, &mut |_| {})?;
    let (mut before, mut after) = (Collectives::new(), Collectives::new());
    let mut stats = ScanStats::default();
    let merged = nodes.iter().any(|n| n.info.already_merged);
    for n in &nodes {
        let p = &n.path;
        let buf = std::fs::read(p).map_err(|e| MergeError::Io { path: p.clone(), err: e })?;
        let wire = |err| MergeError::Wire { path: p.clone(), err };
        // The same events twice: as recorded (identity) and as corrected.
        let start_ns = n.info.profile_start_ns.unwrap_or(0);
        stats.add(scan(&buf, n.node, start_ns, &NodeTimeMap::identity(), &mut before).map_err(wire)?);
        scan(&buf, n.node, start_ns, &n.map, &mut after).map_err(wire)?;
    }
    if stats.kinds.is_empty() && (stats.xla_op_events > 0 || stats.device_events > 0) {
        return Err(ValidateError::NoCollectives {
            inputs: inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            traces: nodes.len(),
            xla_op_events: stats.xla_op_events,
            device_events: stats.device_events,
            some_ops: if stats.some_ops.is_empty() { "none named".into() } else { format!("e.g. {}", stats.some_ops.iter().cloned().collect::<Vec<_>>().join(", ")) },
        });
    }
    for c in [&mut before, &mut after] {
        sort_occurrences(c);
    }
    Ok(ValidateReport {
        nodes: nodes.len(),
        collective_kinds: before.len(),
        kinds: stats.kinds,
        merged,
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

/// Adds one node's collectives, mapped by `map`, to `out`; what it saw besides.
pub fn scan(
    buf: &[u8],
    node: u32,
    profile_start_ns: i64,
    map: &NodeTimeMap,
    out: &mut Collectives,
) -> Result<ScanStats, WireError> {
    // The HLO modules first: the metadata plane may come after the event planes.
    let mut opcodes = HloOpcodes::default();
    let mut f = Fields::new(buf, 0);
    while let Some(x) = f.next_field()? {
        if x.number == 1 && x.wire_type == LEN && plane_name(x.bytes)? == b"/host:metadata" {
            opcodes.add_plane(x.bytes)?;
        }
    }
    let mut stats = ScanStats::default();
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
                        // Only the names a kernel collective can be found by.
                        if is_ccl_kernel(&name) {
                            ccl_event_names.insert(k, name);
                        }
                    } else {
                        stat_names.insert(k, name);
                    }
                }
                _ => {}
            }
        }
        let id_of = |n: &str| stat_names.iter().find(|(_, v)| v.as_str() == n).map(|(k, _)| *k);
        let [hlo_op, hlo_module, hlo_category, long_name, tf_op] =
            ["hlo_op", "hlo_module", "hlo_category", "long_name", "tf_op"].map(id_of);
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
            for (event_index, ev) in (0u32..).zip(events) {
                if device {
                    stats.device_events += 1;
                }
                let (mut meta, mut off, mut dur) = (0i64, 0i64, 0i64);
                let mut found: [Option<Cow<'_, str>>; 5] = Default::default();
                let ids = [hlo_op, hlo_module, hlo_category, long_name, tf_op];
                let mut ef = Fields::new(ev, 0);
                while let Some(z) = ef.next_field()? {
                    match z.number {
                        1 => meta = z.int as i64,
                        2 => off = z.int as i64,
                        3 => dur = z.int as i64,
                        4 => {
                            let (sid, val) = stat_value(z.bytes, &stat_names)?;
                            if let Some(i) = ids.iter().position(|id| *id == Some(sid)) {
                                found[i] = val;
                            }
                        }
                        _ => {}
                    }
                }
                let [op, module, category, text, tf] = found;
                let module = module.map(Cow::into_owned).unwrap_or_default();
                let (name, kind) = match op {
                    Some(o) => {
                        stats.xla_op_events += 1;
                        let kind = match opcodes.lookup(&module, &o) {
                            Some(opcode) => opcode.and_then(kind_of),
                            None => category
                                .as_deref()
                                .and_then(kind_of)
                                .or_else(|| text.as_deref().and_then(opcode_in_text).and_then(kind_of))
                                .or_else(|| kind_of(&o))
                                .or_else(|| tf.as_deref().and_then(|t| kind_of(t.rsplit('/').next().unwrap_or(t)))),
                        };
                        if kind.is_none() && stats.some_ops.len() < 5 {
                            stats.some_ops.insert(o.clone().into_owned());
                        }
                        (o.into_owned(), kind)
                    }
                    None => match ccl_event_names.get(&meta) {
                        Some(n) => (n.clone(), Some("nccl/rccl kernel".to_string())),
                        None => continue,
                    },
                };
                let Some(kind) = kind else { continue };
                let seen = stats.kinds.entry(kind).or_default();
                seen.events += 1;
                seen.ops.insert(name.clone());
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
                        event: event_index,
                    });
            }
        }
    }
    Ok(stats)
}

/// (key, name) of an event/stat metadata map entry.
fn map_entry(entry: &[u8]) -> Result<(i64, &[u8]), WireError> {
    let (key, metadata) = collective::entry_value(entry)?;
    Ok((key, collective::named(metadata)?))
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
            "psum.7",
            "ppermute.3",
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
            event: 0,
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
