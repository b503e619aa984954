//! Breaks inside a window: a step or a frequency change of one node's clock, found from
//! the data, and the pieces of that node's model on each side.
//!
//! One line per node and window cannot follow a clock that a servo (chrony, ntpd) gives a
//! new frequency mid-window, or that steps (a leap second, `date -s`): a 1 ppm kink
//! mid-window bends the phase ~2 us away from the best line. Such a change of node i's
//! clock shows in every edge that touches i, at the same time in i's clock, while a
//! change of a neighbour shows in that neighbour's edges only. So:
//!
//! 1. `fit_window` keeps, per edge and slice of `SLICE_NS`, the midpoint of the lowest
//!    forward and the highest reverse point about the edge's line (`EdgeSlices`): an
//!    NTP-like local offset, what is left of theta once the line is taken away.
//! 2. After the network solve, each node's slices from all its accepted edges (signed so
//!    that a change of the node's own clock counts the same on all of them, placed in the
//!    node's clock, taken about the network's lines: `slices_about_network`) give its
//!    deviation D_i(t) from its line (`Deviation`): a line plus, per break, a step and a
//!    change of slope, fitted by weighted least squares on bin medians. A break is
//!    searched on a grid and kept only when it lowers the chi-square by far more than the
//!    noise can (`ACCEPT_CHI2`), so the free-running clocks of the reference scenario get
//!    none. Where some clock breaks, each edge's slices first lose the neighbour's own
//!    deviation (`neighbours`): under a servo every clock kinks.
//! 3. Node i's clock against the reference is then its window line plus D_i minus the
//!    reference's own D_ref (the reference's change bends every node's offset; both are
//!    known only up to a common curve, which this difference cancels). Where either has
//!    a break, the window is cut there into pieces (`pieces`), each a `ClockSegment` with
//!    its own line over its own part (continuous across a kink: `hinge`), and the
//!    uncertainty of the deviation fit at the piece's midpoint added to the window's: a
//!    short piece with little data says so. Merge follows each piece's own line across
//!    the break (`ClockSegment::break_at_start`).
//!
//! A step of a millisecond or more wrecks the node's edge lines before any of this, and the
//! network would reject them: such steps are found before the solve and the node's edges
//! fitted on one side of them (`steps`); the node's pieces then come from there.

use super::hull::Line;
use super::network::NetworkSolution;
use super::points::Point;
use super::window_fits::WindowFits;
use crate::model::ClockSegment;

mod deviation;
mod steps;
pub use deviation::{deviation, Break, Deviation};
use deviation::{ACCEPT_CHI2, ACCEPT_CHI2_CLEANED};
pub use steps::{find_steps, keeps_point, repeated_readings, NodeStep};

/// Length of one slice of an edge's points, ns. Each slice's extremes are a min filter of
/// ~12 probe pairs (40 ms cadence): longer slices lower the noise of each value, shorter
/// ones place a break more finely. 0.5 s places a 1 ppm kink to well under 100 ns of phase.
pub const SLICE_NS: i64 = 500_000_000;
/// How far from a break a piece's own fit starts (`piece_line`), ns.
const BREAK_GUARD_NS: f64 = 250_000_000.0;

/// One slice of an edge: its lowest forward and highest reverse point about
/// `EdgeSlices::line` (x from the window midpoint, src clock; y the residual).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slice {
    pub fwd: Point,
    pub rev: Point,
}

impl Slice {
    /// Where and how far the slice says theta is off the line: NTP's midpoint of the two.
    pub fn midpoint(&self) -> Point {
        Point { x_ns: 0.5 * (self.fwd.x_ns + self.rev.x_ns), y_ns: 0.5 * (self.fwd.y_ns + self.rev.y_ns) }
    }
}

/// An edge's slices, about the line they were taken from (the edge's line when it was
/// fitted; the drift refit may replace it later, which `node_deviations` corrects for).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EdgeSlices {
    pub line: Option<Line>,
    pub slices: Vec<Slice>,
    /// Where the window's first or last slices with points hold both sides of a step: the
    /// x range of the other slices (`edge_slices`). None where its ends are clean.
    pub clean_x_ns: Option<(f64, f64)>,
}

