//! A node's deviation from its window line, and its breaks: a line plus, per break, a
//! change of slope and, where the clock steps, a step, fitted by weighted least squares
//! on bin medians of the node's slices; a break is searched on a grid and kept only where
//! it lowers the chi-square by far more than the noise can.

use super::{median, slice_count, SLICE_NS};

/// A break is searched this far from the window's ends at least, ns: a piece needs a few
/// slices of every edge to be fitted.
const MIN_PIECE_NS: f64 = 1.0e9;
/// Step of the search grid of a break's time, ns (then refined by `REFINE_STEP_NS`).
const GRID_STEP_NS: f64 = 250_000_000.0;
const REFINE_STEP_NS: f64 = 50_000_000.0;
/// At most this many breaks of one node's clock per window: a chrony poll is 16-64 s, an
/// ntpd slew starts and stops.
const MAX_BREAKS: usize = 2;
/// A break is kept when it lowers the chi-square of the deviation fit by more than this.
/// The bins' noise comes from their spread (`bins_of`); without a break the best of the
/// ~60 places tried lowers it by ~10. Tuned on seeds 1-3 of the simulator (64 nodes):
/// the reference scenario has no break at 30 (one node-window of 756 at 20), and the
/// disciplined one gains little below it (at 150 / 60 / 30: 2-sigma coverage 0.72 /
/// 0.80 / 0.87, p99 2.0 / 1.8 / 1.7 us; no breaks: 0.61, 3.4 us).
pub(super) const ACCEPT_CHI2: f64 = 30.0;
/// ...and this, once some clock of the window breaks and each edge has lost its neighbour's
/// deviation (`neighbours`): the free-running clocks that `ACCEPT_CHI2` keeps unbroken
/// never get here (a window without a break at `ACCEPT_CHI2` ends first), and the kinks of
/// 200-500 ppb that it leaves in a chrony-disciplined clock cost 200-670 ns at the
/// window's midpoint. Tuned on seeds 1-4 / 5-8 (64 nodes, disciplined p99 at 30, 20, 15,
/// 12, 10, 8: 346/487, 298/487, 265/348, 281/373, 298/393, 313/407 ns).
pub(super) const ACCEPT_CHI2_CLEANED: f64 = 15.0;
/// A break is a step of the clock (not only a change of its frequency) when the step
/// lowers the chi-square by more than this again: real steps (a leap second, `date -s`,
/// ms and more) do so by orders of magnitude, and a free step would take up any
/// misplacement of a frequency change (as the 6-node test shows at 30).
const STEP_CHI2: f64 = 1000.0;
/// ...and when the break moves the deviation by more than this somewhere, ns: below it a
/// line serves as well.
const MIN_EFFECT_NS: f64 = 40.0;
/// The noise of a bin median is about sqrt(pi / 2) times that of a bin mean.
const MEDIAN_VARIANCE_FACTOR: f64 = std::f64::consts::FRAC_PI_2;

/// A break of a clock inside a window: where, and whether the clock steps there (else
/// its phase is continuous and only its frequency changes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Break {
    /// ns from the window midpoint, in the node's clock.
    pub at_ns: f64,
    pub step: bool,
}

/// One node's clock against its window line inside the window: a line plus, at each
/// break, a change of slope and, where it steps, a step; t in ns of the node's clock from
/// the window midpoint. Basis: 1, t, then per break (t - b)+ and, for a step, H(t - b)
/// (t in seconds). A frequency change alone keeps the phase continuous, which is what
/// places it between two slices: a step there would take up any misplacement.
#[derive(Debug, Clone, PartialEq)]
pub struct Deviation {
    /// The breaks, by time.
    pub breaks: Vec<Break>,
    pub(super) coef: Vec<f64>,
    /// Covariance of `coef`, row-major, scaled by the fit's chi-square per degree of
    /// freedom when above 1 (the model or the noise estimate is off by that much).
    pub(super) cov: Vec<f64>,
}

