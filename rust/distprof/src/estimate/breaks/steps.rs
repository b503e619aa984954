//! Steps of one node's clock inside a window (`date -s`, a leap second on one host), found
//! BEFORE the network solve, and the fits that keep the network from seeing them.
//!
//! An edge whose theta steps by milliseconds mid-window gets a steep line that fits
//! neither side. The network then rejects the stepping node's edges, and the rejections
//! spread to its healthy neighbours (up to the solve's cap) while the node itself keeps a
//! line that misses the step by its whole size. Refitting each edge on one side of its step
//! does not help: the edges of one node then pick different sides, and their lengths differ
//! by the step, which the network carries into the neighbours.
//!
//! So the step is attributed to a node first. A step of node i's clock shows in EVERY edge
//! that touches i, at the same time in i's clock and with the same size (signed by the
//! direction of the edge); a neighbour's step shows only in that neighbour's edge. Per
//! edge, the largest jump of theta between consecutive slices (`super::EdgeSlices`) beyond
//! the edge's own noise is a candidate; a node steps when at least half of its edges
//! agree on one (`find_steps`). Then ALL of that node's edges are fitted again on the
//! same side of the step, the longer one (`keeps_point`): the network sees the node's
//! clock on that side, consistent on every edge. The other side becomes the node's other
//! piece, fitted from the same edges' slices there (`node_breaks_at_step`).
//!
//! When every clock steps back alike (a leap second, each host at its own midnight) no
//! edge's theta jumps, but each node reads the times before its step twice: the slices of
//! its own clock there hold twice the probes it sends (`repeated_readings`). Such a node's
//! edges are fitted before the step in the same way.

use super::neighbours::CleanEdge;
use super::{median, piece_line, Break, Deviation, NodeBreaks, PieceLine, SLICE_NS};
use crate::context::NodeId;
use crate::estimate::points::Point;
use crate::estimate::window_fits::{FittedEdge, WindowFits};

/// A jump of theta between two consecutive slices of an edge is a step candidate when it
/// is this many robust deviations of the edge's other jumps beyond their median...
const JUMP_SPREADS: f64 = 10.0;
/// ...and at least this, ns: ntpd's 500 ppm slew moves theta by 250 us per slice, and two
/// or three such slices must not pass for a step (tuned on seeds 1-4 of the ntpd-slew
/// scenario: at 50 us its p99 rose from 186 to 304 us). It is also where a slice that holds
/// both sides is surely left out (`super::MIXED_MIN_NS`). Smaller steps are left to the
/// breaks' own search after the solve (`super::deviation`).
const MIN_STEP_NS: f64 = 1_000_000.0;
/// Every other jump of an edge with a step is below this fraction of it.
const SINGLE_JUMP: f64 = 0.2;
/// Two edges' jumps are the same step of their common node when their sizes agree to
/// this fraction (plus `SIZE_SLACK_NS`: queueing moves a slice's midpoint by microseconds).
const SIZE_TOLERANCE: f64 = 0.1;
const SIZE_SLACK_NS: f64 = 50_000.0;
/// ...and their times in the node's clock to this, ns, plus the step's size (after a
/// backward step the node reads its last |size| again, so the two sides overlap there).
const TIME_TOLERANCE_NS: f64 = 1.5e9;
/// The points this close to the step's region are fitted on neither side: the region is
/// known from the slices around it to a slice.
const GUARD_NS: f64 = SLICE_NS as f64;
/// The drift sigma of a piece that has no data of its own: 1000 ppm, as wrong as a clock
/// can be (`network::MAX_ABS_RATE`).
const UNKNOWN_SLOPE_SIGMA: f64 = 1e-3;

/// Two steps found before the solve, one of a node's clock and one of the reference's,
/// closer than this in the node's clock are one step of both (`super::pieces`): each is
/// placed to within its guard.
pub(super) const ONE_STEP_NS: i64 = 2 * GUARD_NS as i64;

/// Which side of its step a node's window line is fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Before,
    After,
}

/// A step of one node's clock inside a window, in that node's clock from the window
/// midpoint: it happened within (`lo_ns`, `hi_ns`), guard included; no reading of the
/// node outside that region is from the other side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeStep {
    pub node: NodeId,
    pub lo_ns: f64,
    pub hi_ns: f64,
    /// What the node's clock jumped by, ns (the median of its edges').
    pub size_ns: f64,
    /// The side its edges are fitted on: the one with more of the window.
    pub side: Side,
}