/// A slice holds points of both sides of a step when its round trip (lowest forward less
/// highest reverse point) is further from the edge's typical one than this many typical
/// deviations, and this many ns (queueing moves the slices' round trips by tens of us).
const MIXED_SPREADS: f64 = 20.0;
const MIXED_MIN_NS: f64 = 1_000_000.0;

/// No window is longer than this many slices (an hour): a corrupt window's length must
/// not size an allocation.
const MAX_SLICES: i64 = 7_200;

/// The median of `v` (reordered).
fn median(v: &mut [f64]) -> f64 {
    let k = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(k, f64::total_cmp);
    *m
}

/// How many slices a window of `window_ns` has; None beyond `MAX_SLICES`.
fn slice_count(window_ns: i64) -> Option<usize> {
    let count = (window_ns.max(0) as u64).div_ceil(SLICE_NS as u64).max(1);
    (count <= MAX_SLICES as u64).then_some(count as usize)
}

/// The slices of one edge's points (sorted by x) about `line`, for a window of
/// `window_ns`. Slices with no point in one direction are left out.
pub fn edge_slices(fwd: &[Point], rev: &[Point], line: &Line, window_ns: i64) -> EdgeSlices {
    let half = window_ns as f64 / 2.0;
    let Some(count) = slice_count(window_ns) else { return EdgeSlices::default() };
    let none = |y: f64| Point { x_ns: 0.0, y_ns: y };
    let mut lo = vec![none(f64::INFINITY); count];
    let mut hi = vec![none(f64::NEG_INFINITY); count];
    let slice_of = |x: f64| {
        let k = ((x + half) / SLICE_NS as f64).floor();
        (k >= 0.0 && k < count as f64).then_some(k as usize)
    };
    for p in fwd {
        if let Some(k) = slice_of(p.x_ns) {
            let r = p.y_ns - line.at(p.x_ns);
            if r < lo[k].y_ns {
                lo[k] = Point { x_ns: p.x_ns, y_ns: r };
            }
        }
    }
    for p in rev {
        if let Some(k) = slice_of(p.x_ns) {
            let r = p.y_ns - line.at(p.x_ns);
            if r > hi[k].y_ns {
                hi[k] = Point { x_ns: p.x_ns, y_ns: r };
            }
        }
    }
    let mut slices: Vec<(usize, Slice)> =
        (0..count).filter(|&k| lo[k].y_ns.is_finite() && hi[k].y_ns.is_finite()).map(|k| (k, Slice { fwd: lo[k], rev: hi[k] })).collect();
    // A slice across a step holds points of both sides: its lowest forward and highest
    // reverse point are then apart by the step, not by about twice the path's delay as
    // in every other slice. It says nothing about either side.
    let mut gaps: Vec<f64> = slices.iter().map(|(_, s)| s.fwd.y_ns - s.rev.y_ns).collect();
    let mut clean_x_ns = None;
    if gaps.len() >= 3 {
        let typical = median(&mut gaps);
        let mut spread: Vec<f64> = gaps.iter().map(|g| (g - typical).abs()).collect();
        let limit = (MIXED_SPREADS * median(&mut spread)).max(MIXED_MIN_NS);
        let (first, last) = (slices[0].0, slices[slices.len() - 1].0);
        slices.retain(|(_, s)| (s.fwd.y_ns - s.rev.y_ns - typical).abs() <= limit);
        // A step in the window's first or last slices has no clean slice beyond it, so no
        // jump shows it (`steps`), and the edge's line would cross it: fitted without
        // those slices, it holds for the rest of the window.
        if let (Some(&(from, _)), Some(&(to, _))) = (slices.first(), slices.last()) {
            if from > first || to < last {
                let at = |k: usize| k as f64 * SLICE_NS as f64 - half;
                clean_x_ns = Some((at(from), at(to + 1)));
            }
        }
    }
    EdgeSlices { line: Some(*line), slices: slices.into_iter().map(|(_, s)| s).collect(), clean_x_ns }
}

