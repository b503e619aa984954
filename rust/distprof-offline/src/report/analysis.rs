//! The numbers behind the summary and the rankings: per-node and per-edge statistics,
//! which nodes and edges are worst, and what in the input does not add up.

use super::input::{EdgeHealth, ReportInput};
use distprof::context::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// One node's run at a glance.
#[derive(Debug, Clone)]
pub struct NodeStats {
    pub node: NodeId,
    pub reachable: bool,
    pub windows: usize,
    pub flagged: usize,
    /// Largest segment bound; infinite for an unreachable node (no bound exists).
    pub max_bound_ns: f64,
    pub first_offset_ns: f64,
    pub last_offset_ns: f64,
    pub min_drift_ppb: f64,
    pub max_drift_ppb: f64,
}

/// One edge's run at a glance.
#[derive(Debug, Clone)]
pub struct EdgeStats {
    /// Index into `ReportInput::edges`.
    pub index: usize,
    pub src: NodeId,
    pub dst: NodeId,
    pub health: EdgeHealth,
    pub points: usize,
    pub pure_points: usize,
    pub windows: usize,
    /// Windows whose fit has a negative margin (no separating line).
    pub overlapping_windows: usize,
    /// Smallest margin over the windows; infinite when there is no fit.
    pub min_margin_ns: f64,
}

/// Everything the summary states, computed once.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// Worst first: unreachable, then by largest bound.
    pub nodes: Vec<NodeStats>,
    /// Worst first: down, degraded, then by smallest margin.
    pub edges: Vec<EdgeStats>,
    /// Node windows with a model, the reference's excluded: its offset is zero by
    /// definition, its bound zero, so counting it would only dilute the share flagged.
    pub total_windows: usize,
    /// Of those, the ones the estimator flagged (uncertainty over `max_uncertainty_ns` or bound over `max_bound_ns`).
    pub flagged_windows: usize,
    /// Smallest and largest bound of the flagged windows (NaN when none).
    pub flagged_bound_range_ns: (f64, f64),
    /// Start of the run on the global timeline (ns), the origin of the node plots.
    pub t0_global_ns: f64,
    /// Things in the input that do not add up, for the reader (the page still renders).
    pub problems: Vec<String>,
}