fn basis(breaks: &[Break], t_ns: f64) -> Vec<f64> {
    let mut v = vec![1.0, t_ns * 1e-9];
    for b in breaks {
        v.push((t_ns - b.at_ns).max(0.0) * 1e-9);
        if b.step {
            v.push(if t_ns >= b.at_ns { 1.0 } else { 0.0 });
        }
    }
    v
}

/// d basis / dt, per ns.
fn basis_slope(breaks: &[Break], t_ns: f64) -> Vec<f64> {
    let mut v = vec![0.0, 1e-9];
    for b in breaks {
        v.push(if t_ns >= b.at_ns { 1e-9 } else { 0.0 });
        if b.step {
            v.push(0.0);
        }
    }
    v
}

impl Deviation {
    /// The same deviation without break `k`: its coefficients dropped (a break whose
    /// piece has no data of its own; the fit is only used to place the others).
    pub(super) fn without_break(mut self, k: usize) -> Self {
        // Coefficients: 1, t, then each break's one or two.
        let start = 2 + self.breaks[..k].iter().map(|b| 1 + b.step as usize).sum::<usize>();
        let width = 1 + self.breaks[k].step as usize;
        let p = self.coef.len();
        let keep: Vec<usize> = (0..p).filter(|&i| i < start || i >= start + width).collect();
        self.coef = keep.iter().map(|&i| self.coef[i]).collect();
        self.cov = keep.iter().flat_map(|&i| keep.iter().map(move |&j| (i, j))).map(|(i, j)| self.cov[i * p + j]).collect();
        self.breaks.remove(k);
        self
    }

    pub fn at_ns(&self, t_ns: f64) -> f64 {
        dot(&basis(&self.breaks, t_ns), &self.coef)
    }

    /// Slope at t (ns per ns), on the side of t a break at exactly t starts.
    pub fn slope_at(&self, t_ns: f64) -> f64 {
        dot(&basis_slope(&self.breaks, t_ns), &self.coef)
    }

    /// One standard deviation of `at_ns(t)`.
    pub fn sigma_at_ns(&self, t_ns: f64) -> f64 {
        quad(&self.cov, &basis(&self.breaks, t_ns)).max(0.0).sqrt()
    }