/// One of a node's edges as its breaks see them (`node_edges`).
#[derive(Debug, Clone, Copy)]
struct NodeEdge {
    /// Index into `WindowFits::fitted`.
    k: usize,
    /// +1 when the node is the edge's dst (a change of its clock adds to theta), -1 when
    /// it is the src.
    sign: f64,
    /// theta at the window midpoint: the dst reads x + theta when the src reads x.
    shift_ns: f64,
    /// What turns a residual into the node's deviation per its own reading: a step moves
    /// the instant at which the node reads a time, and over it the node runs at its rate
    /// r against the reference, the src's peer at alpha + r (alpha the edge's slope):
    /// 1 / (1 + r) for the dst, 1 / (1 + alpha + r) for the src. 1 - 1e-5 at most for
    /// clocks within 10 ppm, which matters only for large steps (4 us on a 1 s step of a
    /// clock 4 ppm off).
    scale: f64,
}

/// Each node's accepted fitted edges.
fn node_edges(fits: &WindowFits, solution: &NetworkSolution) -> Vec<Vec<NodeEdge>> {
    let n = fits.spec.num_nodes as usize;
    let mut out = vec![Vec::new(); n];
    for (k, f) in fits.fitted.iter().enumerate() {
        if solution.edges.get(k).is_some_and(|v| v.rejected.is_some()) {
            continue;
        }
        let (src, dst) = (f.key.0 as usize, f.key.1 as usize);
        if src >= n || dst >= n {
            continue;
        }
        let shift_ns = f.y_origin_ns as f64 + f.line.line.intercept_ns;
        let rate = |i: usize| solution.rate.get(i).copied().flatten().unwrap_or(0.0);
        out[src].push(NodeEdge { k, sign: -1.0, shift_ns, scale: 1.0 / (1.0 + f.line.line.slope + rate(src)) });
        out[dst].push(NodeEdge { k, sign: 1.0, shift_ns, scale: 1.0 / (1.0 + rate(dst)) });
    }
    out
}

/// One piece of a node's clock between its breaks: its deviation from the window line as
/// a line of the node's clock (t from the window midpoint), from each edge's own
/// max-margin fit of the piece's slices, the mean of their middle half
/// (`middle_mean_and_error`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PieceLine {
    pub start_ns: f64,
    pub end_ns: f64,
    pub line: Line,
    /// One standard deviation of the line's value and slope, from the edges' spread.
    pub sigma_ns: f64,
    pub slope_sigma: f64,
}

/// A node's breaks and the lines of its pieces between them.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeBreaks {
    /// None: the clock has no break here, and `pieces` is one line over the whole window.
    pub deviation: Option<Deviation>,
    pub pieces: Vec<PieceLine>,
}

impl NodeBreaks {
    /// The piece that holds at t (node clock from the window midpoint).
    fn at(&self, t_ns: f64) -> Option<&PieceLine> {
        self.pieces.iter().find(|p| p.start_ns <= t_ns && t_ns < p.end_ns).or(self.pieces.last().filter(|p| t_ns >= p.end_ns))
    }
}

/// Where a slice of an edge lies in the clock of the node it is taken for (`NodeEdge`'s
/// sign and shift): the src's own x, or the dst's x + theta, theta with the slice's own
/// residual (a step of the dst moves it by the step).
fn node_time(s: &Slice, sign: f64, shift: f64) -> f64 {
    let m = s.midpoint();
    if sign > 0.0 { m.x_ns + shift + m.y_ns } else { m.x_ns }
}

/// The mean of the middle half of `v` (reordered: the quarter below and above left out;
/// the median itself below 4 values) and its standard error, both robust.
///
/// A piece's value and slope are this over the node's edges, each edge's max-margin line
/// through its own slices. Those lines scatter widely: a half-second slice's lowest point
/// is the least queued of ~12 probes, microseconds apart from slice to slice, so a short
/// piece's line rests on two or three of them (in the simulator's disciplined scenario a
/// 3.5 s piece's slopes over the reference's 16 edges spread over 100-300 ppb, with a few
/// far out). The median of 16 such uses one or two of them; the middle half averages
/// eight and still drops the far ones. Simulator, disciplined, 64 nodes: p99 228 -> 199
/// ns on seeds 1-4, 253 -> 232 ns on seeds 5-8 (leaving out a sixth, a third or a tenth
/// each side: 218 / 210 / 219 and 243 / 235 / 234 ns). The error stays the median's (a
/// little larger than the middle half's for normal noise), so no stated sigma shrinks.
fn middle_mean_and_error(v: &mut [f64]) -> (f64, f64) {
    let m = median(v);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    let sigma = 1.4826 * median(&mut dev);
    let error = 1.2533 * sigma / (v.len() as f64).sqrt();
    if v.len() < 4 {
        return (m, error);
    }
    v.sort_unstable_by(f64::total_cmp);
    let quarter = v.len() / 4;
    let middle = &v[quarter..v.len() - quarter];
    (middle.iter().sum::<f64>() / middle.len() as f64, error)
}

