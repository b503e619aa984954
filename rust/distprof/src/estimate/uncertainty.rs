//! The calibrated uncertainty: a standard deviation of the offset error under the stated
//! assumption that each edge's forward and reverse paths have the same minimum delay.
//!
//! The worst-case bound (`bound`) covers any path asymmetry and so can never be narrower
//! than half the smallest round trip; it says what the data proves, not how good the sync
//! is. This module says how good it is when paths are symmetric, from the data alone:
//!
//! - Per edge: the max-margin line sits midway between the lowest forward and the highest
//!   reverse point. Under symmetry the true line sits midway between the two delay floors,
//!   so the error is half the difference of how far each extreme point lies off its floor.
//!   That excess is unknown, but its scale is not: near the floor the points of a direction
//!   are spread like its smallest order statistics, whose spacings have the same scale as
//!   the excess of the smallest (for any delay density that is smooth near its floor). So
//!   each direction's scale is the mean spacing of its `SPACINGS + 1` smallest residuals
//!   to the line, and the edge's sigma is half their root sum of squares.
//! - Per node: the network solve is a weighted least-squares fit, so with independent
//!   edges the covariance of the node offsets follows from the edge sigmas and the weights
//!   exactly (the inverse of the normal matrix when the weights are 1 / sigma²); a node's
//!   sigma is the root of its diagonal entry. `variance` estimates that diagonal, and each
//!   edge's expected residual variance, by random projection: near-linear in the edges, the
//!   same quantity at every N, within ~8% (rms) of the exact sigma.
//! - Loop residuals check the edge sigmas: if the edges disagree around loops by more or
//!   less than their sigmas allow (asymmetric paths, timestamp faults, a sigma off in
//!   scale), every node sigma of the window scales by the root of that ratio (the Birge
//!   ratio: the residuals' sum of squares over the sum their sigmas predict, without the
//!   few burst-hit edges; see `birge_ratio`). An asymmetry that differs between edges shows up here; one
//!   that is the same on every path is invisible to any two-way measurement, and only the
//!   bound covers it.
//!
//! The calibration (that the truth lies within 2 sigma in ~95% of node-windows) is measured
//! by `distprof bench accuracy` on the reference simulation and on `distprof local` runs
//! (docs/estimation.md).

use super::hull::Line;
use super::network::{self, tree_parents, EdgeObs, NetworkSolution};
use super::variance::variances;
use super::points::Point;

/// Smallest residuals per direction whose spacings give its scale: more average better but
/// reach further from the floor, where the density changes.
const SPACINGS: usize = 4;
/// No edge is better than this (timestamps are integer ns; spacings can be zero when
/// residuals repeat); keeps the weights and the normal matrix finite.
const MIN_EDGE_SIGMA_NS: f64 = 1.0;
/// Median of the chi² distribution with one degree of freedom.
const CHI2_1_MEDIAN: f64 = 0.454_936;
/// A residual further than this many sigmas (of the first, median-based scale) is an
/// outlier (a delay burst moves an edge by tens of µs, thousands of sigmas) and stays out of
/// the Birge ratio. Far enough out that the noise of the edge sigmas themselves (an edge's
/// sigma can be a third of its true value) does not reach it: a 3.3-sigma cut (chi²(1)'s
/// 99.9% point) dropped ~3% of the ordinary edges, and with them 12% of the sum of squares.
const OUTLIER_SIGMAS: f64 = 10.0;
/// With fewer loops (equations beyond the unknowns) than this the Birge ratio is too rough
/// to shrink the sigmas (chi² of 4 degrees of freedom: a factor 5 between its 5% and 95%
/// points); it only grows them, without the t factor.
const MIN_DOF_TO_SHRINK: usize = 5;
/// Sigma of an edge's theta at the window midpoint (ns), from the points of both
/// directions (sorted or not) and the line fitted to them. Infinite with fewer than two
/// points in a direction.
pub fn edge_sigma_ns(fwd: &[Point], rev: &[Point], line: &Line) -> f64 {
    let f = floor_scale_ns(fwd.iter().map(|p| p.y_ns - line.at(p.x_ns)));
    let r = floor_scale_ns(rev.iter().map(|p| line.at(p.x_ns) - p.y_ns));
    sigma_of_scales(f, r)
}