impl NodeStep {
    /// Whether a reading `t_ns` of the node's clock (from the window midpoint) is on the
    /// side its edges are fitted on.
    pub fn keeps(&self, t_ns: f64) -> bool {
        match self.side {
            Side::Before => t_ns < self.lo_ns,
            Side::After => t_ns > self.hi_ns,
        }
    }

    /// Where the node's window is cut into its two pieces: the middle of the region.
    fn cut_ns(&self) -> f64 {
        0.5 * (self.lo_ns + self.hi_ns)
    }
}

/// Whether a point of edge `src -> dst` (its x in the src clock, its y from `y_origin_ns`)
/// is on the fitted side of every step of its two ends. The dst read x + y (the point's
/// clock difference plus or minus the delay, which is microseconds against the guard).
pub fn keeps_point(steps: &[NodeStep], src: NodeId, dst: NodeId, y_origin_ns: i64, p: &Point) -> bool {
    steps.iter().all(|s| {
        if s.node == src {
            s.keeps(p.x_ns)
        } else if s.node == dst {
            s.keeps(p.x_ns + y_origin_ns as f64 + p.y_ns)
        } else {
            true
        }
    })
}

/// One edge's largest jump of theta between consecutive slices, when it stands out.
#[derive(Debug, Clone, Copy)]
struct Jump {
    /// theta after less theta before, less the edge's drift between them, ns.
    size_ns: f64,
    /// The two slices' readings of the src and dst clocks (from the window midpoint).
    src_ns: [f64; 2],
    dst_ns: [f64; 2],
}

/// The jump of edge `k` of `fits`, from its slices: theta of each slice (its midpoint
/// about no line), detrended by the median rate between slices (robust to the one jump).
fn edge_jump(fits: &WindowFits, k: usize) -> Option<Jump> {
    let f = &fits.fitted[k];
    let theta: Vec<Point> = f
        .slices_about_line()
        .map(|s| {
            let m = s.midpoint();
            Point { x_ns: m.x_ns, y_ns: m.y_ns + f.line.line.at(m.x_ns) }
        })
        .collect();
    if theta.len() < 4 {
        return None;
    }
    let mut rates: Vec<f64> = theta.windows(2).map(|w| (w[1].y_ns - w[0].y_ns) / (w[1].x_ns - w[0].x_ns).max(1.0)).collect();
    let rate = median(&mut rates);
    let jumps: Vec<f64> = theta.windows(2).map(|w| w[1].y_ns - w[0].y_ns - rate * (w[1].x_ns - w[0].x_ns)).collect();
    let mut sorted = jumps.clone();
    let typical = median(&mut sorted);
    let mut spread: Vec<f64> = jumps.iter().map(|j| (j - typical).abs()).collect();
    let limit = (JUMP_SPREADS * 1.4826 * median(&mut spread)).max(MIN_STEP_NS);
    let beyond = |i: usize| jumps[i] - typical;
    let at = (0..jumps.len()).max_by(|&a, &b| beyond(a).abs().total_cmp(&beyond(b).abs()))?;
    // A slice that holds both sides of a small step (one the mixed test keeps) splits it
    // into two jumps of the same sign next to each other.
    let (mut from, mut to) = (at, at);
    for n in [at.wrapping_sub(1), at + 1] {
        if n < jumps.len() && beyond(n).signum() == beyond(at).signum() && beyond(n).abs() > limit {
            (from, to) = (from.min(n), to.max(n));
        }
    }
    let size_ns: f64 = (from..=to).map(beyond).sum();
    // A step is one jump: a slew (ntpd's 500 ppm for seconds) moves theta by as much in
    // every slice of seconds, and is a change of frequency, not a step.
    let rest = (0..jumps.len()).filter(|i| !(from..=to).contains(i)).map(|i| beyond(i).abs()).fold(0.0, f64::max);
    if size_ns.abs() <= limit || rest > (SINGLE_JUMP * size_ns.abs()).max(limit) {
        return None;
    }
    let (a, b) = (theta[from], theta[to + 1]);
    let origin = f.y_origin_ns as f64;
    Some(Jump { size_ns, src_ns: [a.x_ns, b.x_ns], dst_ns: [a.x_ns + origin + a.y_ns, b.x_ns + origin + b.y_ns] })
}

