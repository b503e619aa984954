//! What one node estimates alone at every window close: the per-edge fits of the edges it
//! probes, from its own records, written into the window's JSONL line (`model`) so that the
//! model exists online, not only after an offline pass. The network-wide solve needs every
//! node's edges and runs offline: `distprof merge` over every trace's plane (`shared`), or
//! over every JSONL file (`--run-dir`).
//!
//! It is the estimation chain of `online` with this node as the reference: the edge lines
//! are the same, and a neighbour's segment is then its clock against this node's.

use super::online::{estimate_fits_with_history, fit_window, History};
use super::window_fits::{EdgeReport, WindowFits, WindowSpec};
use super::settings::EstimatorSettings;
use crate::context::NodeId;
use crate::window::{ClosedWindow, EdgeFit, WindowModel};


/// Keeps the drift history of this node's edges between windows.
#[derive(Debug, Clone)]
pub struct NodeEdgeEstimator {
    node: NodeId,
    num_nodes: u32,
    settings: EstimatorSettings,
    history: History,
}

impl NodeEdgeEstimator {
    pub fn new(node: NodeId, num_nodes: u32, settings: EstimatorSettings) -> Self {
        Self { node, num_nodes, settings, history: History::default() }
    }

    /// The fits of this node's out-edges over one closed window. Microseconds per edge
    /// for the hull estimator; call once per window, in order.
    pub fn window(&mut self, w: &ClosedWindow) -> WindowModel {
        let own: Vec<_> = w.records.iter().filter(|r| r.src == self.node).copied().collect();
        let fits = fit_window(&own, &self.spec(w), &self.settings);
        self.window_fitted(w, fits)
    }

    /// As `window`, with the window's records already fitted (`fit_window` of
    /// `w.records`, which in a prober's window are all its own out-edges'): the plugin
    /// fits each window once for this, its online segments and the run model.
    pub fn window_fitted(&mut self, w: &ClosedWindow, mut fits: WindowFits) -> WindowModel {
        // The edge lines do not depend on the reference; the solve does.
        fits.spec = self.spec(w);
        // Solved on this node and its peers only (`WindowFits::renumbered`); the peers are
        // the window's whole edge list, so the numbering is the same in every window and
        // the history's edges keep their keys.
        let peers: Vec<NodeId> = w.edges.iter().map(|e| e.dst).chain([self.node]).collect();
        let (fits, ids) = fits.renumbered(&peers);
        let id = |i: NodeId| ids.get(i as usize).copied();
        let est = estimate_fits_with_history(fits, &self.settings, &mut self.history);
        // This node's hardware stamp mapping error shifts all its stamps alike, which no
        // fit sees (`stamp_mapping`); the peer's is in the peer's file, added offline.
        let own_mapping_error_ns = w.nic_clock.as_ref().map_or(0.0, |n| n.mapping_error_max_ns);
        let edges = w
            .edges
            .iter()
            .map(|e| match est.edges.iter().find(|r| id(r.src) == Some(self.node) && id(r.dst) == Some(e.dst)) {
                Some(r) => EdgeFit { uncertainty_ns: r.uncertainty_ns.map(|u| u + own_mapping_error_ns), ..fit_of(r) },
                None => EdgeFit {
                    dst: e.dst,
                    fwd_pure: 0,
                    rev_pure: 0,
                    fit_error: Some("no_records".into()),
                    theta_ns: None,
                    theta_rate_ppb: None,
                    margin_ns: None,
                    uncertainty_ns: None,
                },
            })
            .collect();
        WindowModel {
            estimator: self.settings.estimator,
            mid_local_ns: w.start_local_ns + (w.end_local_ns - w.start_local_ns) / 2,
            edges,
        }
    }

    /// Window `w` with this node as the reference.
    fn spec(&self, w: &ClosedWindow) -> WindowSpec {
        WindowSpec {
            window_id: w.window_id,
            start_local_ns: w.start_local_ns,
            end_local_ns: w.end_local_ns,
            num_nodes: self.num_nodes,
            reference: self.node,
        }
    }
}

fn fit_of(r: &EdgeReport) -> EdgeFit {
    EdgeFit {
        dst: r.dst,
        fwd_pure: r.counts.fwd_pure,
        rev_pure: r.counts.rev_pure,
        fit_error: r.fit_error.map(|e| {
            serde_json::to_value(e).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{e:?}"))
        }),
        theta_ns: r.theta_ns,
        theta_rate_ppb: r.theta_rate_ppb,
        margin_ns: r.margin_ns,
        uncertainty_ns: r.uncertainty_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ProbeRecord;
    use crate::window::WindowAccumulator;

    /// Node 0 probes node 1, whose clock is 5 ms ahead and gains 20 ppm; 30 us each way
    /// with a little queueing: the edge's theta at the midpoint comes out within the
    /// uncertainty, and within ~1 us with symmetric minimum delays.
    #[test]
    fn edge_fit_recovers_a_known_peer_clock() {
        let theta = |x: i64| 5_000_000.0 + 20e-6 * x as f64;
        let mut acc = WindowAccumulator::new(0, &[1], 0);
        let mut est = NodeEdgeEstimator::new(0, 2, EstimatorSettings::default());
        let mut last = None;
        for k in 0..3i64 {
            for s in 0..200i64 {
                let t = k * 1_000_000_000 + s * 5_000_000 + 1_000;
                let q = |i: i64| 30_000 + (i * 7919 + s * 104_729) % 9_000; // deterministic queueing
                let (d0, d1) = (q(1), q(1) + (s % 3));
                let fwd_tx = [t, t + 40_000];
                let fwd_rx = [fwd_tx[0] + d0 + theta(fwd_tx[0]) as i64, fwd_tx[1] + d1 + theta(fwd_tx[1]) as i64];
                let rev_rx = [t + 300_000, t + 340_000];
                let (r0, r1) = (q(2), q(2) + (s % 2));
                let rev_tx = [rev_rx[0] - r0 + theta(rev_rx[0]) as i64, rev_rx[1] - r1 + theta(rev_rx[1]) as i64];
                let rec = ProbeRecord { src: 0, dst: 1, seq: (k * 200 + s) as u32, fwd_tx_ns: fwd_tx, fwd_rx_ns: fwd_rx, rev_tx_ns: rev_tx, rev_rx_ns: rev_rx };
                acc.sent(0);
                acc.complete(0, rec, true);
            }
            let w = acc.close((k + 1) * 1_000_000_000);
            last = Some(est.window(&w));
        }
        let m = last.unwrap();
        assert_eq!(m.mid_local_ns, 2_500_000_000);
        let e = &m.edges[0];
        assert_eq!((e.dst, e.fwd_pure, e.rev_pure), (1, 200, 200), "{e:?}");
        let got = e.theta_ns.unwrap();
        let want = theta(m.mid_local_ns);
        assert!((got - want).abs() <= e.uncertainty_ns.unwrap(), "{got} vs {want}: {e:?}");
        assert!((got - want).abs() < 1_000.0, "{got} vs {want}");
        assert!((e.theta_rate_ppb.unwrap() - 20_000.0).abs() < 50.0, "{e:?}");
        let line = serde_json::to_string(&m).unwrap();
        let back: WindowModel = serde_json::from_str(&line).unwrap();
        assert_eq!(back, m);
    }
}