/// An edge's sigma from the floor scales of its two directions.
fn sigma_of_scales(f: f64, r: f64) -> f64 {
    (0.5 * (f * f + r * r).sqrt()).max(MIN_EDGE_SIGMA_NS)
}

/// The points near an edge's delay floors from which the sigma of the line the window
/// finally uses (after the drift refit, `drift`) is computed again
/// (`WindowFits::set_lines`): per direction the `SPACINGS + 1` points of smallest residual
/// to the fitted line and the hull vertices. A subset of the points, so the refit line's
/// sigma from them is never below the one from all points (its spacings can only be
/// wider): conservative, +2% to +52% under tilts of 10-30 ppb (unit test). Keeping every
/// point that could be among the smallest for some tilt was exact but cost a second pass
/// over every point of every edge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FloorPoints {
    pub fwd: Vec<Point>,
    pub rev: Vec<Point>,
}

impl FloorPoints {
    /// The sigma of `line` (`edge_sigma_ns`) from the kept points.
    pub fn sigma_ns(&self, line: &Line) -> f64 {
        edge_sigma_ns(&self.fwd, &self.rev, line)
    }

    /// Adds the hull vertices (`fwd_lower`, `rev_upper`), each point once: a point kept
    /// twice would be a zero spacing.
    pub fn with_vertices(mut self, fwd_lower: &[Point], rev_upper: &[Point]) -> Self {
        for (kept, vertices) in [(&mut self.fwd, fwd_lower), (&mut self.rev, rev_upper)] {
            kept.extend(vertices);
            kept.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns).then(a.y_ns.total_cmp(&b.y_ns)));
            kept.dedup();
        }
        self
    }
}

/// `edge_sigma_ns` of `line` and the points of smallest residual of each direction, in
/// the one pass the sigma needs (it reads every point of every edge).
pub fn edge_sigma_and_lowest(fwd: &[Point], rev: &[Point], line: &Line) -> (f64, FloorPoints) {
    let (f, fwd) = scan_floor(fwd, |p| p.y_ns - line.at(p.x_ns));
    let (r, rev) = scan_floor(rev, |p| line.at(p.x_ns) - p.y_ns);
    (sigma_of_scales(f, r), FloorPoints { fwd, rev })
}

/// One direction: the floor scale of its residuals (`floor_scale_ns`) and the points of
/// the smallest few.
fn scan_floor(points: &[Point], residual: impl Fn(&Point) -> f64) -> (f64, Vec<Point>) {
    let mut lowest = Lowest::new();
    for p in points {
        lowest.add(residual(p), *p);
    }
    (lowest.scale(), lowest.low.iter().filter(|(v, _)| v.is_finite()).map(|(_, p)| *p).collect())
}

/// The `SPACINGS + 1` smallest of a stream of values (each with its point), and how many
/// there were.
struct Lowest {
    low: [(f64, Point); SPACINGS + 1],
    n: usize,
}

impl Lowest {
    fn new() -> Self {
        Self { low: [(f64::INFINITY, Point { x_ns: 0.0, y_ns: 0.0 }); SPACINGS + 1], n: 0 }
    }

    fn add(&mut self, v: f64, p: Point) {
        self.n += 1;
        if !(v < self.low[SPACINGS].0) {
            return;
        }
        // Insertion into the sorted few: most values are far above and stop at the check.
        let mut i = SPACINGS;
        while i > 0 && self.low[i - 1].0 > v {
            self.low[i] = self.low[i - 1];
            i -= 1;
        }
        self.low[i] = (v, p);
    }

    /// Mean spacing of the kept few; infinite with fewer than two.
    fn scale(&self) -> f64 {
        let k = self.n.min(SPACINGS + 1);
        if k < 2 {
            return f64::INFINITY;
        }
        (self.low[k - 1].0 - self.low[0].0) / (k - 1) as f64
    }
}

