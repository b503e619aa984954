//! The pieces of a node's clock across a frequency change (a kink) as one continuous
//! line: a servo (chrony) sets a new frequency, never a new phase, so at a kink the two
//! pieces share their value and only the slope changes.
//!
//! Fitted on its own, a short piece at a window's end (a few slices of each edge) has a
//! max-margin line whose value and slope are both loose: in the simulator's disciplined
//! scenario such end pieces carried most of the error tail. Tied to its long neighbour at
//! the kink, only its slope is free. So, per edge: the longest piece of each run of pieces
//! joined by kinks is fitted as before (`piece_line`'s max-margin line), and its
//! neighbours, outward, each get the max-margin line through the edge's value at the kink
//! (`pivoted_fit`). The node's piece is then the mean of the middle half over its edges,
//! as for independent pieces. A step breaks the phase: the pieces on its two sides are
//! fitted independently, as before.

use super::{middle_mean_and_error, node_time, Break, CleanEdge, NodeEdge, PieceLine, Slice, BREAK_GUARD_NS};
use crate::estimate::hull::{self, Line};
use crate::estimate::points::Point;

/// No residual slope about an edge's line is this steep (an ntpd slew is 500 ppm): the
/// bracket of the pivoted fit's slope search.
const MAX_SLOPE: f64 = 2e-3;
/// Golden-section steps: the bracket shrinks by 0.618 each, to ~1e-20 of its width.
const SEARCH_STEPS: usize = 100;

/// The max-margin line through `pivot`: the slope that maximizes the smallest vertical
/// distance of the forward points above and the reverse points below it. The margin, as
/// a function of the slope, is the minimum of linear functions (concave), so a
/// golden-section search finds its maximum. None without a point of each direction.
pub(super) fn pivoted_fit(fwd: &[Point], rev: &[Point], pivot: Point) -> Option<Line> {
    if fwd.is_empty() || rev.is_empty() {
        return None;
    }
    let margin = |s: f64| {
        let above = fwd.iter().map(|p| p.y_ns - pivot.y_ns - s * (p.x_ns - pivot.x_ns)).fold(f64::INFINITY, f64::min);
        let below = rev.iter().map(|p| pivot.y_ns + s * (p.x_ns - pivot.x_ns) - p.y_ns).fold(f64::INFINITY, f64::min);
        above.min(below)
    };
    let ratio = 0.5 * (5f64.sqrt() - 1.0);
    let (mut lo, mut hi) = (-MAX_SLOPE, MAX_SLOPE);
    let (mut a, mut b) = (hi - ratio * (hi - lo), lo + ratio * (hi - lo));
    let (mut ga, mut gb) = (margin(a), margin(b));
    for _ in 0..SEARCH_STEPS {
        if ga < gb {
            lo = a;
            (a, ga) = (b, gb);
            b = lo + ratio * (hi - lo);
            gb = margin(b);
        } else {
            hi = b;
            (b, gb) = (a, ga);
            a = hi - ratio * (hi - lo);
            ga = margin(a);
        }
    }
    let slope = 0.5 * (lo + hi);
    slope.is_finite().then(|| Line { slope, intercept_ns: pivot.y_ns - slope * pivot.x_ns })
}

/// The edge's x where the node reads `t` (node time from the window midpoint), on the
/// edge's line `line`: the inverse of `node_time` (one step of the fixed point, as in
/// `piece_line`).
fn edge_x(t: f64, edge: &NodeEdge, line: &Line) -> f64 {
    if edge.sign > 0.0 {
        t - edge.shift_ns - line.at(t - edge.shift_ns)
    } else {
        t
    }
}

