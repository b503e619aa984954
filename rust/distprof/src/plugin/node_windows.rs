//! What a node inside the job makes of each window it closes, after the window's line is
//! fitted and written (`probe_run::WindowCloser`): its probe statistics, its edge fits made
//! final by the drift fit over the neighbouring windows (`Smoother`), and its own model.
//!
//! **Only the node's own edges.** The network-wide model (every node against the
//! reference, through every edge of the run) is not solved inside the job: `distprof
//! merge` solves it from the edge fits every trace's plane carries, and `--run-dir` from
//! the JSONL files (docs/architecture.md, "Scale"). So a node's per-window work, and the
//! store traffic (none after the rendezvous), are the same at 4 nodes and at 16,384: the
//! fits of its k out-edges, one smoother step, and one solve of those edges.
//!
//! **The node's own model** is that solve against the reference: it places the node in
//! the windows where the node probes the reference directly (and the reference itself at
//! zero), and leaves it unreachable elsewhere. It is what a trace alone can say; merge
//! replaces it by the network's model wherever the planes it is given reach the node.
//!
//! [`NodeWindows`] is the work (kept by the probe thread, never locked); [`WindowsSoFar`]
//! what export and the model file read, updated under the trace's lock in O(1) per window.

use crate::context::NodeId;
use crate::distprof_plane::ProbeEdgeStats;
use crate::estimate::{Anchor, Anchoring, EstimatorSettings, NodeWindowFits, Smoother, WindowFits};
use crate::model::{ClockSegment, NodeClockModel};
use crate::record::ProbeRecord;
use crate::window::ClosedWindow;
use std::collections::BTreeMap;

/// The work of one node's windows; one per node and trace.
pub struct NodeWindows {
    node: NodeId,
    settings: EstimatorSettings,
    /// `None` once [`NodeWindows::finish`] ran.
    smoother: Option<Smoother>,
    /// The final windows' own solves, in order: where the reference falls silent, the node
    /// places itself through a peer it placed before (`estimate::failover`).
    anchoring: Anchoring,
}

/// What one window close (or the end of probing) adds to [`WindowsSoFar`].
#[derive(Debug, Default)]
pub struct Closed {
    /// The closed window's own fits and probe statistics (none at the end of probing).
    window: Option<(NodeWindowFits, Vec<ProbeEdgeStats>)>,
    /// Windows whose fits became final, each with the node's own segment of it.
    finals: Vec<Final>,
}

/// One window made final: its fits, the node's own segment of it (or its pieces, where
/// the node's clock or the reference's breaks inside it) and the anchors its own
/// solve stood on instead of the reference (none while the reference answers).
#[derive(Debug)]
struct Final {
    fits: NodeWindowFits,
    segments: Vec<ClockSegment>,
    anchors: Vec<Anchor>,
}

impl Closed {
    /// Windows made final by this step.
    pub fn finals(&self) -> usize {
        self.finals.len()
    }
}

impl NodeWindows {
    /// `window_ns`: the probe window's length (the smoother's span follows from it).
    pub fn new(node: NodeId, settings: EstimatorSettings, window_ns: i64) -> Self {
        Self { node, settings, smoother: Some(Smoother::new(settings, window_ns)), anchoring: Anchoring::default() }
    }

    /// Window `w` closed with `fits` (its records fitted once, `WindowCloser::fit`).
    pub fn closed(&mut self, w: &ClosedWindow, fits: WindowFits) -> Closed {
        let stats = w
            .edges
            .iter()
            .filter(|e| e.src == self.node)
            .map(|e| ProbeEdgeStats {
                window_id: w.window_id,
                peer: e.dst,
                pairs_used: e.pure,
                pairs_lost: e.lost,
                min_rtt_ns: w.records.iter().filter(|r| r.dst == e.dst).map(ProbeRecord::round_trip_ns).min().unwrap_or(0),
            })
            .collect();
        let own = fits.share(self.node);
        let done = match self.smoother.as_mut() {
            Some(s) => s.push_fits(fits),
            None => Vec::new(),
        };
        Closed { window: Some((own, stats)), finals: self.finalise(done) }
    }

    /// Probing stopped: the windows still waiting for later ones are final now.
    pub fn finish(&mut self) -> Closed {
        let done = self.smoother.take().map(Smoother::finish_fits).unwrap_or_default();
        Closed { window: None, finals: self.finalise(done) }
    }

    fn finalise(&mut self, done: Vec<WindowFits>) -> Vec<Final> {
        done.into_iter()
            .map(|f| {
                // On this node, its peers and the reference only (`WindowFits::renumbered`):
                // the same cost at any node count.
                let (own, ids) = f.renumbered(&[self.node]);
                let at = ids.binary_search(&self.node).ok();
                let est = self.anchoring.solve_renumbered(&own, Some(&ids), &self.settings);
                let segment = at.and_then(|i| est.segments.get(i).copied().flatten());
                let pieces = at.and_then(|i| est.pieces.get(i)).filter(|p| !p.is_empty());
                let segments = match (segment, pieces) {
                    (Some(_), Some(pieces)) => pieces.clone(),
                    (segment, _) => segment.into_iter().collect(),
                };
                Final { fits: f.share(self.node), segments, anchors: est.anchors }
            })
            .collect()
    }
}

/// A node's windows so far, as its plane and model file carry them.
#[derive(Debug, Default, Clone)]
pub struct WindowsSoFar {
    pub windows: u64,
    pub probe_stats: Vec<ProbeEdgeStats>,
    /// Final edge fits, in window order.
    final_fits: Vec<NodeWindowFits>,
    /// Closed windows not final yet (the smoother waits for the windows after them): their
    /// own fits until the final ones replace them.
    provisional: BTreeMap<u64, NodeWindowFits>,
    /// The node's own segments (`NodeWindows`), one per final window that placed it (or
    /// that window's pieces).
    segments: Vec<ClockSegment>,
    /// Every re-anchoring of the node's own solves (`estimate::failover`), in window order.
    anchors: Vec<Anchor>,
}

impl WindowsSoFar {
    pub fn add(&mut self, c: Closed) {
        if let Some((own, stats)) = c.window {
            self.windows += 1;
            self.probe_stats.extend(stats);
            self.provisional.insert(own.window_id, own);
        }
        for Final { fits, segments, anchors } in c.finals {
            self.provisional.remove(&fits.window_id);
            self.final_fits.push(fits);
            self.segments.extend(segments);
            for a in &anchors {
                tracing::info!(window = a.window_id, anchor = a.node, base_window = a.base_window_id, reason = ?a.reason, "window re-anchored: the reference placed no node of it");
            }
            self.anchors.extend(anchors);
        }
    }

    /// The re-anchorings of the node's own model so far.
    pub fn anchors(&self) -> &[Anchor] {
        &self.anchors
    }

    /// Every window's edge fits, final where they are, else the window's own.
    pub fn plane_fits(&self) -> Vec<NodeWindowFits> {
        self.final_fits.iter().chain(self.provisional.values()).cloned().collect()
    }

    /// The node's own model (see the module doc): reachable where a window placed it, and
    /// always for the reference.
    pub fn model(&self, node: NodeId, reference: NodeId) -> NodeClockModel {
        NodeClockModel { node, reachable: node == reference || !self.segments.is_empty(), segments: self.segments.clone() }
    }
}