/// Mean spacing of the smallest `SPACINGS + 1` values (fewer if there are fewer).
fn floor_scale_ns(values: impl Iterator<Item = f64>) -> f64 {
    let mut lowest = Lowest::new();
    values.for_each(|v| lowest.add(v, Point { x_ns: 0.0, y_ns: 0.0 }));
    lowest.scale()
}

/// Each node's offset sigma (ns) from the accepted edges' sigmas, grown by the window's
/// Birge ratio; None for unreachable nodes, 0 for the reference. `wls` false: the tree
/// solution's, the sum of variances along each node's path.
pub fn node_sigmas_ns(
    num_nodes: usize,
    reference: u32,
    obs: &[EdgeObs],
    edge_sigma_ns: &[f64],
    solution: &NetworkSolution,
    wls: bool,
) -> NodeSigmas {
    let rejected: Vec<_> = solution.edges.iter().map(|v| v.rejected).collect();
    let reached = |i: usize| solution.offset_ns.get(i).copied().flatten().is_some();
    let nodes: Vec<usize> = (0..num_nodes).filter(|&i| i != reference as usize && reached(i)).collect();
    let mut var = vec![None; num_nodes];
    if (reference as usize) < num_nodes {
        var[reference as usize] = Some(0.0);
    }
    let sigma = |i: usize| edge_sigma_ns[i].max(MIN_EDGE_SIGMA_NS);
    // Per accepted edge: Var(residual) if the edge sigmas were right.
    let mut residual_var_ns2 = vec![None; obs.len()];
    if wls {
        let system = network::system(num_nodes, reference, obs, &rejected, &solution.offset_ns);
        let v = variances(&system.matrix, &row_sigmas_ns(&system, edge_sigma_ns));
        for (node, v) in system.nodes.iter().zip(v.node_var_ns2) {
            var[*node] = Some(v);
        }
        for (&i, v) in system.edges.iter().zip(v.residual_var_ns2) {
            residual_var_ns2[i] = Some(v);
        }
    } else {
        let parents = tree_parents(num_nodes, reference, obs, &rejected);
        for (v, parent) in parents {
            let e = &obs[parent];
            let u = e.other(v) as usize;
            let k = 1.0 + e.alpha;
            // v from u across the edge: o_dst = beta + k o_src, or o_src = (o_dst - beta) / k.
            let up = var[u].unwrap_or(0.0);
            let s2 = sigma(parent).powi(2);
            var[v as usize] = Some(if u == e.src as usize { s2 + k * k * up } else { (s2 + up) / (k * k) });
        }
    }
    // The Birge ratio from the loop residuals of the accepted edges (`birge_ratio`).
    let accepted: Vec<usize> = (0..solution.edges.len().min(edge_sigma_ns.len()))
        .filter(|&i| solution.edges[i].rejected.is_none() && solution.edges[i].offset_residual_ns.is_finite())
        .collect();
    let dof = accepted.len().saturating_sub(nodes.len());
    // (squared residual, its expected variance if the sigmas were right) per edge; an edge
    // no loop passes through (a bridge) has residual zero whatever its sigma.
    let pairs: Vec<(f64, f64)> = accepted
        .iter()
        .filter_map(|&i| Some((solution.edges[i].offset_residual_ns.powi(2), residual_var_ns2[i]?.max(1e-9 * sigma(i).powi(2)))))
        .collect();
    let ratio = birge_ratio(&pairs);
    // The ratio is measured from `dof` loops; with few of them it is itself uncertain, and
    // the error over the scaled sigma follows Student's t with `dof` degrees of freedom, not
    // a Gaussian: the sigma grows by the t quantile over the Gaussian one at 2 sigma, so
    // that 2 sigmas cover what 2 Gaussian sigmas would (x1.16 at 9 loops, the 4-node
    // full mesh; x1.004 at 449, 64 nodes).
    let birge = match dof {
        _ if !wls || !ratio.is_finite() => 1.0,
        0 => 1.0,
        d if d >= MIN_DOF_TO_SHRINK => ratio * t_over_gauss_at_2_sigma(d as f64).powi(2),
        // Too few to trust either way (nor the expansion below 5).
        _ => ratio.max(1.0),
    };
    // Drift: the rate equations have the same matrix and weights as the offset ones, and
    // an edge's slope error scales like its offset error (both come from the same extreme
    // points over the same span), so the node rate covariance is the offset one times
    // one factor. The drift loop residuals measure that factor as the offsets' measure
    // their scale: the drift residuals' sum of squares over the residual variances the
    // edge sigmas predict (ppb² per ns²). No loops (a tree, or the tree mode): unknown.
    let drift_pairs: Vec<(f64, f64)> = accepted
        .iter()
        .filter(|&&i| solution.edges[i].drift_residual_ppb.is_finite())
        .filter_map(|&i| Some((solution.edges[i].drift_residual_ppb.powi(2), residual_var_ns2[i]?.max(1e-9 * sigma(i).powi(2)))))
        .collect();
    let drift_scale = match dof {
        _ if !wls || drift_pairs.is_empty() => None,
        0 => None,
        d => Some(birge_ratio(&drift_pairs) * t_over_gauss_at_2_sigma(d.max(MIN_DOF_TO_SHRINK) as f64).powi(2)),
    };
    let root = |v: Option<f64>, scale: f64| v.map(|v| (v * scale).sqrt());
    NodeSigmas {
        offset_ns: var.iter().enumerate().map(|(i, &v)| root(v.filter(|_| reached(i)), birge)).collect(),
        drift_ppb: var
            .iter()
            .enumerate()
            .map(|(i, &v)| if i == reference as usize { v.map(|_| 0.0) } else { root(v.filter(|_| reached(i)), drift_scale?) })
            .collect(),
    }
}

