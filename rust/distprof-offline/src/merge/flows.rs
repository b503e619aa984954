//! Flow arrows between the participants of each collective (`distprof merge --flows`), in
//! the Chrome JSON and in `merged.pftrace`.
//!
//! Perfetto draws a v1 flow (one `s`, any `t`, one `f` event of the same id, category and
//! name) as arrows between the slices that enclose its points, and binds the flow's start
//! only when it comes first in time. An arrow therefore needs every node's occurrence of a
//! collective, which is known only once every node is merged: this pass reads the merged
//! XSpace outputs again, finds the collectives as `validate` does (same key, the i-th
//! occurrence on each participant), and writes the flows as one more fragment at the end of
//! the document. Each flow joins one occurrence's participants in the order they started,
//! each point 1 ns after its slice's start (inside it whatever the rounding of `ts` to ns,
//! and in the same order as the starts, which Perfetto needs). A merge without `--flows`
//! pays nothing.
//!
//! `merged.pftrace` needs no second pass: there a flow's points are flow ids on the begin
//! packets of its slices, and Perfetto links the slices carrying one id in the order of
//! their times (the first begins the flow, each later one steps it from the one before).
//! So a node needs only an id that every participant of an occurrence derives alike, the
//! same for the i-th occurrence of one key on every participant: [`flow_id`] of (key, i).
//! Each node finds its own occurrences before its rewrite ([`NodeFlows::scan`], `validate`'s
//! scan of its input, mapped onto G) and the encoder puts the ids on the right begins.

use super::chrome::ChromeWriter;
use super::chrome_doc::ChromeDoc;
use super::timemap::NodeTimeMap;
use super::MergeError;
use crate::validate::{scan, sort_occurrences, Collectives};
use crate::merge::protobuf::WireError;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

/// The flow id of the `i`-th occurrence (from 0) of collective `(module, op)`: FNV-1a 64
/// of the three, spelled out here so that it is the same in every build and on every node
/// (std's hasher promises neither). Never 0. Two occurrences share an id with probability
/// about n²/2^65 for n occurrences (1e-8 for a million), and then Perfetto joins their
/// flows.
pub fn flow_id(module: &str, op: &str, i: u64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    // Each string ends in a 0xff byte, which UTF-8 never holds: ("ab", "c") and ("a", "bc")
    // differ.
    for b in module.bytes().chain([0xff]).chain(op.bytes()).chain([0xff]).chain(i.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h.max(1)
}

/// The flow ids of one node's collective occurrences, in the order the rewrite meets them:
/// by (the plane's place among the node's event planes, the line's place in its plane from
/// 1, the event's place in its line from 0). The encoder walks them with a cursor
/// ([`FlowCursor`]) as it walks the events, so an event costs one comparison, not a lookup.
#[derive(Debug, Default)]
pub struct NodeFlows {
    /// (plane, line, event, flow id), sorted.
    ids: Vec<(u32, u32, u32, u64)>,
}

impl NodeFlows {
    /// The occurrences of node `node`'s input `buf` (profile start `profile_start_ns`),
    /// each participant's in time order on G (`map`), as [`collect`] finds them in the
    /// merged outputs.
    pub fn scan(buf: &[u8], node: u32, profile_start_ns: i64, map: &NodeTimeMap) -> Result<Self, WireError> {
        let mut c = Collectives::new();
        scan(buf, node, profile_start_ns, map, &mut c)?;
        sort_occurrences(&mut c);
        let mut ids = Vec::new();
        for ((module, op), parts) in &c {
            for spans in parts.values() {
                ids.extend((0u64..).zip(spans).map(|(i, s)| (s.plane, s.line, s.event, flow_id(module, op, i))));
            }
        }
        ids.sort_unstable();
        Ok(Self { ids })
    }

    #[cfg(test)]
    pub fn from_ids(mut ids: Vec<(u32, u32, u32, u64)>) -> Self {
        ids.sort_unstable();
        Self { ids }
    }

    /// A cursor at the first event of line `line` of event plane `plane`.
    pub fn line(&self, plane: u32, line: u32) -> FlowCursor {
        FlowCursor { at: self.ids.partition_point(|&(p, l, _, _)| (p, l) < (plane, line)), plane, line }
    }

    /// The flow ids of the event that `cursor` has reached, its `index`-th in its line;
    /// events must come in order of `index`.
    #[inline]
    pub fn of(&self, cursor: &mut FlowCursor, index: u32) -> &[(u32, u32, u32, u64)] {
        let key = (cursor.plane, cursor.line, index);
        let rest = &self.ids[cursor.at.min(self.ids.len())..];
        let skip = rest.iter().take_while(|&&(p, l, e, _)| (p, l, e) < key).count();
        let n = rest[skip..].iter().take_while(|&&(p, l, e, _)| (p, l, e) == key).count();
        cursor.at += skip + n;
        &rest[skip..skip + n]
    }

}

/// Where the encoder is among a node's flow ids: the current line's next occurrence.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlowCursor {
    at: usize,
    plane: u32,
    line: u32,
}