/// One edge's jump (`Jump`) as one of its two nodes sees it.
#[derive(Debug, Clone, Copy)]
struct NodeJump {
    /// What the node's clock jumped by, were it the node's step, ns.
    size_ns: f64,
    /// The two slices' readings of the node's clock.
    readings: [f64; 2],
    /// Which of the node's edges with slices (their order in `find_steps`).
    edge: usize,
    /// The edge's other node.
    peer: usize,
}

impl NodeJump {
    /// Where the node read its last time before the step, were it its own: after the
    /// before-slice's reading and, the step added, before the after-slice's, each to the
    /// guard. Every edge's jump of one step holds that one reading; two neighbours'
    /// steps of about one size, seconds apart, are seen by the node's edges with each of
    /// them at different readings (date-step seed 3, 8 s windows: three bystanders of two
    /// nodes that stepped back by 355 and 375 ms took a step of their own).
    fn step_between(&self) -> (f64, f64) {
        (self.readings[0] - GUARD_NS, self.readings[1] - self.size_ns + GUARD_NS)
    }
}

/// The readings of its src's clock and of its dst's that an edge's slices span, from the
/// window midpoint: the slices' midpoints, each in the src's clock (x) and the dst's
/// (x + theta, theta with the slice's own residual, as `edge_jump` places a jump).
fn slice_spans(f: &FittedEdge) -> ((f64, f64), (f64, f64)) {
    let origin = f.y_origin_ns as f64;
    let (mut src, mut dst) = ((f64::INFINITY, f64::NEG_INFINITY), (f64::INFINITY, f64::NEG_INFINITY));
    for s in f.slices_about_line() {
        let m = s.midpoint();
        let at_dst = m.x_ns + origin + m.y_ns + f.line.line.at(m.x_ns);
        (src.0, src.1, dst.0, dst.1) = (src.0.min(m.x_ns), src.1.max(m.x_ns), dst.0.min(at_dst), dst.1.max(at_dst));
    }
    (src, dst)
}

