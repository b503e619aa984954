//! Probe windows: what happened on each of a node's edges during one `probe_window_s`.
//!
//! Counts are for this window only (not cumulative). A probe is
//! counted as `sent` in the window it was sent, and as `complete` or `lost` in the window
//! in which its fate was decided; its record goes with the window that completed it.

use crate::config::EstimatorKind;
use crate::context::NodeId;
use crate::record::ProbeRecord;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One out-edge (this node probes `dst`) over one window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeWindowStats {
    pub src: NodeId,
    pub dst: NodeId,
    /// Probes whose first packet left in this window.
    pub sent: u64,
    /// Probes that collected all 8 stamps in this window.
    pub complete: u64,
    /// Complete probes that passed the purity test.
    pub pure: u64,
    /// Probes given up in this window (no complete answer within the probe timeout).
    pub lost: u64,
    /// Whether the edge was up when the window closed.
    pub up: bool,
    /// Transitions during the window.
    pub went_down: u32,
    pub came_up: u32,
}

/// A closed window, as written to the JSONL file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedWindow {
    pub node: NodeId,
    pub window_id: u64,
    /// Bounds in the node's clock.
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub edges: Vec<EdgeWindowStats>,
    /// Probes this node answered, per prober.
    pub answered: BTreeMap<NodeId, u64>,
    /// Datagrams dropped in this window, per reason (see `docs/jsonl.md`).
    pub dropped: BTreeMap<String, u64>,
    /// Complete probes of this window as arrays `[src, dst, seq, fwd_tx0, fwd_tx1, fwd_rx0,
    /// fwd_rx1, rev_tx0, rev_tx1, rev_rx0, rev_rx1]`: compact, one line per window.
    #[serde(with = "compact_records")]
    pub records: Vec<ProbeRecord>,
    /// The online model: this node's edge fits, filled in by the node's per-window hook
    /// (`estimate::node_edges::NodeEdgeEstimator`) before the line is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<WindowModel>,
    /// Hardware stamps only: the NIC clock and its mapping to the host clock over this
    /// window, and the packets dropped for want of a NIC stamp (absent in other modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_clock: Option<crate::timestamp::NicClockInfo>,
}

/// The `model` field of a window line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowModel {
    pub estimator: EstimatorKind,
    /// The window midpoint in this node's clock: where every `theta_ns` holds.
    pub mid_local_ns: i64,
    pub edges: Vec<EdgeFit>,
}

/// One out-edge's line this window. theta = S_dst - S_src (how far the peer's clock is
/// ahead of this node's) at `mid_local_ns`, and its rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeFit {
    pub dst: NodeId,
    pub fwd_pure: u64,
    pub rev_pure: u64,
    /// Why there is no line (`too_few_points`, `degenerate`, `solver`); absent with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_error: Option<String>,
    pub theta_ns: Option<f64>,
    pub theta_rate_ppb: Option<f64>,
    /// Smallest distance of a pure point to the line (negative: the sets overlap).
    pub margin_ns: Option<f64>,
    /// Data-derived half width of the interval the true theta lies in at the midpoint.
    pub uncertainty_ns: Option<f64>,
}

mod compact_records {
    use crate::record::ProbeRecord;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(recs: &[ProbeRecord], s: S) -> Result<S::Ok, S::Error> {
        let rows: Vec<[i64; 11]> = recs
            .iter()
            .map(|r| {
                [
                    r.src as i64,
                    r.dst as i64,
                    r.seq as i64,
                    r.fwd_tx_ns[0],
                    r.fwd_tx_ns[1],
                    r.fwd_rx_ns[0],
                    r.fwd_rx_ns[1],
                    r.rev_tx_ns[0],
                    r.rev_tx_ns[1],
                    r.rev_rx_ns[0],
                    r.rev_rx_ns[1],
                ]
            })
            .collect();
        rows.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ProbeRecord>, D::Error> {
        let rows: Vec<[i64; 11]> = Vec::deserialize(d)?;
        rows.into_iter()
            .map(|r| {
                let id = |v: i64| u32::try_from(v).map_err(|_| serde::de::Error::custom(format!("id {v} out of range")));
                Ok(ProbeRecord {
                    src: id(r[0])?,
                    dst: id(r[1])?,
                    seq: id(r[2])?,
                    fwd_tx_ns: [r[3], r[4]],
                    fwd_rx_ns: [r[5], r[6]],
                    rev_tx_ns: [r[7], r[8]],
                    rev_rx_ns: [r[9], r[10]],
                })
            })
            .collect()
    }
}

/// Collects the current window.
#[derive(Debug)]
pub struct WindowAccumulator {
    node: NodeId,
    window_id: u64,
    start_local_ns: i64,
    edges: Vec<EdgeWindowStats>,
    answered: BTreeMap<NodeId, u64>,
    dropped: BTreeMap<String, u64>,
    records: Vec<ProbeRecord>,
}

impl WindowAccumulator {
    /// `out_edges` are the peers this node probes, in the engine's edge order.
    pub fn new(node: NodeId, out_edges: &[NodeId], start_local_ns: i64) -> Self {
        let edges = out_edges
            .iter()
            .map(|&dst| EdgeWindowStats { src: node, dst, up: true, ..Default::default() })
            .collect();
        Self {
            node,
            window_id: 0,
            start_local_ns,
            edges,
            answered: BTreeMap::new(),
            dropped: BTreeMap::new(),
            records: Vec::new(),
        }
    }

