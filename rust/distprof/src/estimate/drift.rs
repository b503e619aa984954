//! An edge's slope over several windows. One window's extreme points pin the slope only
//! to tens of ppb (their timestamp noise over a lever of a few seconds); the same
//! max-margin fit over the hulls of neighbouring windows has a longer lever. The hull of
//! a union is the hull of the union of hulls, so each window's few dozen hull vertices
//! are all a neighbour needs to keep. The offset stays this window's own: the max-margin
//! line of this window's hulls at the longer fit's slope.
//!
//! The span stops where the data show a change: a neighbour whose offset at the pair's
//! common slope disagrees with this window's beyond their noise (a frequency correction, a
//! wander of 10-20 ppb/sqrt(s), a step), or whose own slope does (a correction right at the
//! edge between them, which leaves the offsets on one chord), is left out, and so is
//! everything beyond it on that side.
//!
//! The online path (`online::History`) can only look back; `Smoother` looks both ways,
//! which centres the span on the window and so follows a wandering rate better.

use super::hull::{self, Hulls, Line};
use super::window_fits::{FittedEdge, WindowFits};
use super::points::Point;
use super::settings::EstimatorSettings;
use crate::config::EstimatorKind;

/// A neighbouring window joins an edge's drift fit only when its points and this window's
/// agree on the offset at a common slope (the two windows' max-margin slope together): the
/// intercepts of the two windows' own max-margin lines at that slope differ by at most
/// this many of their sigmas combined (`uncertainty::edge_sigma_ns`, which the spacings
/// underestimate ~2x: the loops scale it)...
const CUT_SIGMAS: f64 = 6.0;
/// ...or this floor (ns), or this many timestamp-noise levels (`gap_noise_ns`). A rate
/// change of d between windows of length W puts the intercepts ~d W / 2 apart at the
/// common slope: 100 ppb between 15 s windows is ~750 ns; a 1 ppb/sqrt(s) wander moves
/// the rate ~5 ppb in 15 s (~40 ns); a step of either clock moves it by the step.
const CUT_MIN_NS: f64 = 100.0;
const CUT_NOISE_SIGMAS: f64 = 4.0;
/// ...and their own max-margin slopes part by at most this (ns) over the lever of half the
/// neighbour's farthest point from this midpoint (0.75 W for an adjacent window: 1,500 ns
/// is 133 ppb between 15 s windows). One window's slope is good to tens of ppb; chrony's
/// corrections are 100-2,000 ppb. Chosen on seeds 1-4 of bench accuracy's disciplined,
/// wander-20 and reference scenarios (600 ns cut the reference's spans: p99 79 -> 85 ns;
/// 1,000-3,000 ns gave disciplined p99 222-268 ns, wander-20 213-306 ns).
const CUT_SLOPE_NS: f64 = 1_500.0;
/// A window whose points cover less than this fraction of it (the run's last window, cut
/// short when the run stops) says nothing of its slope: on loopback a last window of three
/// probes over 22 ms gave slopes 21.7 and 1,475 ppm off, cut every past window from the
/// span and was extrapolated to its midpoint with that slope (3.4 and 222 us off). The
/// offset test still judges it. Slopes are not compared against a tolerance of their own
/// (see `pinned_slope`).
const MIN_SLOPE_COVER: f64 = 0.5;