/// Every node whose clock steps inside the window of `fits`, from its edges' slices
/// (before the solve: every fitted edge counts). A node steps when at least half of the
/// edges that could show its step (and at least two) show a jump of the same size at the
/// same time in its clock.
///
/// An edge can show it only when its slices reach both sides of it in the node's clock
/// (`could_show`). Each edge's window is the prober's clock, and clocks are up to seconds
/// apart, so a step near a window's edge falls inside this window for some of the node's
/// edges and outside it for the others; a backward step there also leaves the node's own
/// edges no clean slice before it. Counted against every edge with slices, 3 of the ~60
/// steps of bench accuracy's date-step seeds 1-8 on 8 s windows
/// (examples/configs/high-accuracy.json) were missed; each left its node's lines across
/// the step, the network rejected ~100 edges, and 5-8 nodes that never stepped came out
/// 3 us to 1.2 ms off (p99 10.8 us; 1.4 us counted against the edges that could show it).
///
/// Fewer edges to agree makes two neighbours' steps of about one size easier to take for
/// the node's own: the agreeing jumps must come from two peers or more, and place the step
/// at one reading (`NodeJump::step_between`).
pub fn find_steps(fits: &WindowFits) -> Vec<NodeStep> {
    let n = fits.spec.num_nodes as usize;
    let window = fits.window();
    let half = window.end_ns.saturating_sub(window.start_ns) as f64 / 2.0;
    // Per node: the readings of its clock that each of its edges' slices span, and their
    // jumps.
    let mut spans: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let mut jumps: Vec<Vec<NodeJump>> = vec![Vec::new(); n];
    for (k, f) in fits.fitted.iter().enumerate() {
        let (src, dst) = (f.key.0 as usize, f.key.1 as usize);
        if src >= n || dst >= n || f.slices.slices.len() < 4 {
            continue;
        }
        let (src_span, dst_span) = slice_spans(f);
        spans[src].push(src_span);
        spans[dst].push(dst_span);
        if let Some(j) = edge_jump(fits, k) {
            // theta = S_dst - S_src: a step of the dst adds to it, one of the src takes away.
            jumps[src].push(NodeJump { size_ns: -j.size_ns, readings: j.src_ns, edge: spans[src].len() - 1, peer: dst });
            jumps[dst].push(NodeJump { size_ns: j.size_ns, readings: j.dst_ns, edge: spans[dst].len() - 1, peer: src });
        }
    }
    let mut steps = Vec::new();
    for node in 0..n {
        let own = &jumps[node];
        let agree = |c: &NodeJump| {
            let mid = |j: &NodeJump| 0.5 * (j.readings[0] + j.readings[1]);
            own.iter()
                .filter(|j| {
                    let (j_at, c_at) = (j.step_between(), c.step_between());
                    (j.size_ns - c.size_ns).abs() <= SIZE_TOLERANCE * c.size_ns.abs() + SIZE_SLACK_NS
                        && (mid(j) - mid(c)).abs() <= TIME_TOLERANCE_NS + c.size_ns.abs()
                        && j_at.0 <= c_at.1
                        && c_at.0 <= j_at.1
                })
                .copied()
                .collect::<Vec<_>>()
        };
        let Some(best) = own.iter().map(agree).max_by_key(|a| a.len()) else { continue };
        // A neighbour's step shows on this node's edges with that neighbour only (one each
        // way): the node's own shows on its edges with every peer.
        if !best.iter().any(|j| j.peer != best[0].peer) {
            continue;
        }
        let mut sizes: Vec<f64> = best.iter().map(|j| j.size_ns).collect();
        let size_ns = median(&mut sizes);
        // The readings either side of every agreeing jump, widened by the step (a
        // backward step's readings overlap by its size) and by the guard.
        let from = best.iter().map(|j| j.readings[0].min(j.readings[1])).fold(f64::INFINITY, f64::min);
        let to = best.iter().map(|j| j.readings[0].max(j.readings[1])).fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = (from - size_ns.abs() - GUARD_NS, to + size_ns.abs() + GUARD_NS);
        // Edges with slices either side of where the jumps place the step could have
        // shown it. Not the region widened by the step's size: a large step near the
        // window's edge would leave no edge that reaches past it, and a neighbour's step
        // pass for the node's own.
        let at_lo = best.iter().map(|j| j.step_between().0).fold(f64::NEG_INFINITY, f64::max);
        let at_hi = best.iter().map(|j| j.step_between().1).fold(f64::INFINITY, f64::min);
        let could_show = |e: usize| best.iter().any(|j| j.edge == e) || (spans[node][e].0 < at_lo && spans[node][e].1 > at_hi);
        if at_lo > at_hi || 2 * best.len() < (0..spans[node].len()).filter(|&e| could_show(e)).count() {
            continue;
        }
        let side = if lo + half >= half - hi { Side::Before } else { Side::After };
        steps.push(NodeStep { node: node as NodeId, lo_ns: lo, hi_ns: hi, size_ns, side });
    }
    // A node whose theta jumps is placed by that (its size to microseconds); the others
    // by their own repeated readings.
    for r in repeats(fits, half) {
        if !steps.iter().any(|s| s.node == r.node) {
            steps.push(r);
        }
    }
    steps.sort_by_key(|s| s.node);
    steps
}

/// A slice of an edge's forward points (x in the src clock) holds readings of both
/// passes of a backward step when it has this many times the edge's median count: probes
/// go out at a steady cadence in true time.
const REPEATED_DENSITY: f64 = 1.6;

/// Where the src's clock read the same times twice in the window of `window_ns` (x from
/// its midpoint): the slices of `SLICE_NS` that hold this many times the median count of
/// forward points, when they are contiguous. A backward step of the clock by s makes the
/// node read its last |s| before the step again; when every node steps alike (a leap
/// second) no clock difference shows it, but the node's own readings do.
pub fn repeated_readings(fwd: &[Point], window_ns: i64) -> Option<(f64, f64)> {
    let half = window_ns as f64 / 2.0;
    let count = (window_ns.max(0) as u64).div_ceil(SLICE_NS as u64) as usize;
    if !(4..=7_200).contains(&count) {
        return None;
    }
    let mut per = vec![0usize; count];
    for p in fwd {
        let k = ((p.x_ns + half) / SLICE_NS as f64).floor();
        if k >= 0.0 && (k as usize) < count {
            per[k as usize] += 1;
        }
    }
    // The last slice of a window that does not end on a slice is short.
    let full = if window_ns % SLICE_NS == 0 { count } else { count - 1 };
    let mut counts: Vec<f64> = per[..full].iter().map(|&c| c as f64).collect();
    let typical = median(&mut counts);
    if typical < 4.0 {
        return None;
    }
    let dense: Vec<usize> = (0..full).filter(|&k| per[k] as f64 >= REPEATED_DENSITY * typical).collect();
    let (&first, &last) = (dense.first()?, dense.last()?);
    // One region, not a few busy slices here and there.
    if last - first + 1 != dense.len() {
        return None;
    }
    let at = |k: usize| -half + (k as f64) * SLICE_NS as f64;
    Some((at(first), at(last + 1)))
}