/// One edge's lines of the pieces between `bounds` (node time), where `kink[j]` says
/// whether bound j + 1 is a kink (continuous phase): per run of pieces joined by kinks,
/// its longest piece by the max-margin fit of its own slices, the others through the
/// value of their inner neighbour at the kink between them. None for a piece whose edge
/// has no line (too few slices there, or an inner neighbour without one).
fn edge_lines(slices: &[Slice], edge: &NodeEdge, bounds: &[f64], kink: &[bool], half: f64) -> Vec<Option<Line>> {
    let n = bounds.len() - 1;
    let inside = |j: usize| {
        let from = if bounds[j] > -half { bounds[j] + BREAK_GUARD_NS } else { bounds[j] };
        let to = if bounds[j + 1] < half { bounds[j + 1] - BREAK_GUARD_NS } else { bounds[j + 1] };
        let (fwd, rev): (Vec<Point>, Vec<Point>) = slices
            .iter()
            .filter(|s| (from..to).contains(&node_time(s, edge.sign, edge.shift_ns)))
            .map(|s| (s.fwd, s.rev))
            .unzip();
        (fwd, rev)
    };
    let mut lines: Vec<Option<Line>> = vec![None; n];
    let mut first = 0;
    while first < n {
        // The run of pieces first..=last, joined by kinks.
        let mut last = first;
        while last + 1 < n && kink[last] {
            last += 1;
        }
        let longest = (first..=last).max_by(|&x, &y| (bounds[x + 1] - bounds[x]).total_cmp(&(bounds[y + 1] - bounds[y]))).unwrap_or(first);
        let (fwd, rev) = inside(longest);
        lines[longest] = hull::fit(&fwd, &rev).ok().map(|f| f.line);
        let through = |inner: Option<Line>, j: usize, at: f64| {
            let inner = inner?;
            let x = edge_x(at, edge, &inner);
            let (fwd, rev) = inside(j);
            pivoted_fit(&fwd, &rev, Point { x_ns: x, y_ns: inner.at(x) })
        };
        for j in (first..longest).rev() {
            lines[j] = through(lines[j + 1], j, bounds[j + 1]);
        }
        for j in longest + 1..=last {
            lines[j] = through(lines[j - 1], j, bounds[j]);
        }
        first = last + 1;
    }
    lines
}

/// The node's pieces between its `breaks`, each piece continuous with its neighbour
/// across a kink: per piece, the mean of the middle half over the node's edges of their
/// lines' values at its midpoint and slopes. None when a piece has fewer than two edges'
/// lines.
pub(super) fn continuous_pieces(edges: &[CleanEdge], breaks: &[Break], half: f64) -> Option<Vec<PieceLine>> {
    let bounds: Vec<f64> = std::iter::once(-half).chain(breaks.iter().map(|b| b.at_ns)).chain(std::iter::once(half)).collect();
    let kink: Vec<bool> = breaks.iter().map(|b| !b.step).collect();
    let n = bounds.len() - 1;
    let (mut at_mid, mut slopes) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for CleanEdge { edge, slices } in edges {
        for (j, line) in edge_lines(slices, edge, &bounds, &kink, half).into_iter().enumerate() {
            let Some(line) = line else { continue };
            let mid = 0.5 * (bounds[j] + bounds[j + 1]);
            at_mid[j].push(edge.scale * edge.sign * line.at(edge_x(mid, edge, &line)));
            slopes[j].push(edge.sign * line.slope);
        }
    }
    (0..n)
        .map(|j| {
            if at_mid[j].len() < 2 {
                return None;
            }
            let mid = 0.5 * (bounds[j] + bounds[j + 1]);
            let (value, sigma_ns) = middle_mean_and_error(&mut at_mid[j]);
            let (slope, slope_sigma) = middle_mean_and_error(&mut slopes[j]);
            Some(PieceLine {
                start_ns: bounds[j],
                end_ns: bounds[j + 1],
                line: Line { slope, intercept_ns: value - slope * mid },
                sigma_ns,
                slope_sigma,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forward points 20 ns above and reverse points 20 ns below a line of 300 ppb through
    /// the pivot (a few forward points queued far above it): the pivoted fit finds that
    /// slope, and nothing without a point of each direction.
    #[test]
    fn the_pivoted_fit_finds_the_slope_through_the_pivot() {
        let pivot = Point { x_ns: -5e9, y_ns: 50.0 };
        let truth = |x: f64| pivot.y_ns + 3e-7 * (x - pivot.x_ns);
        let xs: Vec<f64> = (0..10).map(|k| k as f64 * 0.5e9).collect();
        let fwd: Vec<Point> =
            xs.iter().enumerate().map(|(k, &x)| Point { x_ns: x, y_ns: truth(x) + 20.0 + if k % 3 == 1 { 5_000.0 } else { 0.0 } }).collect();
        let rev: Vec<Point> = xs.iter().map(|&x| Point { x_ns: x + 1e8, y_ns: truth(x + 1e8) - 20.0 }).collect();
        let line = pivoted_fit(&fwd, &rev, pivot).expect("a line");
        assert!((line.slope - 3e-7).abs() < 1e-12, "slope {}", line.slope);
        assert!((line.at(pivot.x_ns) - pivot.y_ns).abs() < 1e-6, "{line:?}");
        assert_eq!(pivoted_fit(&fwd, &[], pivot), None);
    }
}