    pub fn sent(&mut self, edge: usize) {
        self.edges[edge].sent += 1;
    }
    pub fn complete(&mut self, edge: usize, rec: ProbeRecord, pure: bool) {
        let e = &mut self.edges[edge];
        e.complete += 1;
        e.pure += pure as u64;
        self.records.push(rec);
    }
    pub fn lost(&mut self, edge: usize) {
        self.edges[edge].lost += 1;
    }
    pub fn set_up(&mut self, edge: usize, up: bool) {
        let e = &mut self.edges[edge];
        if e.up != up {
            e.up = up;
            if up {
                e.came_up += 1
            } else {
                e.went_down += 1
            }
        }
    }
    pub fn answered(&mut self, prober: NodeId) {
        *self.answered.entry(prober).or_default() += 1;
    }
    pub fn dropped(&mut self, reason: &str) {
        *self.dropped.entry(reason.to_string()).or_default() += 1;
    }

    /// Closes the window at `end_local_ns` and starts the next one there.
    pub fn close(&mut self, end_local_ns: i64) -> ClosedWindow {
        let edges = self
            .edges
            .iter_mut()
            .map(|e| {
                let out = e.clone();
                *e = EdgeWindowStats { src: e.src, dst: e.dst, up: e.up, ..Default::default() };
                out
            })
            .collect();
        let w = ClosedWindow {
            node: self.node,
            window_id: self.window_id,
            start_local_ns: self.start_local_ns,
            end_local_ns,
            edges,
            answered: std::mem::take(&mut self.answered),
            dropped: std::mem::take(&mut self.dropped),
            records: std::mem::take(&mut self.records),
            model: None,
            nic_clock: None,
        };
        self.window_id += 1;
        self.start_local_ns = end_local_ns;
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_window_and_transitions_are_kept() {
        let mut acc = WindowAccumulator::new(3, &[1, 5], 1_000);
        acc.sent(0);
        acc.sent(0);
        acc.sent(1);
        let rec = ProbeRecord {
            src: 3,
            dst: 1,
            seq: 9,
            fwd_tx_ns: [1, 2],
            fwd_rx_ns: [3, 4],
            rev_tx_ns: [5, 6],
            rev_rx_ns: [7, 8],
        };
        acc.complete(0, rec, true);
        acc.lost(1);
        acc.set_up(1, false);
        acc.dropped("bad_magic");
        acc.answered(1);
        let w = acc.close(2_000);
        assert_eq!((w.window_id, w.start_local_ns, w.end_local_ns), (0, 1_000, 2_000));
        assert_eq!((w.edges[0].sent, w.edges[0].complete, w.edges[0].pure), (2, 1, 1));
        assert_eq!((w.edges[1].lost, w.edges[1].up, w.edges[1].went_down), (1, false, 1));
        assert_eq!(w.dropped["bad_magic"], 1);
        let line = serde_json::to_string(&w).unwrap();
        assert!(line.contains("\"records\":[[3,1,9,1,2,3,4,5,6,7,8]]"), "{line}");
        assert!(!line.contains("model"));
        let back: ClosedWindow = serde_json::from_str(&line).unwrap();
        assert_eq!(back, w);
        let w2 = acc.close(3_000);
        assert_eq!((w2.window_id, w2.start_local_ns), (1, 2_000));
        assert_eq!((w2.edges[0].sent, w2.edges[1].lost, w2.edges[1].up, w2.edges[1].went_down), (0, 0, false, 0));
        assert!(w2.records.is_empty() && w2.dropped.is_empty());
    }
}