/// The line of node `edges`' deviation over [start, end) of its clock: every edge's
/// max-margin line through its slices there (each at hull precision), the mean of their
/// middle half (`middle_mean_and_error`).
/// The slices within `BREAK_GUARD_NS` of a break are left out: a misplaced break would
/// put a bent point on the wrong side, and one point can pin a max-margin line.
fn piece_line(edges: &[CleanEdge], start_ns: f64, end_ns: f64, half: f64) -> Option<PieceLine> {
    let mid = 0.5 * (start_ns + end_ns);
    let from = if start_ns > -half { start_ns + BREAK_GUARD_NS } else { start_ns };
    let to = if end_ns < half { end_ns - BREAK_GUARD_NS } else { end_ns };
    let (mut at_mid, mut slopes) = (Vec::new(), Vec::new());
    for CleanEdge { edge: NodeEdge { sign, shift_ns: shift, scale, .. }, slices } in edges {
        let (sign, shift, scale) = (*sign, *shift, *scale);
        let inside = |s: &&Slice| (from..to).contains(&node_time(s, sign, shift));
        let (fwd, rev): (Vec<Point>, Vec<Point>) = slices.iter().filter(inside).map(|s| (s.fwd, s.rev)).unzip();
        let Ok(fit) = super::hull::fit(&fwd, &rev) else { continue };
        // The edge's x where the node reads `mid`: the inverse of `node_time` (one step
        // of the fixed point: the residual changes little over its own size).
        let x = if sign > 0.0 { mid - shift - fit.line.at(mid - shift) } else { mid };
        at_mid.push(scale * sign * fit.line.at(x));
        slopes.push(sign * fit.line.slope);
    }
    if at_mid.len() < 2 {
        return None;
    }
    let (value, sigma_ns) = middle_mean_and_error(&mut at_mid);
    let (slope, slope_sigma) = middle_mean_and_error(&mut slopes);
    Some(PieceLine { start_ns, end_ns, line: Line { slope, intercept_ns: value - slope * mid }, sigma_ns, slope_sigma })
}

/// An edge's slices about the line the network gives the edge (its two nodes' lines),
/// not the edge's own: a node's window segment is the network's line, so its deviation
/// must be measured from that. With clocks that bend inside the window (or a drift span
/// over several windows, `drift::long_lines`), the edges' own lines disagree with the
/// network's by hundreds of ppb (the edges' drift residuals).
fn slices_about_network(fits: &WindowFits, solution: &NetworkSolution, k: usize) -> Vec<Slice> {
    let (ro, rd) = solution.edges.get(k).map_or((0.0, 0.0), |v| (v.offset_residual_ns, v.drift_residual_ppb));
    // The residual is the network's theta less the edge's, at the window midpoint.
    let (ro, rd) = if ro.is_finite() && rd.is_finite() { (ro, rd) } else { (0.0, 0.0) };
    let moved = |p: Point| Point { y_ns: p.y_ns - ro - rd * 1e-9 * p.x_ns, ..p };
    fits.fitted[k].slices_about_line().map(|s| Slice { fwd: moved(s.fwd), rev: moved(s.rev) }).collect()
}