impl Analysis {
    pub fn of(input: &ReportInput) -> Analysis {
        let mut problems = Vec::new();
        let known: BTreeSet<NodeId> = input.nodes.iter().map(|n| n.node).collect();
        if known.len() != input.nodes.len() {
            problems.push(
                "`nodes` lists a node id more than once; each node is drawn once per entry"
                    .to_string(),
            );
        }
        if !known.contains(&input.facts.reference_node) {
            problems.push(format!(
                "reference node {} has no entry in `nodes`",
                input.facts.reference_node
            ));
        }

        let mut nodes = Vec::with_capacity(input.nodes.len());
        let mut total_windows = 0;
        let mut flagged_windows = 0;
        let mut flagged_bound_range_ns = (f64::INFINITY, f64::NEG_INFINITY);
        let mut t0_global_ns = f64::INFINITY;
        for model in &input.nodes {
            let segs = &model.segments;
            let flagged = segs.iter().filter(|s| s.flagged).count();
            if model.node != input.facts.reference_node {
                total_windows += segs.len();
                flagged_windows += flagged;
                for b in segs.iter().filter(|s| s.flagged).map(|s| s.bound_ns).filter(|b| b.is_finite()) {
                    flagged_bound_range_ns = (flagged_bound_range_ns.0.min(b), flagged_bound_range_ns.1.max(b));
                }
            }
            for s in segs {
                let values = [s.offset_ns, s.drift_ppb, s.bound_ns];
                if values.iter().any(|v| !v.is_finite()) {
                    problems.push(format!(
                        "node {} window {}: non-finite offset, drift or bound; not drawn",
                        model.node, s.window_id
                    ));
                }
                if s.end_local_ns < s.start_local_ns {
                    problems.push(format!(
                        "node {} window {}: ends before it starts ({} < {})",
                        model.node, s.window_id, s.end_local_ns, s.start_local_ns
                    ));
                }
                let g = s.to_global_ns(s.start_local_ns);
                if g.is_finite() {
                    t0_global_ns = t0_global_ns.min(g);
                }
            }
            if model.reachable && segs.is_empty() {
                problems.push(format!(
                    "node {} is marked reachable but has no segment",
                    model.node
                ));
            }
            let finite_bounds = segs.iter().map(|s| s.bound_ns).filter(|b| b.is_finite());
            let max_bound_ns = if model.reachable && !segs.is_empty() {
                finite_bounds.fold(0.0, f64::max)
            } else {
                f64::INFINITY
            };
            let drifts: Vec<f64> = segs
                .iter()
                .map(|s| s.drift_ppb)
                .filter(|d| d.is_finite())
                .collect();
            nodes.push(NodeStats {
                node: model.node,
                reachable: model.reachable && !segs.is_empty(),
                windows: segs.len(),
                flagged,
                max_bound_ns,
                first_offset_ns: segs.first().map_or(f64::NAN, |s| s.offset_ns),
                last_offset_ns: segs.last().map_or(f64::NAN, |s| s.offset_ns),
                min_drift_ppb: drifts.iter().copied().fold(f64::INFINITY, f64::min),
                max_drift_ppb: drifts.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            });
        }
        // Worst first; ties by node id so the page is deterministic.
        nodes.sort_by(|a, b| {
            b.max_bound_ns
                .total_cmp(&a.max_bound_ns)
                .then(b.flagged.cmp(&a.flagged))
                .then(a.node.cmp(&b.node))
        });

        let mut edges = Vec::with_capacity(input.edges.len());
        let mut seen = BTreeMap::new();
        for (index, e) in input.edges.iter().enumerate() {
            for end in [e.src, e.dst] {
                if !known.contains(&end) {
                    problems.push(format!(
                        "edge {} -> {} names node {end}, which has no entry in `nodes`",
                        e.src, e.dst
                    ));
                }
            }
            if let Some(prev) = seen.insert((e.src, e.dst), index) {
                problems.push(format!(
                    "edge {} -> {} is listed twice (entries {prev} and {index})",
                    e.src, e.dst
                ));
            }
            let margins = e.fits.iter().map(|f| f.margin_ns).filter(|m| m.is_finite());
            edges.push(EdgeStats {
                index,
                src: e.src,
                dst: e.dst,
                health: e.health,
                points: e.points.len(),
                pure_points: e.points.iter().filter(|p| p.pure).count(),
                windows: e.fits.len(),
                overlapping_windows: e.fits.iter().filter(|f| f.margin_ns < 0.0).count(),
                min_margin_ns: margins.fold(f64::INFINITY, f64::min),
            });
        }
        edges.sort_by(|a, b| {
            b.health
                .cmp(&a.health)
                .then(b.overlapping_windows.cmp(&a.overlapping_windows))
                .then(a.min_margin_ns.total_cmp(&b.min_margin_ns))
                .then((a.src, a.dst).cmp(&(b.src, b.dst)))
        });

        Analysis {
            nodes,
            edges,
            total_windows,
            flagged_windows,
            flagged_bound_range_ns: if flagged_bound_range_ns.0.is_finite() {
                flagged_bound_range_ns
            } else {
                (f64::NAN, f64::NAN)
            },
            t0_global_ns: if t0_global_ns.is_finite() {
                t0_global_ns
            } else {
                0.0
            },
            problems,
        }
    }

    /// The worst node that has a bound (reachable), if any.
    pub fn worst_reachable(&self) -> Option<&NodeStats> {
        self.nodes.iter().find(|n| n.reachable)
    }

    pub fn unreachable(&self) -> impl Iterator<Item = &NodeStats> {
        self.nodes.iter().filter(|n| !n.reachable)
    }

    pub fn edges_with(&self, health: EdgeHealth) -> impl Iterator<Item = &EdgeStats> {
        self.edges.iter().filter(move |e| e.health == health)
    }
}