/// Every hull line of `fits` refit over its own and the `neighbours`' hulls of the same
/// edge, in `fits`' edge order; None where the line stays (other estimators, edges no
/// neighbour has, a degenerate fit). Apply with `WindowFits::set_lines`.
///
/// The span is cut by the data: walking outwards from the window on each side, the first
/// neighbour that disagrees with this window (`consistent`: a frequency change or a step of
/// either clock between them) ends that side, so the slope is never fitted across a change.
pub fn long_lines(fits: &WindowFits, neighbours: &[&WindowFits], settings: &EstimatorSettings) -> Vec<Option<Line>> {
    if settings.estimator != EstimatorKind::Hull || neighbours.is_empty() {
        return vec![None; fits.fitted.len()];
    }
    let mid_ns = fits.mid_ns();
    let length_ns = |w: &WindowFits| w.window().end_ns - w.window().start_ns;
    let window_ns = length_ns(fits);
    // Nearest first, so that each side stops at its first change.
    let mut order: Vec<&WindowFits> = neighbours.to_vec();
    order.sort_by_key(|n| n.mid_ns().abs_diff(mid_ns));
    fits.fitted
        .iter()
        .map(|f| {
            let mut fwd = f.line.hulls.fwd_lower.clone();
            let mut rev = f.line.hulls.rev_upper.clone();
            let mut found = false;
            let (mut before_cut, mut after_cut) = (false, false);
            // This window's own slope, for `consistent`: fitted from its hulls, so it is this
            // window's alone whatever line it carries.
            let own_slope = pinned_slope(&fwd, &rev, window_ns);
            for n in &order {
                let Some(other) = n.edge(f.key) else { continue };
                // Into this window's frame: x from this midpoint, y from this origin.
                let (Some(dx), Some(dy)) =
                    (n.mid_ns().checked_sub(mid_ns), other.y_origin_ns.checked_sub(f.y_origin_ns))
                else {
                    continue;
                };
                let cut = if dx < 0 { &mut before_cut } else { &mut after_cut };
                if *cut {
                    continue;
                }
                let shift = |p: &Point| Point { x_ns: p.x_ns + dx as f64, y_ns: p.y_ns + dy as f64 };
                let (n_fwd, n_rev): (Vec<Point>, Vec<Point>) =
                    (other.line.hulls.fwd_lower.iter().map(shift).collect(), other.line.hulls.rev_upper.iter().map(shift).collect());
                let their_slope = pinned_slope(&n_fwd, &n_rev, length_ns(n));
                if !consistent(f, own_slope, other, their_slope, &n_fwd, &n_rev) {
                    *cut = true;
                    continue;
                }
                fwd.extend(n_fwd);
                rev.extend(n_rev);
                found = true;
            }
            if !found {
                return None;
            }
            fwd.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            rev.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            let slope = hull::fit(&fwd, &rev).ok()?.line.slope;
            f.line.hulls.line_at_slope(slope)
        })
        .collect()
}

/// Whether the edge's points of this window (`own`) and of a neighbour (`other`, its hulls
/// `fwd` / `rev` moved into this window's frame) agree: at the slope of their max-margin
/// fit together, each window's own max-margin intercept is within the tolerance of the
/// other's, and the two windows' own slopes (`mine`, `theirs`) are within `CUT_SLOPE_NS`
/// of each other. Fits that could not be made, and slopes a window does not pin
/// (`pinned_slope`), say nothing: kept.
fn consistent(own: &FittedEdge, mine: Option<f64>, other: &FittedEdge, theirs: Option<f64>, fwd: &[Point], rev: &[Point]) -> bool {
    let mut pair_fwd: Vec<Point> = own.line.hulls.fwd_lower.iter().chain(fwd).copied().collect();
    let mut pair_rev: Vec<Point> = own.line.hulls.rev_upper.iter().chain(rev).copied().collect();
    pair_fwd.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
    pair_rev.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
    let Ok(pair) = hull::fit(&pair_fwd, &pair_rev) else { return true };
    let their_hulls = Hulls { fwd_lower: fwd.to_vec(), rev_upper: rev.to_vec() };
    let (Some(a), Some(b)) = (own.line.hulls.line_at_slope(pair.line.slope), their_hulls.line_at_slope(pair.line.slope)) else {
        return true;
    };
    let sigmas = own.line.sigma_ns.hypot(other.line.sigma_ns);
    let tolerance = CUT_MIN_NS.max(CUT_NOISE_SIGMAS * own.gap_noise_ns.max(other.gap_noise_ns)).max(if sigmas.is_finite() { CUT_SIGMAS * sigmas } else { 0.0 });
    if (a.intercept_ns - b.intercept_ns).abs() > tolerance {
        return false;
    }
    // A kink where the two windows meet puts both midpoints on one chord, so the offsets
    // above agree: only the windows' own slopes show it.
    let (Some(mine), Some(theirs)) = (mine, theirs) else { return true };
    let lever_ns = fwd.iter().chain(rev).map(|p| p.x_ns.abs()).fold(0.0, f64::max) / 2.0;
    (mine - theirs).abs() * lever_ns <= CUT_SLOPE_NS
}