/// The collectives of merged outputs `(node, path)`, on the merged timeline in ps from the
/// origin (as the Chrome JSON's `ts`), each participant's occurrences in time order.
pub fn collect(outputs: &[(u32, PathBuf)]) -> Result<Collectives, MergeError> {
    let mut c = Collectives::new();
    for (node, path) in outputs {
        let buf = std::fs::read(path).map_err(|err| MergeError::Io { path: path.clone(), err })?;
        // A merged output's lines are relative to the origin and already on G.
        scan(&buf, *node, 0, &NodeTimeMap::identity(), &mut c).map_err(|err| MergeError::Wire { path: path.clone(), err })?;
    }
    sort_occurrences(&mut c);
    Ok(c)
}

/// One point of a flow: where the Chrome JSON draws one participant's occurrence.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    start_ps: i128,
    pid: u64,
    tid: u32,
    at_ps: i64,
}

/// Writes the flows of `c` with `ch`; `first_pid[node]` is the pid of the node's first
/// event plane. Returns the number of flows (occurrences seen on two participants or more).
pub fn write(ch: &mut ChromeWriter, c: &Collectives, first_pid: &BTreeMap<u32, u64>) -> io::Result<u64> {
    let mut id = 0u64;
    for ((_module, op), parts) in c {
        let longest = parts.values().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            let mut points: Vec<Point> = parts
                .iter()
                .filter_map(|((node, _plane), spans)| {
                    let s = spans.get(i)?;
                    let pid = first_pid.get(node)? + u64::from(s.plane);
                    // Inside the slice: 1 ns in, or its middle when it is shorter than 2 ns.
                    let at = s.start_ps + ((s.end_ps - s.start_ps) / 2).min(1000);
                    Some(Point { start_ps: s.start_ps, pid, tid: s.line, at_ps: i64::try_from(at).ok()? })
                })
                .collect();
            if points.len() < 2 {
                continue;
            }
            points.sort();
            id += 1;
            let last = points.len() - 1;
            for (k, p) in points.iter().enumerate() {
                let phase = match k {
                    0 => b's',
                    k if k == last => b'f',
                    _ => b't',
                };
                ch.flow_point(phase, id, p.pid, p.tid, p.at_ps, op.as_bytes())?;
            }
        }
    }
    Ok(id)
}

/// Appends the flows of the merged `outputs` to `doc` as its last fragment (after the
/// `nodes` fragments of the nodes); returns the number of flows.
pub fn append(doc: &ChromeDoc, nodes: usize, outputs: &[(u32, PathBuf)], first_pid: &BTreeMap<u32, u64>) -> Result<u64, MergeError> {
    let io_err = |err| MergeError::Io { path: doc.path().to_path_buf(), err };
    let c = collect(outputs)?;
    let points: usize = c.values().flat_map(|p| p.values()).map(Vec::len).sum();
    // About 130 bytes per point; the region is sized per input byte (`chrome_doc`).
    let region = doc.next_job(nodes + 1, |_| points as u64 * 10).ok_or_else(|| io_err(io::Error::other("the flows' fragment has no place in the document")))?;
    let order = region.order;
    let mut ch = ChromeWriter::new(region.writer, 0);
    let flows = write(&mut ch, &c, first_pid).map_err(io_err)?;
    doc.fragment_done(order, ch.finish().map_err(io_err)?);
    Ok(flows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_ids_are_fnv1a_of_key_and_occurrence_and_keep_the_strings_apart() {
        // FNV-1a 64 of "jit_train_step" 0xff "all-reduce.1" 0xff and 3 as 8 bytes LE,
        // computed independently (Python): the same id on every node, build and run.
        assert_eq!(flow_id("jit_train_step", "all-reduce.1", 3), 0x5949_3555_d051_264e);
        assert_ne!(flow_id("ab", "c", 0), flow_id("a", "bc", 0));
        assert_ne!(flow_id("m", "op", 0), flow_id("m", "op", 1));
    }

    #[test]
    fn the_cursor_finds_each_events_ids_line_by_line() {
        let f = NodeFlows::from_ids(vec![(1, 2, 5, 50), (0, 1, 0, 10), (0, 1, 3, 30), (0, 1, 3, 31), (1, 1, 0, 40)]);
        let ids = |c: &mut FlowCursor, i| f.of(c, i).iter().map(|e| e.3).collect::<Vec<_>>();
        let mut c = f.line(0, 1);
        let got: Vec<Vec<u64>> = (0..5).map(|i| ids(&mut c, i)).collect();
        assert_eq!(got, vec![vec![10], vec![], vec![], vec![30, 31], vec![]]);
        // A line without occurrences, then one whose first is its sixth event.
        let mut c = f.line(0, 2);
        assert!((0..10).all(|i| ids(&mut c, i).is_empty()));
        let mut c = f.line(1, 2);
        assert_eq!((0..7).map(|i| ids(&mut c, i)).collect::<Vec<_>>(), vec![vec![], vec![], vec![], vec![], vec![], vec![50], vec![]]);
    }
}