/// One node's breaks and the lines of its pieces (None: no break), from its edges; a
/// break lowers the chi-square of its deviation fit by more than `accept_chi2`.
fn breaks_of(edges: &[CleanEdge], window_ns: i64, accept_chi2: f64) -> Option<NodeBreaks> {
    let half = window_ns as f64 / 2.0;
    let samples: Vec<(f64, f64)> = edges
        .iter()
        .flat_map(|e| e.slices.iter().map(move |s| (node_time(s, e.edge.sign, e.edge.shift_ns), e.edge.sign * s.midpoint().y_ns)))
        .collect();
    let mut deviation = deviation(&samples, window_ns, accept_chi2)?;
    // A piece without data of its own (between the two sides of a step, where the
    // slices hold points of both and the clock never reads) joins its neighbour.
    while !deviation.breaks.is_empty() {
        let bounds: Vec<f64> =
            std::iter::once(-half).chain(deviation.breaks.iter().map(|b| b.at_ns)).chain(std::iter::once(half)).collect();
        let pieces: Vec<Option<PieceLine>> = bounds.windows(2).map(|w| piece_line(edges, w[0], w[1], half)).collect();
        match pieces.iter().position(Option::is_none) {
            None => {
                // Across a kink the phase is continuous (`hinge`); these independent
                // lines stand where that fit has too few edges.
                let pieces = hinge::continuous_pieces(edges, &deviation.breaks, half)
                    .unwrap_or_else(|| pieces.into_iter().flatten().collect());
                return Some(NodeBreaks { deviation: Some(deviation), pieces });
            }
            Some(k) => deviation = deviation.without_break(k.saturating_sub(1)),
        }
    }
    None
}

/// Every node's breaks (None: none, the window line holds), from the slices of the
/// accepted edges of `fits` as the network solved them.
///
/// A node's deviation is known only up to a curve common to all nodes (the median over
/// the nodes that `neighbours` takes out), which a piece cancels by taking the
/// reference's from the node's. So where the reference breaks, every node gets its
/// deviation over the whole window (one line, `deviation: None`), and where any node
/// breaks, the reference gets its: without them, a piece kept that curve's line, up to
/// ~750 ppb and microseconds off under a servo with the drift spans over 3 windows (seeds
/// 1-4: p99 1,487 ns, 479 with them).
pub fn node_breaks(fits: &WindowFits, solution: &NetworkSolution) -> Vec<Option<NodeBreaks>> {
    let window = fits.window();
    let window_ns = window.end_ns.saturating_sub(window.start_ns);
    let half = window_ns as f64 / 2.0;
    let edges: Vec<Vec<CleanEdge>> = node_edges(fits, solution)
        .iter()
        .map(|es| es.iter().map(|&edge| CleanEdge { edge, slices: slices_about_network(fits, solution, edge.k) }).collect())
        .collect();
    // Free-running clocks break nowhere, and most windows of them end at the first test
    // of `deviation`: the joint solve of the neighbours' deviations is only paid for
    // where some clock breaks (bench scale/estimate: 512 nodes cost 283 ms per window
    // with it always, 222 without).
    if fits.steps.is_empty() && edges.iter().all(|e| breaks_of(e, window_ns, ACCEPT_CHI2).is_none()) {
        return vec![None; edges.len()];
    }
    // A step found before the solve (`steps`) places the node's pieces itself, from its
    // edges' own slices (refit on one side of the step).
    let at_step = |node: usize, edges: &[CleanEdge]| {
        let step = fits.steps.iter().find(|s| s.node as usize == node)?;
        let own: Vec<CleanEdge> =
            edges.iter().map(|e| CleanEdge { edge: e.edge, slices: fits.fitted[e.edge.k].slices_about_line().collect() }).collect();
        Some(steps::node_breaks_at_step(&own, step, half))
    };
    let stepped: Vec<Option<NodeBreaks>> = edges.iter().enumerate().map(|(i, e)| at_step(i, e)).collect();
    // With the neighbours' deviations taken out, a node's own kink stands out of less
    // noise, and a smaller one is kept (`ACCEPT_CHI2_CLEANED`).
    let clean = neighbours::clean_edges(fits, edges, window_ns);
    let mut out: Vec<Option<NodeBreaks>> = clean
        .iter()
        .zip(stepped)
        .map(|(edges, stepped)| stepped.or_else(|| breaks_of(edges, window_ns, ACCEPT_CHI2_CLEANED)))
        .collect();
    let reference = fits.spec.reference as usize;
    let any = out.iter().any(Option::is_some);
    let reference_breaks = out.get(reference).is_some_and(Option::is_some);
    for (i, edges) in clean.iter().enumerate() {
        if out[i].is_none() && (reference_breaks || (i == reference && any)) {
            out[i] = piece_line(edges, -half, half, half).map(|p| NodeBreaks { deviation: None, pieces: vec![p] });
        }
    }
    out
}

