//! Loop-closure residuals drawn by the report: around every triangle of the probe graph,
//! per window, the sum of the fitted edge clock differences.

use super::input::LoopResidual;
use distprof::context::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// Per window, the sum of the edge clock differences around every triangle of the probe
/// graph (an edge probed the other way counts negated). Zero for consistent estimates;
/// an edge that disagrees with the network shows in every triangle through it.
pub fn triangle_residuals(
    fitted: &BTreeMap<(NodeId, NodeId, u64), f64>,
    max_loops: usize,
) -> Vec<LoopResidual> {
    let diff = |a: NodeId, b: NodeId, w: u64| -> Option<f64> {
        fitted
            .get(&(a, b, w))
            .copied()
            .or_else(|| fitted.get(&(b, a, w)).map(|v| -v))
    };
    let mut adj: BTreeMap<NodeId, BTreeSet<NodeId>> = BTreeMap::new();
    let mut windows = BTreeSet::new();
    for &(a, b, w) in fitted.keys() {
        adj.entry(a).or_default().insert(b);
        adj.entry(b).or_default().insert(a);
        windows.insert(w);
    }
    let mut out = Vec::new();
    for &w in &windows {
        for (&a, na) in &adj {
            for &b in na.range(a + 1..) {
                for &c in adj[&b].range(b + 1..) {
                    if !na.contains(&c) {
                        continue;
                    }
                    if let (Some(x), Some(y), Some(z)) =
                        (diff(a, b, w), diff(b, c, w), diff(c, a, w))
                    {
                        out.push(LoopResidual {
                            nodes: vec![a, b, c],
                            window_id: Some(w),
                            residual_ns: x + y + z,
                        });
                        if out.len() >= max_loops {
                            return out;
                        }
                    }
                }
            }
        }
    }
    out
}
