//! One window's edges fitted, before the network solve: the window, each edge's report, and
//! the lines the solve uses. The online chain (`online`) makes it, the drift refit
//! (`drift`) and the shared fits (`shared`) read and change its lines, and `online::solve`
//! turns it into node clocks. Its own module so that none of those reach into another.

use super::breaks::{EdgeSlices, NodeStep, Slice};
use super::fit::EdgeLine;
use super::hull::{FitError, Line};
use super::network::EdgeVerdict;
use super::points::Point;
use super::points::WindowBounds;
use super::purity::PurityCounts;
use crate::context::NodeId;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    pub window_id: u64,
    /// Window bounds, in each node's own host clock.
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub num_nodes: u32,
    pub reference: NodeId,
}

/// What one edge gave in this window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeReport {
    pub src: NodeId,
    pub dst: NodeId,
    pub counts: PurityCounts,
    /// Why the edge has no line, if it has none.
    pub fit_error: Option<FitError>,
    /// theta = S_dst - S_src at the window midpoint, and its rate, from this edge alone.
    pub theta_ns: Option<f64>,
    pub theta_rate_ppb: Option<f64>,
    pub margin_ns: Option<f64>,
    /// Worst-case half width of the interval theta lies in where the network used it, any
    /// path asymmetry included (`bound::edge_uncertainty_ns`).
    pub uncertainty_ns: Option<f64>,
    /// Calibrated sigma of theta under symmetric paths (`uncertainty::edge_sigma_ns`).
    pub sigma_ns: Option<f64>,
    /// The line used every packet's point, not only the pure pairs' (`fit`).
    pub all_packets: bool,
    pub verdict: Option<EdgeVerdict>,
}

impl EdgeReport {
    /// The report of an edge before its fit and the solve fill it in.
    pub(super) fn unfitted(src: NodeId, dst: NodeId, counts: PurityCounts, fit_error: Option<FitError>) -> Self {
        EdgeReport {
            src,
            dst,
            counts,
            fit_error,
            theta_ns: None,
            theta_rate_ppb: None,
            margin_ns: None,
            uncertainty_ns: None,
            sigma_ns: None,
            all_packets: false,
            verdict: None,
        }
    }
}

/// One window's edges fitted, before the network solve. The hull lines' slopes can still
/// be refit over neighbouring windows (`drift`) before `solve` turns them into node
/// clocks.
#[derive(Debug, Clone)]
pub struct WindowFits {
    pub spec: WindowSpec,
    pub(super) counts: PurityCounts,
    pub(super) edges: Vec<EdgeReport>,
    /// The edges with a line, in (src, dst) order.
    pub(super) fitted: Vec<FittedEdge>,
    /// The nodes whose clock steps inside the window, found before the solve
    /// (`breaks::find_steps`): their edges are fitted on one side of the step.
    pub(super) steps: Vec<NodeStep>,
}

/// An edge with a line: what the network solve and the bound need of it.
#[derive(Debug, Clone)]
pub(super) struct FittedEdge {
    /// Its report in `WindowFits::edges`.
    pub(super) report: usize,
    pub(super) key: (NodeId, NodeId),
    pub(super) y_origin_ns: i64,
    pub(super) gap_noise_ns: f64,
    pub(super) line: EdgeLine,
    /// The edge's points per slice of the window, about a line: what `breaks` finds a
    /// node's step or frequency change in. Empty for fits that carry none (older planes).
    pub(super) slices: EdgeSlices,
    /// Where the src's clock read the same times twice (x from the window midpoint): it
    /// stepped back there (`breaks::repeated_readings`). None for fits from a plane.
    pub(super) src_repeats: Option<(f64, f64)>,
}

impl WindowFits {
    pub(super) fn mid_ns(&self) -> i64 {
        self.window().mid_ns()
    }

    pub(super) fn window(&self) -> WindowBounds {
        WindowBounds { start_ns: self.spec.start_local_ns, end_ns: self.spec.end_local_ns.max(self.spec.start_local_ns) }
    }

