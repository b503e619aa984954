//! One node's final edge fits of one window in a form `distprof merge` can solve the
//! network from.
//!
//! A node probes only its own out-edges, so alone it reaches the reference only through
//! them. Every node's plane therefore carries, per window, what the network solve and the bound need
//! of each edge it probes: the line (after the drift fit over neighbouring windows), the
//! two hulls the bound evaluates, the y origin and the timestamp-noise allowance. Any set
//! of nodes' [`NodeWindowFits`] of one window combines into the same `WindowFits` an
//! offline pass over all records would give (up to where each node's window lies), and
//! `online::solve` turns that into every node's segment: merge does it from the fits carried
//! in every trace's distprof plane (nothing is exchanged inside the job: docs/architecture.md,
//! "Scale").
//!
//! Each node closes its windows on its own clock from its own trace start, so window `k`
//! of two nodes is not quite the same interval. The combined window is the reference's
//! (else the lowest node's that shared one); every other node's lines and hull points are
//! moved to its midpoint exactly (x shifted, intercept moved along the line), and the bound
//! grows with the extrapolation as it does for any x outside an edge's points.

use super::breaks::{EdgeSlices, Slice};
use super::fit::EdgeLine;
use super::hull::{FitError, Hulls, Line};
use super::window_fits::{EdgeReport, FittedEdge, WindowFits, WindowSpec};
use super::points::Point;
use super::purity::PurityCounts;
use crate::context::NodeId;
use serde::{Deserialize, Serialize};

/// Bumped when the layout changes incompatibly; readers skip other versions by name.
pub const SHARED_FITS_VERSION: u32 = 1;

/// One node's out-edges of one window, final.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeWindowFits {
    pub version: u32,
    pub node: NodeId,
    pub window_id: u64,
    /// The window in the node's own host clock: hull x values are from its midpoint.
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub edges: Vec<SharedEdge>,
}

/// One edge: with a line (`line` set) or only its counts and why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedEdge {
    pub dst: NodeId,
    pub counts: PurityCounts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_error: Option<FitError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<SharedLine>,
}

/// An edge's line and what its bound needs. y values are from `y_origin_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedLine {
    pub y_origin_ns: i64,
    pub gap_noise_ns: f64,
    pub slope: f64,
    pub intercept_ns: f64,
    /// None when the sets overlap in a way the hull fit could not measure.
    pub margin_ns: Option<f64>,
    /// The edge's calibrated sigma (`uncertainty::edge_sigma_ns`); None when not finite.
    pub sigma_ns: Option<f64>,
    /// True when the line is the every-packet fit, false for the pure pairs' only.
    pub all_packets: bool,
    /// Hull vertices as `[x_ns, y_ns]`.
    pub fwd_lower: Vec<[f64; 2]>,
    pub rev_upper: Vec<[f64; 2]>,
    /// The edge's slices about this line as `[fwd x_ns, fwd y_ns, rev x_ns, rev y_ns]`
    /// (`breaks::EdgeSlices`), from which merge finds the breaks inside the window; empty
    /// in planes written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<[f64; 4]>,
}

impl NodeWindowFits {
    /// True when every number is finite and the window is well formed: a corrupt plane or
    /// store value must not reach the solve.
    pub fn is_sane(&self) -> bool {
        // Times within +-2^62 ns (146 years of epoch either way): midpoints and shifts
        // below cannot overflow.
        const LIMIT_NS: i64 = 1 << 62;
        self.version == SHARED_FITS_VERSION
            && self.end_local_ns >= self.start_local_ns
            && self.start_local_ns.abs() < LIMIT_NS
            && self.end_local_ns.abs() < LIMIT_NS
            && self.edges.iter().all(|e| {
                e.line.as_ref().is_none_or(|l| {
                    l.gap_noise_ns.is_finite()
                        && l.slope.is_finite()
                        && l.intercept_ns.is_finite()
                        && l.margin_ns.is_none_or(f64::is_finite)
                        && l.sigma_ns.is_none_or(|s| s.is_finite() && s >= 0.0)
                        && l.fwd_lower.iter().chain(&l.rev_upper).all(|p| p[0].is_finite() && p[1].is_finite())
                        && l.slices.iter().flatten().all(|v| v.is_finite())
                })
            })
    }

    fn mid_ns(&self) -> i64 {
        self.start_local_ns + (self.end_local_ns - self.start_local_ns) / 2
    }
}

impl WindowFits {
    /// The edges `node` probes (src = `node`), as its plane carries them.
    pub fn share(&self, node: NodeId) -> NodeWindowFits {
        let line_of = |report: usize| self.fitted.iter().find(|f| f.report == report);
        let edges = self
            .edges
            .iter()
            .enumerate()
            .filter(|(_, r)| r.src == node)
            .map(|(i, r)| SharedEdge {
                dst: r.dst,
                counts: r.counts,
                fit_error: r.fit_error,
                line: line_of(i).map(|f| SharedLine {
                    y_origin_ns: f.y_origin_ns,
                    gap_noise_ns: f.gap_noise_ns,
                    slope: f.line.line.slope,
                    intercept_ns: f.line.line.intercept_ns,
                    margin_ns: f.line.margin_ns.is_finite().then_some(f.line.margin_ns),
                    sigma_ns: f.line.sigma_ns.is_finite().then_some(f.line.sigma_ns),
                    all_packets: f.line.all_packets,
                    fwd_lower: f.line.hulls.fwd_lower.iter().map(|p| [p.x_ns, p.y_ns]).collect(),
                    rev_upper: f.line.hulls.rev_upper.iter().map(|p| [p.x_ns, p.y_ns]).collect(),
                    slices: f.slices_about_line().map(|s| [s.fwd.x_ns, s.fwd.y_ns, s.rev.x_ns, s.rev.y_ns]).collect(),
                }),
            })
            .collect();
        NodeWindowFits {
            version: SHARED_FITS_VERSION,
            node,
            window_id: self.spec.window_id,
            start_local_ns: self.spec.start_local_ns,
            end_local_ns: self.spec.end_local_ns,
            edges,
        }
    }