/// One window's own max-margin slope of an edge from its hulls (`fwd`, `rev`: any frame)
/// in a window `window_ns` long; None where the fit fails or the points cover less than
/// `MIN_SLOPE_COVER` of the window.
///
/// Two tolerances of a slope's own were tried on top of `CUT_SLOPE_NS` (tuning seeds 1-8 of
/// bench accuracy's real_clocks) and are not used: `CUT_SIGMAS` edge sigmas at each end of
/// the points over half their extent measures the line's misfit where a clock slews or
/// kinks inside the window, so it kept exactly the neighbours the test is there to cut
/// (ntpd-slew coverage 0.952 -> 0.948 on seeds 1-4 and 0.939 -> 0.928 on 5-8; disciplined
/// p99 228 -> 237 ns); `CUT_NOISE_SIGMAS` timestamp-noise levels of single points instead
/// is far above the error of a slope fitted over a window's thousands of points and lost
/// most of the cut (disciplined 228 -> 277 ns, wander-20 245 -> 263 ns, seeds 1-4).
fn pinned_slope(fwd: &[Point], rev: &[Point], window_ns: i64) -> Option<f64> {
    let xs = || fwd.iter().chain(rev).map(|p| p.x_ns);
    let extent_ns = xs().fold(f64::NEG_INFINITY, f64::max) - xs().fold(f64::INFINITY, f64::min);
    if !(extent_ns > 0.0 && extent_ns >= MIN_SLOPE_COVER * window_ns as f64) {
        return None;
    }
    Some(hull::fit(fwd, rev).ok()?.line.slope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::online::fit_window;
    use crate::estimate::window_fits::WindowSpec;
    use crate::record::ProbeRecord;

    const WINDOW_NS: i64 = 15_000_000_000;

    /// Two nodes probing every 40 ms for three 15 s windows; node 1's clock runs `rates`
    /// (ppb) fast against node 0 in each window (a chrony-like frequency correction at a
    /// window edge when they differ). 10 us base delay, exponential queueing of 20 us
    /// shared by the two packets of a pair.
    fn three_windows(rates_ppb: [f64; 3]) -> Vec<WindowFits> {
        three_windows_last_cut(rates_ppb, usize::MAX)
    }

    /// As `three_windows`, with only the first `last_probes` probes of the last window (the
    /// run stopped there).
    fn three_windows_last_cut(rates_ppb: [f64; 3], last_probes: usize) -> Vec<WindowFits> {
        let mut noise = crate::estimate::test_noise::XorShift::new(0x9e37_79b9_7f4a_7c15u64);
        let mut exp = move |mean: f64| noise.exp(mean);
        // Node 1's clock: continuous, piecewise linear in true time t (ns from 0).
        let s1 = |t: f64| {
            let mut s = 1_000_000.0 + t;
            for (k, r) in rates_ppb.iter().enumerate() {
                let (a, b) = (k as f64 * WINDOW_NS as f64, (k + 1) as f64 * WINDOW_NS as f64);
                s += r * 1e-9 * (t.clamp(a, b) - a);
            }
            s
        };
        let mut records: Vec<Vec<ProbeRecord>> = vec![Vec::new(); 3];
        for seq in 0..(3 * WINDOW_NS / 40_000_000) as u32 {
            let t = seq as f64 * 4e7 + 1e6;
            let (q_fwd, q_rev) = (exp(20_000.0), exp(20_000.0));
            let pair = |t0: f64, d: f64| [t0, t0 + 50_000.0].map(|x| (x, x + d));
            let fwd = pair(t, 10_000.0 + q_fwd);
            let rev = pair(fwd[1].1 + 20_000.0, 10_000.0 + q_rev);
            records[(t as i64 / WINDOW_NS) as usize].push(ProbeRecord {
                src: 0,
                dst: 1,
                seq,
                fwd_tx_ns: fwd.map(|p| p.0 as i64),
                fwd_rx_ns: fwd.map(|p| s1(p.1) as i64),
                rev_tx_ns: rev.map(|p| s1(p.0) as i64),
                rev_rx_ns: rev.map(|p| p.1 as i64),
            });
        }
        records[2].truncate(last_probes);
        let settings = EstimatorSettings::default();
        (0..3)
            .map(|k| {
                let spec = WindowSpec {
                    window_id: k as u64,
                    start_local_ns: k as i64 * WINDOW_NS,
                    end_local_ns: (k as i64 + 1) * WINDOW_NS,
                    num_nodes: 2,
                    reference: 0,
                };
                fit_window(&records[k], &spec, &settings)
            })
            .collect()
    }

    /// The middle window's refit slope (ppb) with both neighbours offered.
    fn middle_slope_ppb(w: &[WindowFits]) -> f64 {
        let lines = long_lines(&w[1], &[&w[0], &w[2]], &EstimatorSettings::default());
        lines[0].expect("a refit line").slope * 1e9
    }

    /// A 300 ppb frequency correction between windows 0 and 1: the middle window's span
    /// stops at it and its drift is its own rate and window 2's (the truth, 1,000 ppb),
    /// where the fit across it misses by tens of ppb; without a change the span keeps both
    /// neighbours (the same slope as the three windows' hulls together).
    #[test]
    fn a_frequency_change_between_windows_cuts_the_span() {
        let w = three_windows([1_300.0, 1_000.0, 1_000.0]);
        let cut = middle_slope_ppb(&w);
        assert!((cut - 1_000.0).abs() < 10.0, "span cut at the change: {cut:.1} ppb, truth 1000");
        // What the fit across the change gives: all three windows' hulls.
        let across = {
            let mid = w[1].mid_ns();
            let f = &w[1].fitted[0];
            let (mut fwd, mut rev) = (Vec::new(), Vec::new());
            for n in &w {
                let (dx, dy) = ((n.mid_ns() - mid) as f64, (n.fitted[0].y_origin_ns - f.y_origin_ns) as f64);
                fwd.extend(n.fitted[0].line.hulls.fwd_lower.iter().map(|p| Point { x_ns: p.x_ns + dx, y_ns: p.y_ns + dy }));
                rev.extend(n.fitted[0].line.hulls.rev_upper.iter().map(|p| Point { x_ns: p.x_ns + dx, y_ns: p.y_ns + dy }));
            }
            fwd.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            rev.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
            hull::fit(&fwd, &rev).unwrap().line.slope * 1e9
        };
        assert!((across - 1_000.0).abs() > 30.0, "the fit across the change: {across:.1} ppb");

        let steady = three_windows([1_000.0; 3]);
        let kept = middle_slope_ppb(&steady);
        assert!((kept - 1_000.0).abs() < 5.0, "steady clock: {kept:.1} ppb");
        let own = steady[1].fitted[0].line.line.slope * 1e9;
        assert!((kept - 1_000.0).abs() < (own - 1_000.0).abs().max(1.0), "the span did not help: {kept:.1} vs own {own:.1}");
    }

    /// The run's first window, its only neighbour the next, with a 600 ppb frequency
    /// correction exactly at the edge between them (disciplined seed 1's reference). The
    /// two windows' midpoints lie on one chord, so their offsets at the common slope agree
    /// and only the slopes show the kink: the span stops there and the first window keeps
    /// its own rate (truth 1,000 ppb) instead of the chord's (~1,300).
    #[test]
    fn a_kink_at_the_window_edge_cuts_the_span_by_slope() {
        let w = three_windows([1_000.0, 1_600.0, 1_600.0]);
        let first = long_lines(&w[0], &[&w[1]], &EstimatorSettings::default())[0].map(|l| l.slope * 1e9);
        let own = w[0].fitted[0].line.line.slope * 1e9;
        // Cut: no refit (None) or a refit at this window's own rate.
        let slope = first.unwrap_or(own);
        assert!((slope - 1_000.0).abs() < 30.0, "first window's drift {slope:.1} ppb (own {own:.1}), truth 1000");
    }

    /// The run's last window cut short when the run stops: three probes over its first
    /// 80 ms, whose own slope is hundreds of ppb off on queueing noise alone. Its past
    /// windows (the online span) agree with it on the offset, and its slope over 80 ms of a
    /// 15 s window says nothing about a kink, so they stay in the span: the drift is theirs
    /// (truth 1,000 ppb), not the three probes' (cut, it stayed its own, and was
    /// extrapolated 7.4 s to the window's midpoint).
    #[test]
    fn a_last_window_cut_short_keeps_its_span() {
        let w = three_windows_last_cut([1_000.0; 3], 3);
        let own = w[2].fitted[0].line.line.slope * 1e9;
        assert!((own - 1_000.0).abs() > 100.0, "three probes pin the slope: {own:.1} ppb");
        let line = long_lines(&w[2], &[&w[0], &w[1]], &EstimatorSettings::default())[0].expect("a span");
        let slope = line.slope * 1e9;
        assert!((slope - 1_000.0).abs() < 5.0, "last window's drift {slope:.1} ppb (own {own:.1}), truth 1000");
    }
}