    /// One standard deviation of `slope_at(t)`.
    pub fn slope_sigma_at(&self, t_ns: f64) -> f64 {
        quad(&self.cov, &basis_slope(&self.breaks, t_ns)).max(0.0).sqrt()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn quad(m: &[f64], v: &[f64]) -> f64 {
    let p = v.len();
    (0..p).map(|i| v[i] * (0..p).map(|j| m[i * p + j] * v[j]).sum::<f64>()).sum()
}

/// One bin of a node's samples: the median value, the mean time, the weight (1 / the
/// median's variance).
#[derive(Debug, Clone, Copy)]
struct Bin {
    t_ns: f64,
    value_ns: f64,
    weight: f64,
}

/// Weighted least squares of the bins on the basis of `breaks_ns`: coefficients, their
/// covariance (inverse normal matrix) and chi-square. None when singular.
fn least_squares(bins: &[Bin], breaks: &[Break]) -> Option<(Vec<f64>, Vec<f64>, f64)> {
    let p = 2 + breaks.iter().map(|b| 1 + b.step as usize).sum::<usize>();
    if bins.len() <= p {
        return None;
    }
    let mut a = vec![0.0; p * p];
    let mut rhs = vec![0.0; p];
    for b in bins {
        let v = basis(breaks, b.t_ns);
        for i in 0..p {
            rhs[i] += b.weight * v[i] * b.value_ns;
            for j in 0..p {
                a[i * p + j] += b.weight * v[i] * v[j];
            }
        }
    }
    let inv = invert(&a, p)?;
    let coef: Vec<f64> = (0..p).map(|i| (0..p).map(|j| inv[i * p + j] * rhs[j]).sum()).collect();
    let chi2 = bins.iter().map(|b| b.weight * (b.value_ns - dot(&basis(breaks, b.t_ns), &coef)).powi(2)).sum();
    Some((coef, inv, chi2))
}

/// Inverse of a small symmetric positive definite matrix by Gauss-Jordan with partial
/// pivoting; None when (nearly) singular.
fn invert(a: &[f64], p: usize) -> Option<Vec<f64>> {
    let mut m = a.to_vec();
    let mut inv = vec![0.0; p * p];
    for i in 0..p {
        inv[i * p + i] = 1.0;
    }
    let scale = (0..p).map(|i| a[i * p + i].abs()).fold(0.0, f64::max);
    for c in 0..p {
        let r = (c..p).max_by(|&x, &y| m[x * p + c].abs().total_cmp(&m[y * p + c].abs()))?;
        if !(m[r * p + c].abs() > 1e-12 * scale) {
            return None;
        }
        for k in 0..p {
            m.swap(c * p + k, r * p + k);
            inv.swap(c * p + k, r * p + k);
        }
        let d = m[c * p + c];
        for k in 0..p {
            m[c * p + k] /= d;
            inv[c * p + k] /= d;
        }
        for r2 in (0..p).filter(|&r2| r2 != c) {
            let f = m[r2 * p + c];
            if f != 0.0 {
                for k in 0..p {
                    m[r2 * p + k] -= f * m[c * p + k];
                    inv[r2 * p + k] -= f * inv[c * p + k];
                }
            }
        }
    }
    Some(inv)
}

/// Bins of `SLICE_NS` over the window (node clock, from the midpoint) from the samples
/// (t, value); the noise of one sample from the spread about the bin medians (pooled,
/// robust: a sample that straddles a step is far off and must not set it).
fn bins_of(samples: &[(f64, f64)], window_ns: i64) -> Vec<Bin> {
    let half = window_ns as f64 / 2.0;
    let Some(count) = slice_count(window_ns) else { return Vec::new() };
    let mut per: Vec<Vec<(f64, f64)>> = vec![Vec::new(); count];
    for &(t, v) in samples {
        let k = ((t + half) / SLICE_NS as f64).floor();
        if k >= 0.0 && k < count as f64 {
            per[k as usize].push((t, v));
        }
    }
    let medians: Vec<Option<f64>> =
        per.iter().map(|b| (!b.is_empty()).then(|| median(&mut b.iter().map(|s| s.1).collect::<Vec<_>>()))).collect();
    let mut spread: Vec<f64> = per
        .iter()
        .zip(&medians)
        .filter(|(b, _)| b.len() >= 2)
        .flat_map(|(b, m)| b.iter().map(move |s| (s.1 - m.unwrap_or(0.0)).abs()))
        .collect();
    if spread.len() < 8 {
        return Vec::new();
    }
    // Floor: timestamps are not better than a nanosecond.
    let sigma = (1.4826 * median(&mut spread)).max(1.0);
    per.iter()
        .zip(&medians)
        .filter_map(|(b, m)| {
            let m = (*m)?;
            let t = b.iter().map(|s| s.0).sum::<f64>() / b.len() as f64;
            Some(Bin { t_ns: t, value_ns: m, weight: b.len() as f64 / (MEDIAN_VARIANCE_FACTOR * sigma * sigma) })
        })
        .collect()
}

/// The deviation of one node's clock from its line, from its samples (t in its clock from
/// the window midpoint, value: what its edges' slices say its clock was ahead of the
/// line). None when there are too few, or no break is beyond the noise: then the window
/// line holds. A break must lower the chi-square by more than `accept_chi2`
/// (`ACCEPT_CHI2` or `ACCEPT_CHI2_CLEANED`).
pub fn deviation(samples: &[(f64, f64)], window_ns: i64, accept_chi2: f64) -> Option<Deviation> {
    let bins = bins_of(samples, window_ns);
    let (_, _, chi0) = least_squares(&bins, &[])?;
    // No break can lower the chi-square by more than all of it: most node-windows of
    // free-running clocks end here, before the search.
    if chi0 <= accept_chi2 {
        return None;
    }
    let half = window_ns as f64 / 2.0;
    let (lo, hi) = (-half + MIN_PIECE_NS, half - MIN_PIECE_NS);
    let mut breaks: Vec<Break> = Vec::new();
    let mut best_chi = chi0;
    while breaks.len() < MAX_BREAKS {
        let with = |b: Break| {
            let mut with = breaks.clone();
            with.push(b);
            with.sort_by(|x, y| x.at_ns.total_cmp(&y.at_ns));
            with
        };
        let far_enough = |at: f64| breaks.iter().all(|o| (o.at_ns - at).abs() >= MIN_PIECE_NS);
        let chi_of = |b: Break| least_squares(&bins, &with(b)).map(|r| (b, r.2));
        let grid = |from: f64, to: f64, step: f64| {
            let n = ((to - from) / step).floor().max(0.0) as usize;
            (0..=n).map(move |k| from + k as f64 * step)
        };
        // Searched as a frequency change (a step shows as one, far beyond the noise), then
        // refined; a step only where it is itself far beyond the noise again.
        let best = |step: bool, from: f64, to: f64, by: f64| {
            grid(from, to, by)
                .filter(|&at| far_enough(at))
                .filter_map(|at| chi_of(Break { at_ns: at, step }))
                .min_by(|x, y| x.1.total_cmp(&y.1))
        };
        let Some((coarse, _)) = best(false, lo, hi, GRID_STEP_NS) else { break };
        let near = |b: Break| ((b.at_ns - GRID_STEP_NS).max(lo), (b.at_ns + GRID_STEP_NS).min(hi));
        let (from, to) = near(coarse);
        let Some((kink, kink_chi)) = best(false, from, to, REFINE_STEP_NS) else { break };
        let (mut b, mut chi) = (kink, kink_chi);
        if chi_of(Break { step: true, ..kink }).is_some_and(|s| kink_chi - s.1 > STEP_CHI2) {
            if let Some(s) = best(true, from, to, REFINE_STEP_NS) {
                (b, chi) = s;
            }
        }
        if best_chi - chi <= accept_chi2 {
            break;
        }
        let before = least_squares(&bins, &breaks)?;
        let after_breaks = with(b);
        let after = least_squares(&bins, &after_breaks)?;
        let effect = bins
            .iter()
            .map(|x| (dot(&basis(&after_breaks, x.t_ns), &after.0) - dot(&basis(&breaks, x.t_ns), &before.0)).abs())
            .fold(0.0, f64::max);
        if effect < MIN_EFFECT_NS {
            break;
        }
        breaks = after_breaks;
        best_chi = chi;
    }
    if breaks.is_empty() {
        return None;
    }
    fitted(&bins, breaks)
}

/// The deviation as a line without breaks, from the same samples as `deviation`: where
/// `deviation` finds no break. None when too few.
pub(super) fn line_fit(samples: &[(f64, f64)], window_ns: i64) -> Option<Deviation> {
    fitted(&bins_of(samples, window_ns), Vec::new())
}

/// The least-squares deviation of `bins` with `breaks`, its covariance scaled by the fit's
/// chi-square per degree of freedom when above 1.
fn fitted(bins: &[Bin], breaks: Vec<Break>) -> Option<Deviation> {
    let (coef, inv, chi) = least_squares(bins, &breaks)?;
    let dof = (bins.len() - coef.len()) as f64;
    let scale = (chi / dof).max(1.0);
    Some(Deviation { breaks, coef, cov: inv.iter().map(|v| v * scale).collect() })
}