    /// One window of the network from the nodes' shared fits of it (any order, at most one
    /// part per node; parts of other windows, insane parts and edges to nodes outside the
    /// run are left out). `None` when no part is usable.
    pub fn from_shared(parts: &[&NodeWindowFits], num_nodes: u32, reference: NodeId) -> Option<WindowFits> {
        let mut parts: Vec<&NodeWindowFits> = parts.iter().copied().filter(|p| p.is_sane() && p.node < num_nodes).collect();
        parts.sort_by_key(|p| p.node);
        parts.dedup_by_key(|p| p.node);
        let common = parts.iter().find(|p| p.node == reference).or(parts.first())?;
        let spec = WindowSpec {
            window_id: common.window_id,
            start_local_ns: common.start_local_ns,
            end_local_ns: common.end_local_ns,
            num_nodes,
            reference,
        };
        let mid = common.mid_ns();
        // A node's steps are found from every point of its edges (`online::fit_window`); a
        // plane carries lines and slices, so its windows are solved without them.
        let mut fits = WindowFits { spec, counts: PurityCounts::default(), edges: Vec::new(), fitted: Vec::new(), steps: Vec::new() };
        let mut all: Vec<(NodeId, &SharedEdge, f64)> = Vec::new();
        for p in parts.iter().filter(|p| p.window_id == spec.window_id) {
            // This part's x = 0 lies at its own midpoint; the common x = 0 at `mid`.
            let shift_ns = (p.mid_ns() - mid) as f64;
            all.extend(p.edges.iter().filter(|e| e.dst < num_nodes && e.dst != p.node).map(|e| (p.node, e, shift_ns)));
        }
        all.sort_by_key(|(src, e, _)| (*src, e.dst));
        all.dedup_by_key(|(src, e, _)| (*src, e.dst));
        for (src, e, shift_ns) in all {
            fits.counts.add(&e.counts);
            let report = fits.edges.len();
            fits.edges.push(EdgeReport::unfitted(src, e.dst, e.counts, e.fit_error));
            if let Some(l) = &e.line {
                // theta(x_common) = theta_own(x_common - shift).
                let line = Line { slope: l.slope, intercept_ns: l.intercept_ns - l.slope * shift_ns };
                let points = |v: &[[f64; 2]]| v.iter().map(|p| Point { x_ns: p[0] + shift_ns, y_ns: p[1] }).collect();
                fits.fitted.push(FittedEdge {
                    report,
                    key: (src, e.dst),
                    y_origin_ns: l.y_origin_ns,
                    gap_noise_ns: l.gap_noise_ns,
                    line: EdgeLine {
                        line,
                        hulls: Hulls { fwd_lower: points(&l.fwd_lower), rev_upper: points(&l.rev_upper) },
                        margin_ns: l.margin_ns.unwrap_or(f64::NAN),
                        sigma_ns: l.sigma_ns.unwrap_or(f64::INFINITY),
                        all_packets: l.all_packets,
                        // Shared fits are final: their lines are not refit again.
                        floor: Default::default(),
                    },
                    slices: EdgeSlices {
                        line: Some(line),
                        slices: l
                            .slices
                            .iter()
                            .map(|s| Slice { fwd: Point { x_ns: s[0] + shift_ns, y_ns: s[1] }, rev: Point { x_ns: s[2] + shift_ns, y_ns: s[3] } })
                            .collect(),
                        clean_x_ns: None,
                    },
                    src_repeats: None,
                });
            }
        }
        Some(fits)
    }
}

/// Every window of a run from the nodes' shared fits (any order; several windows and nodes
/// mixed), solved as one network each, in window order, re-anchored where the reference
/// cannot place a node (`failover`).
pub fn solve_shared_run<'a>(
    parts: impl IntoIterator<Item = &'a NodeWindowFits>,
    num_nodes: u32,
    reference: NodeId,
    settings: &super::EstimatorSettings,
) -> Vec<super::WindowEstimate> {
    let mut by_window: std::collections::BTreeMap<u64, Vec<&NodeWindowFits>> = Default::default();
    for p in parts {
        by_window.entry(p.window_id).or_default().push(p);
    }
    // In window order through one `Anchoring`: a window the reference cannot place is
    // re-anchored on a node the windows before it placed.
    let mut anchoring = super::Anchoring::default();
    let mut estimates: Vec<super::WindowEstimate> = by_window
        .values()
        .filter_map(|parts| WindowFits::from_shared(parts, num_nodes, reference))
        .map(|fits| anchoring.solve(&fits, settings))
        .collect();
    // As a run's own model (`estimate_run_windows`): the wander the windows show widens them.
    super::wander::add_wander_terms(&mut estimates, reference, settings);
    estimates
}