/// The steps back of the nodes whose own readings repeat on at least half of the edges
/// they probe (and two), over the same region of their clock: `find_steps` for a step
/// that every clock takes alike.
fn repeats(fits: &WindowFits, half: f64) -> Vec<NodeStep> {
    let n = fits.spec.num_nodes as usize;
    let mut probed = vec![0usize; n];
    let mut spans: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    for f in &fits.fitted {
        let src = f.key.0 as usize;
        if src < n {
            probed[src] += 1;
            spans[src].extend(f.src_repeats);
        }
    }
    let mut out = Vec::new();
    for (node, spans) in spans.iter().enumerate() {
        let overlapping = |c: &(f64, f64)| spans.iter().filter(|s| s.0 <= c.1 + GUARD_NS && c.0 <= s.1 + GUARD_NS).copied().collect::<Vec<_>>();
        let Some(best) = spans.iter().map(overlapping).max_by_key(|a| a.len()) else { continue };
        if best.len() < 2 || 2 * best.len() < probed[node] {
            continue;
        }
        let from = best.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
        let to = best.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = (from - GUARD_NS, to + GUARD_NS);
        let side = if lo + half >= half - hi { Side::Before } else { Side::After };
        out.push(NodeStep { node: node as NodeId, lo_ns: lo, hi_ns: hi, size_ns: -(to - from), side });
    }
    out
}

/// The breaks of a node with a step found before the solve: one step, cut in the middle
/// of its region, each piece fitted from the node's edges' slices on its own side only
/// (`piece_line`; the slices in the region may hold either side). A side with too little
/// data of its own gets the fitted side's line moved by the step, and an unknown
/// uncertainty (the piece is flagged).
pub(super) fn node_breaks_at_step(edges: &[CleanEdge], step: &NodeStep, half: f64) -> NodeBreaks {
    let cut = step.cut_ns().clamp(-half, half);
    let before = piece_line(edges, -half, step.lo_ns.max(-half), half);
    let after = piece_line(edges, step.hi_ns.min(half), half, half);
    let moved = |from: Option<PieceLine>, by: f64| PieceLine {
        start_ns: 0.0,
        end_ns: 0.0,
        line: from.map_or(crate::estimate::hull::Line { slope: 0.0, intercept_ns: by }, |p| crate::estimate::hull::Line {
            slope: p.line.slope,
            intercept_ns: p.line.intercept_ns + by,
        }),
        // Finite (JSON has no infinity) and far beyond any flag threshold.
        sigma_ns: step.size_ns.abs(),
        slope_sigma: UNKNOWN_SLOPE_SIGMA,
    };
    let (before, after) = match (before, after) {
        (Some(b), Some(a)) => (b, a),
        (Some(b), None) => (b, moved(Some(b), step.size_ns)),
        (None, Some(a)) => (moved(Some(a), -step.size_ns), a),
        (None, None) => match step.side {
            Side::Before => (moved(None, 0.0), moved(None, step.size_ns)),
            Side::After => (moved(None, -step.size_ns), moved(None, 0.0)),
        },
    };
    let breaks = vec![Break { at_ns: cut, step: true }];
    // Basis 1, t, (t - b)+, H(t - b): the pieces carry the lines; the coefficients say
    // the same at the cut for anyone who reads the deviation.
    let coef = vec![before.line.intercept_ns, before.line.slope * 1e9, (after.line.slope - before.line.slope) * 1e9, after.line.at(cut) - before.line.at(cut)];
    let deviation = Deviation { breaks, coef, cov: vec![0.0; 16] };
    let pieces = vec![PieceLine { start_ns: -half, end_ns: cut, ..before }, PieceLine { start_ns: cut, end_ns: half, ..after }];
    NodeBreaks { deviation: Some(deviation), pieces }
}