/// The pieces of one node's window segment `seg` where its own clock (`own`) or the
/// reference's (`reference`) breaks: empty when neither does (the segment holds). Each
/// piece has the line of `seg` plus `own` minus `reference` over its part, the
/// uncertainty of both deviations at its midpoint added to the segment's, and is flagged
/// when the segment is or its uncertainty exceeds `max_uncertainty_ns`.
pub fn pieces(seg: &ClockSegment, own: Option<&NodeBreaks>, reference: Option<&NodeBreaks>, max_uncertainty_ns: f64) -> Vec<ClockSegment> {
    if own.is_none() && reference.is_none() {
        return Vec::new();
    }
    let mid = seg.mid_local_ns;
    // The reference reads G; this node reads G + offset at the same instant.
    let shift = seg.offset_ns;
    let breaks = |b: Option<&NodeBreaks>, by: f64| {
        b.and_then(|b| b.deviation.as_ref()).map_or(Vec::new(), |d| d.breaks.iter().map(|x| (x.at_ns + by, x.step)).collect())
    };
    let mut cuts: Vec<(i64, bool)> = breaks(own, 0.0)
        .into_iter()
        .chain(breaks(reference, shift))
        .map(|(b, step)| (mid.saturating_add(b.round() as i64), step))
        .filter(|&(c, _)| c > seg.start_local_ns && c < seg.end_local_ns)
        .collect();
    cuts.sort_unstable();
    // Steps of this node's clock and the reference's that close together are one step of
    // both (a leap second: every clock steps back alike, each at its own midnight), placed
    // to the slices' half second: a piece between the two cuts would be judged at an
    // instant that no estimate places.
    cuts.dedup_by(|later, kept| later.0 == kept.0 || (later.1 && kept.1 && later.0 - kept.0 < steps::ONE_STEP_NS));
    let cuts: Vec<i64> = cuts.into_iter().map(|c| c.0).collect();
    if cuts.is_empty() {
        return Vec::new();
    }
    let bounds: Vec<i64> = std::iter::once(seg.start_local_ns).chain(cuts).chain(std::iter::once(seg.end_local_ns)).collect();
    // (value, slope, sigma, slope sigma) of a node's deviation at t.
    let deviation_at = |b: Option<&NodeBreaks>, t: f64| {
        b.and_then(|b| b.at(t)).map_or((0.0, 0.0, 0.0, 0.0), |p| (p.line.at(t), p.line.slope, p.sigma_ns, p.slope_sigma))
    };
    bounds
        .windows(2)
        .enumerate()
        .map(|(k, w)| {
            let (start, end) = (w[0], w[1]);
            let piece_mid = start + (end - start) / 2;
            let t = (piece_mid - mid) as f64;
            let (own_at, own_slope, own_sigma, own_slope_sigma) = deviation_at(own, t);
            let (ref_at, ref_slope, ref_sigma, ref_slope_sigma) = deviation_at(reference, t - shift);
            let unknown = |v: f64| v == f64::MAX;
            let uncertainty_ns =
                if unknown(seg.uncertainty_ns) { f64::MAX } else { seg.uncertainty_ns.hypot(own_sigma).hypot(ref_sigma) };
            let drift_uncertainty_ppb = if unknown(seg.drift_uncertainty_ppb) {
                f64::MAX
            } else {
                seg.drift_uncertainty_ppb.hypot(own_slope_sigma * 1e9).hypot(ref_slope_sigma * 1e9)
            };
            ClockSegment {
                start_local_ns: start,
                end_local_ns: end,
                mid_local_ns: piece_mid,
                offset_ns: seg.correction_ns(piece_mid) + own_at - ref_at,
                drift_ppb: seg.drift_ppb + (own_slope - ref_slope) * 1e9,
                uncertainty_ns,
                drift_uncertainty_ppb,
                flagged: seg.flagged || !(uncertainty_ns <= max_uncertainty_ns),
                break_at_start: k > 0,
                ..*seg
            }
        })
        .collect()
}

mod hinge;
mod neighbours;
use neighbours::CleanEdge;

#[cfg(test)]
mod tests;