/// The statistical sigmas of every node (indexed by node; None: unreachable, or for the
/// drift, unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSigmas {
    /// Of the offset at the window midpoint, ns.
    pub offset_ns: Vec<Option<f64>>,
    /// Of the drift over the window, ppb.
    pub drift_ppb: Vec<Option<f64>>,
}

/// The sigma of each row of the system: its edge's, floored at `MIN_EDGE_SIGMA_NS`.
pub fn row_sigmas_ns(system: &network::System, edge_sigma_ns: &[f64]) -> Vec<f64> {
    system.edges.iter().map(|&i| edge_sigma_ns[i].max(MIN_EDGE_SIGMA_NS)).collect()
}

/// Student's t quantile with `nu` degrees of freedom at the Gaussian's 2-sigma tail
/// probability, over 2 (the Cornish-Fisher expansion in 1 / nu to third order: within 0.3%
/// from nu = 5 up).
fn t_over_gauss_at_2_sigma(nu: f64) -> f64 {
    let z: f64 = 2.0;
    let t = z
        + (z.powi(3) + z) / (4.0 * nu)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * nu * nu)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * nu.powi(3));
    t / z
}

/// The Birge ratio of a window: the factor the edge variances must be multiplied by for
/// the loop residuals to be what they predict. `pairs`: per accepted edge, its squared
/// residual and the variance its sigma predicts for it (1.0 without pairs).
///
/// A ratio of sums, not the median (or mean) of each edge's ratio: an edge's sigma comes
/// from a handful of spacings and is itself off by ~±35%, and dividing each residual by its
/// own noisy sigma inflates the ratio (E[1 / s²] > 1 / E[s²]); in the reference simulation
/// the median of the per-edge ratios overstated the node variances by ~15% (2-sigma
/// coverage 0.970 over twelve runs, 0.954 with the sums). Delay bursts give a few edges
/// residuals far beyond any noise; a first scale from the median of the per-edge ratios
/// (robust to them) names those beyond `OUTLIER_SIGMAS`, and they stay out of both sums.
fn birge_ratio(pairs: &[(f64, f64)]) -> f64 {
    let mut q: Vec<f64> = pairs.iter().map(|(r2, v)| r2 / v).collect();
    q.sort_by(f64::total_cmp);
    let Some(median) = q.get(q.len() / 2) else { return 1.0 };
    let first = median / CHI2_1_MEDIAN;
    let cut = OUTLIER_SIGMAS * OUTLIER_SIGMAS * first;
    let (num, den) = pairs
        .iter()
        .filter(|(r2, v)| r2 / v <= cut)
        .fold((0.0, 0.0), |(num, den), (r2, v)| (num + r2, den + v));
    if den > 0.0 {
        num / den
    } else {
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::network;

    /// The sigma of the refit line from the kept points (the lowest few and the hull
    /// vertices) against the sigma from every point: equal for the fitted line, never
    /// below it under a tilt, and at most 1.6 times it under the tilts a drift refit makes
    /// (own-window slope error ~26 ppb at p99 over a 15 s window), from ~30 of 1,500 points.
    #[test]
    fn floor_points_give_the_sigma_of_the_refit_line() {
        let mut noise = crate::estimate::test_noise::XorShift::new(0x2545_f491_4f6c_dd1d);
        let mut exp = move |mean: f64| noise.exp(mean);
        // 15 s window, 750 points a direction, 10 us floor, 20 us mean queueing.
        let mut side = |sign: f64| -> Vec<Point> {
            (0..750).map(|i| Point { x_ns: i as f64 * 2e7 - 7.5e9, y_ns: sign * (10_000.0 + exp(20_000.0)) }).collect()
        };
        let (fwd, rev) = (side(1.0), side(-1.0));
        let fit = crate::estimate::hull::fit(&fwd, &rev).unwrap();
        let (sigma, floor) = edge_sigma_and_lowest(&fwd, &rev, &fit.line);
        assert_eq!(sigma, edge_sigma_ns(&fwd, &rev, &fit.line));
        let floor = floor.with_vertices(&fit.hulls.fwd_lower, &fit.hulls.rev_upper);
        assert!(floor.fwd.len() + floor.rev.len() < 60, "{} + {} kept", floor.fwd.len(), floor.rev.len());
        assert_eq!(floor.sigma_ns(&fit.line), sigma);
        for tilt in [-100e-9, -30e-9, -10e-9, 10e-9, 30e-9, 100e-9] {
            let used = fit.hulls.line_at_slope(fit.line.slope + tilt).unwrap();
            let (kept, all) = (floor.sigma_ns(&used), edge_sigma_ns(&fwd, &rev, &used));
            // Never below (the kept are a subset: their spacings can only be wider), and at
            // most 1.6 times above within 30 ppb (measured +2% to +52%).
            assert!(kept >= all, "tilt {tilt}: {kept:.1} from the kept points, {all:.1} from all");
            assert!(tilt.abs() > 30e-9 || kept <= 1.6 * all, "tilt {tilt}: {kept:.1} from the kept points, {all:.1} from all");
        }
    }

    #[test]
    fn floor_scale_is_the_mean_spacing_of_the_lowest() {
        assert_eq!(floor_scale_ns([9.0, 1.0, 100.0, 3.0, 5.0, 7.0, 50.0].into_iter()), 2.0);
        assert_eq!(floor_scale_ns([4.0, 1.0].into_iter()), 3.0);
        assert!(floor_scale_ns([4.0].into_iter()).is_infinite());
    }

    /// On a chain ref - 1 - 2 and a triangle, the dense variances are the textbook ones.
    #[test]
    fn node_sigmas_are_the_least_squares_covariance() {
        let e = |src, dst, beta_ns| EdgeObs { src, dst, alpha: 0.0, beta_ns, weight: 1.0 };
        // Chain: var(1) = s01², var(2) = s01² + s12².
        let obs = [e(0, 1, 10.0), e(1, 2, 5.0)];
        let sol = network::solve(3, 0, &obs, true);
        let s = node_sigmas_ns(3, 0, &obs, &[3.0, 4.0], &sol, true).offset_ns;
        assert_eq!(s[0], Some(0.0));
        assert!((s[1].unwrap() - 3.0).abs() < 1e-9 && (s[2].unwrap() - 5.0).abs() < 1e-9, "{s:?}");
        let tree = node_sigmas_ns(3, 0, &obs, &[3.0, 4.0], &sol, false).offset_ns;
        assert!((tree[2].unwrap() - 5.0).abs() < 1e-9, "{tree:?}");
        // Triangle of equal sigmas s, consistent (no residual): var = 2/3 s² per node.
        let obs = [e(0, 1, 10.0), e(1, 2, 5.0), e(0, 2, 15.0)];
        let sol = network::solve(3, 0, &obs, true);
        let s = node_sigmas_ns(3, 0, &obs, &[3.0; 3], &sol, true).offset_ns;
        let want = (2.0f64 / 3.0).sqrt() * 3.0;
        assert!((s[1].unwrap() - want).abs() < 1e-9 && (s[2].unwrap() - want).abs() < 1e-9, "{s:?}");
    }

    /// Residuals twice the size their sigmas predict, sigmas each off by the spread of an
    /// estimate from four spacings, and 2% burst-hit edges: the ratio is the true 4 within
    /// 10% (2,000 edges: the sums' own noise is ~3%), where the median of the per-edge
    /// ratios is pushed up by the sigmas' noise.
    #[test]
    fn birge_ratio_is_the_residuals_scale_despite_noisy_sigmas_and_bursts() {
        let mut noise = crate::estimate::test_noise::XorShift::new(0x9e37_79b9_7f4a_7c15);
        let mut pairs = Vec::new();
        for i in 0..2000 {
            let gauss = noise.gauss();
            // A scale from 4 exponential spacings: Gamma(4) / 4, mean 1.
            let scale = -(0..4).map(|_| noise.open_unit().ln()).sum::<f64>() / 4.0;
            let r = if i % 50 == 0 { 1e4 } else { 2.0 * gauss };
            pairs.push((r * r, scale * scale / 1.25));
        }
        let ratio = birge_ratio(&pairs);
        assert!((ratio - 4.0).abs() < 0.4, "{ratio}");
        let mut q: Vec<f64> = pairs.iter().map(|(r2, v)| r2 / v).collect();
        q.sort_by(f64::total_cmp);
        assert!(q[q.len() / 2] / CHI2_1_MEDIAN > 1.1 * ratio, "the median of ratios: {}", q[q.len() / 2] / CHI2_1_MEDIAN);
        assert_eq!(birge_ratio(&[]), 1.0);
    }

    /// The t factor: ~2.32 / 2 at 9 degrees of freedom (the tables' 2.32), -> 1 with many.
    #[test]
    fn the_t_factor_follows_the_degrees_of_freedom() {
        assert!((t_over_gauss_at_2_sigma(9.0) * 2.0 - 2.32).abs() < 0.01, "{}", t_over_gauss_at_2_sigma(9.0));
        assert!((t_over_gauss_at_2_sigma(5.0) * 2.0 - 2.65).abs() < 0.01, "{}", t_over_gauss_at_2_sigma(5.0));
        assert!((t_over_gauss_at_2_sigma(449.0) - 1.0).abs() < 0.005);
    }

    /// A loop that does not close within its sigmas (an asymmetric edge) grows every sigma.
    #[test]
    fn loop_residuals_beyond_the_sigmas_grow_them() {
        let e = |src, dst, beta_ns| EdgeObs { src, dst, alpha: 0.0, beta_ns, weight: 1.0 };
        let closed = [e(0, 1, 10.0), e(1, 2, 5.0), e(0, 2, 15.0), e(0, 3, 1.0), e(3, 2, 14.0)];
        let open = [e(0, 1, 10.0), e(1, 2, 5.0), e(0, 2, 15.0), e(0, 3, 1.0), e(3, 2, 34.0)];
        let sig = [3.0; 5];
        let a = node_sigmas_ns(4, 0, &closed, &sig, &network::solve(4, 0, &closed, true), true).offset_ns;
        let b = node_sigmas_ns(4, 0, &open, &sig, &network::solve(4, 0, &open, true), true).offset_ns;
        for i in 1..4 {
            assert!(b[i].unwrap() > 2.0 * a[i].unwrap(), "{a:?} {b:?}");
        }
    }
}