    /// These fits on just the nodes they name, renumbered: the ids, ascending, are `also`,
    /// the reference and every edge's endpoints; node `ids[i]` becomes `i`. A node's own
    /// windows name its k peers of an N-node run, and the network solve sizes its arrays
    /// by the node count, so solved as they are they would cost O(N) per window; renumbered,
    /// the same at any N. The order of the edges (by (src, dst)) is kept.
    pub fn renumbered(&self, also: &[NodeId]) -> (WindowFits, Vec<NodeId>) {
        let mut ids: Vec<NodeId> = also.iter().copied().chain([self.spec.reference]).collect();
        ids.extend(self.edges.iter().flat_map(|e| [e.src, e.dst]));
        ids.extend(self.fitted.iter().flat_map(|f| [f.key.0, f.key.1]));
        ids.sort_unstable();
        ids.dedup();
        let at = |n: NodeId| ids.binary_search(&n).unwrap_or(0) as NodeId;
        let mut out = self.clone();
        out.spec.num_nodes = ids.len() as u32;
        out.spec.reference = at(self.spec.reference);
        for e in &mut out.edges {
            (e.src, e.dst) = (at(e.src), at(e.dst));
        }
        for f in &mut out.fitted {
            f.key = (at(f.key.0), at(f.key.1));
        }
        for s in &mut out.steps {
            s.node = at(s.node);
        }
        (out, ids)
    }

    /// Replaces the lines that `lines` (in edge order, as `drift::long_lines` gives them)
    /// has a new one for, and their sigmas with the new line's: the network and the node
    /// sigmas must judge the line actually used, not the one it replaced. The lines are
    /// final then, so the floor points go (the windows are kept as neighbours, and cloned).
    pub fn set_lines(&mut self, lines: Vec<Option<Line>>) {
        for (f, line) in self.fitted.iter_mut().zip(lines) {
            let floor = std::mem::take(&mut f.line.floor);
            if let Some(line) = line {
                f.line.line = line;
                // Lines that carry no floor points (shared fits, already final) keep theirs.
                if !floor.fwd.is_empty() {
                    f.line.sigma_ns = floor.sigma_ns(&line);
                }
            }
        }
    }

    /// The nodes whose clock steps inside this window (`breaks::find_steps`).
    pub fn steps(&self) -> &[NodeStep] {
        &self.steps
    }

    /// Each fitted edge's calibrated sigma (`uncertainty::edge_sigma_ns`), in the order
    /// of the network solve's observations (`online::observations`).
    pub fn edge_sigmas_ns(&self) -> Vec<f64> {
        self.fitted.iter().map(|f| f.line.sigma_ns).collect()
    }

}

impl FittedEdge {
    /// The slices of a fitted edge about the line it uses now (the drift refit may have
    /// replaced the one they were taken about).
    pub(super) fn slices_about_line(&self) -> impl Iterator<Item = Slice> + '_ {
        let taken_about = self.slices.line;
        let about = move |p: Point| Some(Point { x_ns: p.x_ns, y_ns: p.y_ns + taken_about?.at(p.x_ns) - self.line.line.at(p.x_ns) });
        self.slices.slices.iter().filter_map(move |s| Some(Slice { fwd: about(s.fwd)?, rev: about(s.rev)? }))
    }

    /// The x of the edge's last point this window knows of: its last slice's, or its hulls'
    /// (a shared fit's hulls are thinned, and a hull's last vertex can lie well before the
    /// last probe, so the slices come first).
    pub(super) fn last_x_ns(&self) -> f64 {
        let h = &self.line.hulls;
        let slices = self.slices.slices.iter().flat_map(|s| [s.fwd, s.rev]);
        slices.chain(h.fwd_lower.iter().copied()).chain(h.rev_upper.iter().copied()).map(|p| p.x_ns).fold(f64::NEG_INFINITY, f64::max)
    }
}

impl WindowFits {
    /// The fit of edge `key`, if it has one this window.
    pub(super) fn edge(&self, key: (NodeId, NodeId)) -> Option<&FittedEdge> {
        self.fitted.binary_search_by_key(&key, |f| f.key).ok().map(|i| &self.fitted[i])
    }
}
