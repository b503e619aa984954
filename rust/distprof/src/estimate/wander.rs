//! The clocks' wander in the uncertainty: what one line per window cannot follow.
//!
//! A crystal's frequency random-walks (white frequency noise, q ppb/sqrt(s): ~1 free
//! running, 5-20 under load), so a node's phase against the reference bends away from any
//! line. Each window's line is fitted over a few windows' points (`drift`, `smoother`), and
//! the bend puts its offset at the midpoint, its drift and its value at the window's edges
//! off by amounts that scale as q T^1.5 and q sqrt(T) (T the window length). The loops
//! cannot see it: a node's bend is common to all its paths, like a stamping bias.
//!
//! q is measured from the data, per node against the reference, over the run: the node's
//! window offsets o_k at midpoints m_k lie on one line when the clocks do not wander, so
//! the second difference D_k = o_k - interpolation of o_(k-1) and o_(k+1) at m_k is the bend
//! plus the offsets' own noise. Under a random walk E[D_k²] = `D_PER_Q2T3` q² T³ +
//! sigma_k² + (sigma_(k-1)² + sigma_(k+1)²) / 4 (the statistical sigmas; a constant
//! asymmetry cancels). A node has only a few triples in a run (two in four windows), so its
//! own estimate is shrunk towards the network's (`PRIOR_TRIPLES` pseudo-triples of it);
//! a triple far beyond the rest (a step, a re-anchoring) stays out of the network's.
//!
//! q then widens, in quadrature, each segment's offset sigma by `MID_PER_Q` q T^1.5 and its
//! drift sigma by `DRIFT_PER_Q` q sqrt(T); merge carries the drift sigma over the distance
//! from the midpoint (`ClockSegment::uncertainty_at_ns`), so the bend towards the window's
//! edges widens each event's uncertainty too. The constants come from the estimator's
//! geometry (a max-margin line over a span of three windows is the minimax line of the
//! phase; the offset is the midrange of the phase about it over the window), computed by
//! Monte Carlo on an integrated random walk, and scaled to what the real estimator shows
//! in the simulator on tuning seeds (docs/estimation.md, "Wander"); the first and last
//! window of a run have their span shifted inwards and bend further. The constants hold for
//! the default span (three windows, `EstimatorSettings::smoothing_radius` 1); the drift's
//! follows a longer span in windows by the square root of its length (`Span::drift_scale`).
//!
//! A window re-anchored after the reference stopped (`failover`) carries its nodes onto G
//! by the anchor's line of an earlier window; the anchor's own q states how far its clock
//! bends away from that line over the extrapolation (`extrapolation_bend_ns`).
//!
//! The model of a whole run has it from every triple of the run (`estimate_run_windows`,
//! merge's `solve_shared_run`). A window as it closes (`online`) has no later window, so
//! `WanderSoFar` measures q from the windows seen so far instead, with the prediction
//! residual P_k = o_k - (o_(k-1) + d_(k-1) (m_k - m_(k-1))): the offset the previous
//! window's line predicts misses by the bend of one window, which needs two windows, not
//! three. Its running sums per node and for the network make each window's cost O(1) per
//! node whatever the run's length.

use super::allowance::allowance_sigma_ns;
use super::online::WindowEstimate;
use super::settings::EstimatorSettings;
use crate::context::NodeId;
use crate::model::ClockSegment;

/// E[D²] / (q² T³) of the second difference of the estimated offsets (Monte Carlo of the
/// geometry below; 1/6 for the true phase, which the fitted offsets follow a little less).
/// In the simulator it recovers q within ~15% where the wander dominates (wander-20,
/// seeds 2-3: 31.8 against the true 28.3 ppb/sqrt(s) of a node against the reference).
const D_PER_Q2T3: f64 = 0.126;
/// Sigma of the offset at the midpoint / (q T^1.5), a window inside the run and the first
/// or last (span shifted inwards). The minimax geometry gives 0.104 and 0.129 for a
/// three-window span (0.067 for a line over its own window, 0.056 for a window's mean);
/// with the real estimator in the simulator (seeds 1-6, wander 5-20 ppb/sqrt(s), no
/// asymmetry allowance) the bend is 0.6 times the three-window figure, likely because the
/// floor points a line rests on are spread over the window rather than at the bend's
/// extremes. 0.6x covers 0.96-0.98 there (0.5x: 0.94-0.96, 0.7x: 0.98-0.99).
const MID_PER_Q: f64 = 0.6 * 0.104;
const MID_PER_Q_END: f64 = 0.6 * 0.129;
/// Sigma of the drift against the window's mean rate / (q sqrt(T)), inside and at the
/// ends: 0.31 and 0.68 in the geometry, 0.7 times that with the real estimator (same
/// seeds: drift 2-sigma coverage 0.93-0.95 at 0.7x, 0.99 at 1x, 0.15-0.46 without).
const DRIFT_PER_Q: f64 = 0.7 * 0.31;
const DRIFT_PER_Q_END: f64 = 0.7 * 0.68;
/// Sigma of the online model's offset at the midpoint / (q T^1.5): the geometry of a run's
/// last window (0.129, the span ends at the window), but 0.78 times it where the run model
/// takes 0.6: measured on seeds 1-4 (64 nodes, no asymmetry allowance), all windows pooled
/// (the first, with nothing measured yet, covers ~0.87 at wander 20), 2-sigma coverage at
/// wander 5 / 10 / 20 was 0.967 / 0.962 / 0.903 at 0.6x, 0.977 / 0.982 / 0.935 at 0.78x
/// and 0.984 / 0.991 / 0.946 at 0.96x. The drift takes the run's last window's figure
/// (`DRIFT_PER_Q_END`: drift coverage 0.88-0.93 there).
const MID_PER_Q_ONLINE: f64 = 0.78 * 0.129;
/// A node's own triples are pooled with this many of the network's: two triples alone
/// (a 60 s run of 15 s windows) put its q² anywhere within a factor of ten.
const PRIOR_TRIPLES: f64 = 4.0;
/// A triple whose D² is beyond this many times the median's expectation is a step or a
/// re-anchoring, not wander: it stays out of the network's estimate (its own node keeps it).
const OUTLIER_RATIO: f64 = 100.0;
/// The largest q (ppb/sqrt(s), a node against the reference) taken for wander. A crystal
/// under load wanders by up to ~100 ppb/sqrt(s) (issue 29), so two of them by ~140; a
/// larger second difference is a step of the clock or a servo's or ntpd's correction,
/// which no line per window follows and which the step's own window shows (its bound, its
/// loops). Without the cap one leap second in a 60 s run took every node's q to ~10^7 and
/// flagged all its windows (simulated `leap-second`: flagged 0.25 -> 1.0).
const MAX_Q_PPB: f64 = 150.0;
/// Median of chi² with one degree of freedom: the median D² of pure noise over its mean.
const CHI2_1_MEDIAN: f64 = 0.454_936;

/// The online model's P² (`WanderSoFar`) / (q² T³), T the distance between the two
/// windows' midpoints. Measured, not derived: the online offsets' geometry (each window's
/// line over itself and the window before) is not the run model's. Under wander 20 (64
/// nodes, tuning seeds 1-4) the median q measured by each run's end is 28.5 ppb/sqrt(s)
/// with it against the true 28.3 of a node against the reference (19.9 with 1.0).
const P_PER_Q2T3: f64 = 0.49;

/// One node's triple: its D², the part of it the offsets' own noise explains, and the part
/// a unit q² (ppb²/s) explains, all in ns². Online (`WanderSoFar`), a prediction residual's
/// P² in place of D².
#[derive(Debug, Clone, Copy)]
struct Triple {
    node: usize,
    d2: f64,
    noise: f64,
    per_q2: f64,
}

/// Widens every segment of a run's windows (in window order, as `estimate_run_windows`
/// and `solve_shared_run` give them) by the wander measured from the run itself, and
/// flags those it takes beyond `max_uncertainty_ns`. Returns each node's q (ppb/sqrt(s),
/// against `reference`; None where no triple measured it).
pub fn add_wander_terms<'a>(
    windows: impl IntoIterator<Item = &'a mut WindowEstimate>,
    reference: NodeId,
    settings: &EstimatorSettings,
) -> Vec<Option<f64>> {
    let mut windows: Vec<&mut WindowEstimate> = windows.into_iter().collect();
    let n = windows.iter().map(|w| w.segments.len()).max().unwrap_or(0);
    let allowance_var = allowance_sigma_ns(settings.asymmetry_allowance_ns).powi(2);
    // The statistical variance of a segment: the allowance is constant and cancels in D.
    let stat_var = |s: &ClockSegment| (s.uncertainty_ns.powi(2) - allowance_var).max(0.0);
    let mut triples = Vec::new();
    for k in 1..windows.len().saturating_sub(1) {
        // Re-anchored windows carry another clock's extrapolation: not this node's bend.
        if [k - 1, k, k + 1].iter().any(|&j| !windows[j].anchors.is_empty()) {
            continue;
        }
        for node in (0..n).filter(|&i| i != reference as usize) {
            let seg = |j: usize| windows[j].segments.get(node).copied().flatten().filter(|s| s.uncertainty_ns < f64::MAX);
            let (Some(a), Some(b), Some(c)) = (seg(k - 1), seg(k), seg(k + 1)) else { continue };
            let (ab, bc) = ((b.mid_local_ns - a.mid_local_ns) as f64, (c.mid_local_ns - b.mid_local_ns) as f64);
            if !(ab > 0.0 && bc > 0.0) {
                continue;
            }
            // a's and c's offsets interpolated at b's midpoint, with their weights.
            let (wa, wc) = (bc / (ab + bc), ab / (ab + bc));
            let d = b.offset_ns - (wa * a.offset_ns + wc * c.offset_ns);
            let t_s = 0.5 * (ab + bc) * 1e-9;
            triples.push(Triple {
                node,
                d2: d * d,
                noise: stat_var(&b) + wa * wa * stat_var(&a) + wc * wc * stat_var(&c),
                // q in ppb/sqrt(s), T in s: q T^1.5 is in ns.
                per_q2: D_PER_Q2T3 * t_s.powi(3),
            });
        }
    }
    let mut q = wander_per_node(n, &triples);
    if let Some(r) = q.get_mut(reference as usize) {
        *r = None;
    }
    let last = windows.len().saturating_sub(1);
    for (k, w) in windows.iter_mut().enumerate() {
        let span = if k == 0 || k == last { Span::RunEnd } else { Span::Centred };
        widen_window(w, &q, reference, span, settings);
    }
    q
}

/// Widens every node's segment and pieces of `w` by its `q` (none where q is None, and
/// never the reference's: it is the timeline), and a segment carried through an anchor
/// (`failover`) by the anchor's bend over the extrapolation (`extrapolation_bend_ns`),
/// flagging those it takes beyond `max_uncertainty_ns`.
fn widen_window(w: &mut WindowEstimate, q: &[Option<f64>], reference: NodeId, span: Span, settings: &EstimatorSettings) {
    let bend_ns = extrapolation_bend_ns(w, q);
    for (node, seg) in w.segments.iter_mut().enumerate() {
        let Some(s) = seg.as_mut() else { continue };
        if node == reference as usize {
            continue;
        }
        // Placed by an anchor, not by the network's solve against the reference.
        let carried = w.network.offset_ns.get(node).is_some_and(Option::is_none);
        let mut flag = false;
        if let Some(bend_ns) = bend_ns.filter(|_| carried && s.uncertainty_ns < f64::MAX) {
            s.uncertainty_ns = s.uncertainty_ns.hypot(bend_ns);
            flag = s.uncertainty_ns > settings.max_uncertainty_ns as f64 && !s.flagged;
        }
        if let Some(q) = q.get(node).copied().flatten() {
            let drift_scale = span.drift_scale(settings, s.end_local_ns - s.start_local_ns);
            widen(s, q, span, drift_scale);
            // A window cut at a break (`breaks`) is corrected by its pieces: each bends
            // by the wander over its own, shorter span.
            flag |= s.uncertainty_ns > settings.max_uncertainty_ns as f64 && !s.flagged;
            for piece in w.pieces.get_mut(node).into_iter().flatten() {
                widen(piece, q, span, drift_scale);
                if piece.uncertainty_ns > settings.max_uncertainty_ns as f64 && !piece.flagged {
                    piece.flagged = true;
                    flag = true;
                }
            }
        }
        if flag {
            s.flagged = true;
            if !w.flagged.contains(&(node as NodeId)) {
                w.flagged.push(node as NodeId);
            }
        }
    }
    w.flagged.sort_unstable();
}

/// How far a re-anchored window's anchor clock can have bent away from the line that
/// carries it onto G (`failover::carry`), ns: the line was fitted t before this window's
/// midpoint (`Anchor::extrapolated_ns`), and since then the anchor's frequency against the
/// reference (q, measured before) random-walked, which no line can know. Two parts, in
/// quadrature: the base's drift is off by the wander over its own span
/// (`DRIFT_PER_Q_END` q sqrt(T), a run's last window's), carried over t; and the frequency
/// walks on, whose phase t after a known point has variance q² t³ / 3. The stated sigma of
/// the base carries neither (its drift sigma is the fit's, floored at 20 ppb). The largest
/// over the window's anchors (a network cut in parts has one each; which node stood on
/// which is not kept). None without an anchor whose q is known.
fn extrapolation_bend_ns(w: &WindowEstimate, q: &[Option<f64>]) -> Option<f64> {
    let window_s = w.segments.iter().flatten().next().map(|s| (s.end_local_ns - s.start_local_ns) as f64 * 1e-9)?;
    w.anchors
        .iter()
        .filter_map(|a| {
            let q = q.get(a.node as usize).copied().flatten()?;
            let t_s = a.extrapolated_ns.max(0) as f64 * 1e-9;
            Some(q * (DRIFT_PER_Q_END * window_s.sqrt() * t_s).hypot(t_s.powf(1.5) / 3f64.sqrt()))
        })
        .reduce(f64::max)
}

/// The wander measured as a run's windows close (the online model, `online::History`):
/// per node the statistical offset and drift of its last window and its running sums of
/// P² excess and of what a unit q² explains; the network's sums likewise. Each window
/// costs O(1) per node (a median over the window's nodes for the outlier cut), whatever
/// the run's length.
#[derive(Debug, Clone, Default)]
pub struct WanderSoFar {
    /// Indexed by node: its segment in the last window it had one, before any widening.
    last: Vec<Option<ClockSegment>>,
    /// Indexed by node: sum of P² minus its noise, and of `P_PER_Q2T3` T³ (ns², ns²/(ppb²/s)).
    excess: Vec<f64>,
    per_q2: Vec<f64>,
    /// The network's sums over its residuals without the outliers, and the count and
    /// sum of `per_q2` of all of them (the prior's weight).
    network_excess: f64,
    network_per_q2: f64,
    residuals: usize,
    residuals_per_q2: f64,
    /// Each node's q after the last window (ppb/sqrt(s); None before any residual).
    q: Vec<Option<f64>>,
    /// Whether the last window was re-anchored (`failover`): its segments predict nothing
    /// of a node's own bend.
    last_anchored: bool,
}

impl WanderSoFar {
    /// Measures `w`'s prediction residuals (each node's offset against its previous
    /// window's line, where that window is the one just before), adds them to the sums,
    /// and widens `w`'s segments by each node's q so far. Call once per window, in order.
    pub fn add_window(&mut self, w: &mut WindowEstimate, reference: NodeId, settings: &EstimatorSettings) {
        let n = w.segments.len();
        if self.last.len() < n {
            self.last.resize(n, None);
            self.excess.resize(n, 0.0);
            self.per_q2.resize(n, 0.0);
        }
        let allowance_var = allowance_sigma_ns(settings.asymmetry_allowance_ns).powi(2);
        let stat_var = |s: &ClockSegment| (s.uncertainty_ns.powi(2) - allowance_var).max(0.0);
        let mut residuals = Vec::new();
        // Re-anchored windows carry another clock's extrapolation: not this node's bend. As
        // the run model leaves out every triple that touches one, a residual is left out
        // where either of its windows was: once the reference places a node again, the
        // carried line's miss is the extrapolation's error, and would take the node's q
        // to the cap.
        let previous_anchored = std::mem::replace(&mut self.last_anchored, !w.anchors.is_empty());
        let anchored = previous_anchored || self.last_anchored;
        for (node, seg) in w.segments.iter().enumerate() {
            let now = seg.filter(|s| s.uncertainty_ns < f64::MAX);
            let before = std::mem::replace(&mut self.last[node], now);
            let (Some(b), Some(a)) = (now, before) else { continue };
            if node == reference as usize || anchored || a.window_id + 1 != b.window_id || a.drift_uncertainty_ppb == f64::MAX {
                continue;
            }
            let gap_s = (b.mid_local_ns - a.mid_local_ns) as f64 * 1e-9;
            if !(gap_s > 0.0) {
                continue;
            }
            // ppb x s = ns.
            let p = b.offset_ns - (a.offset_ns + a.drift_ppb * gap_s);
            residuals.push(Triple {
                node,
                d2: p * p,
                noise: stat_var(&b) + stat_var(&a) + (a.drift_uncertainty_ppb * gap_s).powi(2),
                per_q2: P_PER_Q2T3 * gap_s.powi(3),
            });
        }
        for r in &residuals {
            self.excess[r.node] += r.d2 - r.noise;
            self.per_q2[r.node] += r.per_q2;
            self.residuals += 1;
            self.residuals_per_q2 += r.per_q2;
        }
        if let Some((excess, per_q2)) = without_outliers(&residuals) {
            self.network_excess += excess;
            self.network_per_q2 += per_q2;
        }
        self.q = if self.network_per_q2 > 0.0 {
            let network = (self.network_excess / self.network_per_q2).max(0.0);
            let prior = PRIOR_TRIPLES * self.residuals_per_q2 / self.residuals as f64;
            (0..n).map(|i| Some(shrunk_q(self.excess[i], self.per_q2[i], network, prior))).collect()
        } else {
            vec![None; n]
        };
        if let Some(r) = self.q.get_mut(reference as usize) {
            *r = None;
        }
        widen_window(w, &self.q, reference, Span::Online, settings);
    }

    /// Each node's q (ppb/sqrt(s), against the reference) as of the last window; None
    /// before any residual (the run's first window) and for the reference.
    pub fn q_ppb(&self) -> Vec<Option<f64>> {
        self.q.clone()
    }
}

/// Where a window's drift span lies, which sets how far the wander bends its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// The run model inside the run: one window either side.
    Centred,
    /// The run model's first and last window: the span shifted inwards.
    RunEnd,
    /// The online model: the window and the one before it (`online::History`).
    Online,
}

impl Span {
    /// Windows in the span the `DRIFT_PER_Q*` constants were measured with (the default
    /// 30 s `drift_span_s` over 15 s windows): the window and one either side, or the
    /// window and the one before it online.
    fn calibrated_windows(self) -> usize {
        match self {
            Span::Centred | Span::RunEnd => 3,
            Span::Online => 2,
        }
    }

    /// Windows in the span with windows of `window_ns` (`smoothing_radius`,
    /// `history_windows`).
    fn windows(self, settings: &EstimatorSettings, window_ns: i64) -> usize {
        match self {
            Span::Centred | Span::RunEnd => 2 * settings.smoothing_radius(window_ns) + 1,
            Span::Online => settings.history_windows(window_ns) + 1,
        }
    }

    /// What the drift's wander term is multiplied by with windows of `window_ns`: the
    /// square root of the span's windows over the calibrated span's. The drift is the
    /// slope over the whole span, which follows the wandering rate over the span, not the
    /// window: with 8 s windows (examples/configs/high-accuracy.json) the default 30 s
    /// span is five windows centred (four online), and a term that scales with the
    /// window alone stated drift sigmas ~0.7x too small (drift coverage within 2 sigma
    /// 0.74-0.88, 0.96-0.97 with 15 s windows). Never below 1: shorter spans are not
    /// measured.
    fn drift_scale(self, settings: &EstimatorSettings, window_ns: i64) -> f64 {
        (self.windows(settings, window_ns) as f64 / self.calibrated_windows() as f64).sqrt().max(1.0)
    }
}

/// A segment's offset and drift sigmas with the bend of a wander of `q_ppb` (ppb/sqrt(s))
/// over its window added in quadrature, the drift's times `drift_scale`
/// (`Span::drift_scale`); unknown sigmas stay unknown.
fn widen(s: &mut ClockSegment, q_ppb: f64, span: Span, drift_scale: f64) {
    let t_s = (s.end_local_ns - s.start_local_ns) as f64 * 1e-9;
    let (mid, drift) = match span {
        Span::Centred => (MID_PER_Q, DRIFT_PER_Q),
        Span::RunEnd => (MID_PER_Q_END, DRIFT_PER_Q_END),
        Span::Online => (MID_PER_Q_ONLINE, DRIFT_PER_Q_END),
    };
    if s.uncertainty_ns < f64::MAX {
        s.uncertainty_ns = s.uncertainty_ns.hypot(mid * q_ppb * t_s.powf(1.5));
    }
    if s.drift_uncertainty_ppb < f64::MAX {
        s.drift_uncertainty_ppb = s.drift_uncertainty_ppb.hypot(drift_scale * drift * q_ppb * t_s.sqrt());
    }
}

/// Each node's q (ppb/sqrt(s)) from the triples: its own excess pooled with
/// `PRIOR_TRIPLES` of the network's (`network_q2`). None without any triple.
fn wander_per_node(n: usize, triples: &[Triple]) -> Vec<Option<f64>> {
    let Some(network) = network_q2(triples) else { return vec![None; n] };
    let mean_per_q2 = triples.iter().map(|t| t.per_q2).sum::<f64>() / triples.len() as f64;
    let (mut excess, mut per_q2) = (vec![0.0; n], vec![0.0; n]);
    for t in triples {
        excess[t.node] += t.d2 - t.noise;
        per_q2[t.node] += t.per_q2;
    }
    (0..n).map(|i| Some(shrunk_q(excess[i], per_q2[i], network, PRIOR_TRIPLES * mean_per_q2))).collect()
}

/// A node's q (ppb/sqrt(s)): its own excess and unit-q² weight pooled with `prior` of
/// the network's q², capped at `MAX_Q_PPB`.
fn shrunk_q(excess: f64, per_q2: f64, network_q2: f64, prior: f64) -> f64 {
    let q2 = (excess + prior * network_q2) / (per_q2 + prior);
    q2.max(0.0).sqrt().min(MAX_Q_PPB)
}

/// The network's q² (ppb²/s): the excess over the noise summed over the triples, over what
/// a unit q² predicts, without the outliers (`OUTLIER_RATIO`). Never below 0.
fn network_q2(triples: &[Triple]) -> Option<f64> {
    let (excess, per_q2) = without_outliers(triples)?;
    (per_q2 > 0.0).then(|| (excess / per_q2).max(0.0))
}

/// The sums of the excess over the noise and of `per_q2` over the triples whose D² is
/// within `OUTLIER_RATIO` times the median's expectation. None without any triple.
fn without_outliers(triples: &[Triple]) -> Option<(f64, f64)> {
    let mut ratios: Vec<f64> = triples.iter().map(|t| t.d2 / (t.noise + 1e-9)).collect();
    if ratios.is_empty() {
        return None;
    }
    let half = ratios.len() / 2;
    let median = *ratios.select_nth_unstable_by(half, f64::total_cmp).1;
    let cut = OUTLIER_RATIO * median / CHI2_1_MEDIAN;
    Some(
        triples
            .iter()
            .filter(|t| t.d2 / (t.noise + 1e-9) <= cut)
            .fold((0.0, 0.0), |(e, p), t| (e + t.d2 - t.noise, p + t.per_q2)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Second differences drawn as the model says (63 nodes, two triples each, Gaussian
    /// bend of variance per_q2 q² plus noise of known variance): the network's q² is the
    /// true 400 (q 20) within 25%; a node with one step-sized triple is left out of the
    /// network's estimate but keeps its own (capped at `MAX_Q_PPB`), and its neighbours'
    /// estimates are unmoved by it.
    #[test]
    fn pooled_q_recovers_the_wander_and_a_step_stays_with_its_node() {
        let mut noise = crate::estimate::test_noise::XorShift::new(0x853c_49e6_748f_ea9b);
        let mut gauss = move || noise.gauss();
        let per_q2 = D_PER_Q2T3 * 15f64.powi(3);
        let (q2, noise) = (400.0, 40.0f64.powi(2));
        let mut triples: Vec<Triple> = (1..64)
            .flat_map(|node| [node, node])
            .map(|node| {
                let d = gauss() * (per_q2 * q2 + noise).sqrt();
                Triple { node, d2: d * d, noise, per_q2 }
            })
            .collect();
        let clean = network_q2(&triples).unwrap();
        assert!((clean / q2 - 1.0).abs() < 0.25, "network q² {clean:.0}, truth {q2}");
        // Node 5 steps by 1 ms in one window.
        triples[8].d2 = 1e12;
        let stepped = network_q2(&triples).unwrap();
        assert!((stepped / clean - 1.0).abs() < 0.05, "{stepped:.0} with the step, {clean:.0} without");
        let q = wander_per_node(64, &triples);
        assert_eq!(q[5], Some(MAX_Q_PPB));
        let (q6, q7) = (q[6].unwrap(), q[7].unwrap());
        assert!(q6 > 10.0 && q6 < 40.0 && q7 > 10.0 && q7 < 40.0, "{q6:.1} {q7:.1}");
        // Nothing to measure with: no q.
        assert_eq!(wander_per_node(3, &[]), vec![None; 3]);
    }

    /// One online window of `n` nodes (node 0 the reference) whose offsets are given, each
    /// with a statistical sigma of 10 ns and a drift of 0 +- 1 ppb, over [15k, 15k + 15) s.
    fn online_window(k: u64, offsets_ns: &[f64]) -> WindowEstimate {
        let segments = offsets_ns
            .iter()
            .map(|&offset_ns| {
                Some(ClockSegment {
                    window_id: k,
                    start_local_ns: k as i64 * 15_000_000_000,
                    end_local_ns: (k as i64 + 1) * 15_000_000_000,
                    mid_local_ns: k as i64 * 15_000_000_000 + 7_500_000_000,
                    offset_ns,
                    drift_ppb: 0.0,
                    bound_ns: 1e3,
                    uncertainty_ns: 10.0,
                    drift_uncertainty_ppb: 1.0,
                    flagged: false,
                    break_at_start: false,
                })
            })
            .collect::<Vec<_>>();
        let n = segments.len();
        WindowEstimate {
            window_id: k,
            counts: Default::default(),
            edges: Vec::new(),
            network: crate::estimate::network::NetworkSolution {
                offset_ns: vec![None; n],
                rate: vec![None; n],
                edges: Vec::new(),
                unreachable: Vec::new(),
                rms_offset_residual_ns: 0.0,
                rms_drift_residual_ppb: 0.0,
                cg_iterations: 0,
            },
            segments,
            pieces: vec![Vec::new(); n],
            unreachable: Vec::new(),
            flagged: Vec::new(),
            anchors: Vec::new(),
            beyond_allowance: Vec::new(),
        }
    }

    /// Online, window after window, on clocks that hold their line but for the noise of
    /// their sigmas: the first window has nothing measured and is left as it is; later
    /// ones measure a q that is the noise's (under 3 ppb/sqrt(s)). Node 5 steps by 100 us
    /// in window 3: its own q goes to the cap, every other node's stays small (the step
    /// is out of the network's sums), and the reference gets none.
    #[test]
    fn online_q_measures_each_node_and_keeps_a_step_with_its_node() {
        let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
        let mut so_far = WanderSoFar::default();
        for k in 0..8u64 {
            let offsets: Vec<f64> = (0..64).map(|i| if i == 0 { 0.0 } else { 1e3 * i as f64 + stated_noise(k, i) + if i == 5 && k >= 3 { 1e5 } else { 0.0 } }).collect();
            let mut w = online_window(k, &offsets);
            so_far.add_window(&mut w, 0, &settings);
            let q = so_far.q_ppb();
            if k == 0 {
                assert!(q.iter().all(Option::is_none), "{q:?}");
                assert!(w.segments.iter().flatten().all(|s| s.uncertainty_ns == 10.0));
                continue;
            }
            assert_eq!(q[0], None);
            for (i, q) in q.iter().enumerate().skip(1) {
                let q = q.expect("measured");
                if i == 5 && k >= 3 {
                    assert_eq!(q, MAX_Q_PPB, "window {k}");
                } else {
                    assert!(q < 3.0, "node {i}, window {k}: q {q:.2}");
                }
            }
        }
        // The state is one segment and two sums per node, whatever the run's length.
        assert_eq!((so_far.last.len(), so_far.excess.len(), so_far.residuals), (64, 64, 7 * 63));
    }

    /// Deterministic noise of about the stated 10 ns of `online_window`'s segments.
    fn stated_noise(k: u64, i: usize) -> f64 {
        10.0 * (((k as usize * 64 + i) * 2_654_435_761usize % 1000) as f64 / 500.0 - 1.0) * 1.7
    }

    /// Windows 3 and 4 are re-anchored (`failover`), and their carried lines miss node 3
    /// by 50 us. When the reference places it again in window 5, that miss is the
    /// extrapolation's, not node 3's bend: its q stays the noise's, as every node's does.
    #[test]
    fn the_window_after_a_re_anchored_stretch_measures_no_bend() {
        let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
        let mut so_far = WanderSoFar::default();
        let carried = 3..=4u64;
        for k in 0..8u64 {
            let miss = |i: usize| if i == 3 && carried.contains(&k) { 5e4 } else { 0.0 };
            let offsets: Vec<f64> = (0..16).map(|i| if i == 0 { 0.0 } else { 1e3 * i as f64 + stated_noise(k, i) + miss(i) }).collect();
            let mut w = online_window(k, &offsets);
            if carried.contains(&k) {
                w.anchors.push(crate::estimate::Anchor {
                    window_id: k,
                    node: 1,
                    base_window_id: 2,
                    extrapolated_ns: (k as i64 - 2) * 15_000_000_000,
                    added_sigma_ns: 300.0,
                    nodes_placed: 15,
                    reason: crate::estimate::AnchorReason::ReferenceSilent,
                });
            }
            so_far.add_window(&mut w, 0, &settings);
        }
        for (i, q) in so_far.q_ppb().iter().enumerate().skip(1) {
            let q = q.expect("measured");
            assert!(q < 3.0, "node {i}: q {q:.2}");
        }
    }

    /// A window re-anchored on node 1, whose line was fitted 30 s before (q 10 ppb/sqrt(s)
    /// against the reference): the nodes it carried (no network offset of their own) widen
    /// by 10 x hypot(0.476 sqrt(15) 30, 30^1.5 / sqrt(3)) = 1,098 ns in quadrature, besides
    /// their own bend; a node the reference placed does not, and an anchor without a q adds
    /// nothing.
    #[test]
    fn a_carried_segment_states_the_anchors_bend_over_the_extrapolation() {
        let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
        let anchored = |q_anchor: Option<f64>| {
            let mut w = online_window(4, &[0.0, 1e3, 2e3, 3e3]);
            // Nodes 0 (the reference) and 3 placed by the network, 1 and 2 carried.
            w.network.offset_ns = vec![Some(0.0), None, None, Some(3e3)];
            w.anchors.push(crate::estimate::Anchor {
                window_id: 4,
                node: 1,
                base_window_id: 2,
                extrapolated_ns: 30_000_000_000,
                added_sigma_ns: 0.0,
                nodes_placed: 2,
                reason: crate::estimate::AnchorReason::CutOff,
            });
            widen_window(&mut w, &[None, q_anchor, None, None], 0, Span::Online, &settings);
            w
        };
        let bend = 10.0 * (DRIFT_PER_Q_END * 15f64.sqrt() * 30.0).hypot(30f64.powf(1.5) / 3f64.sqrt());
        assert!((bend - 1_098.1).abs() < 0.1, "{bend}");
        let w = anchored(Some(10.0));
        let sigma = |w: &WindowEstimate, i: usize| w.segments[i].unwrap().uncertainty_ns;
        // Node 1 (the anchor) bends by its own q within the window too; node 2 has none.
        let own = MID_PER_Q_ONLINE * 10.0 * 15f64.powf(1.5);
        assert!((sigma(&w, 1) - 10f64.hypot(bend).hypot(own)).abs() < 1e-6, "{}", sigma(&w, 1));
        assert!((sigma(&w, 2) - 10f64.hypot(bend)).abs() < 1e-6, "{}", sigma(&w, 2));
        assert_eq!((sigma(&w, 0), sigma(&w, 3)), (10.0, 10.0));
        // Beyond the 1 us flag threshold: flagged.
        assert_eq!(w.flagged, [1, 2]);
        let unknown = anchored(None);
        assert!(unknown.segments.iter().flatten().all(|s| s.uncertainty_ns == 10.0) && unknown.flagged.is_empty());
    }

    /// A piece bends by the wander over its own span: a third of a 15 s window widens by
    /// (1/3)^1.5 of what the whole window does, and an unknown sigma stays unknown.
    #[test]
    fn a_piece_widens_by_its_own_span() {
        let seg = |secs: i64| ClockSegment {
            window_id: 0,
            start_local_ns: 0,
            end_local_ns: secs * 1_000_000_000,
            mid_local_ns: secs * 500_000_000,
            offset_ns: 0.0,
            drift_ppb: 0.0,
            bound_ns: 1e3,
            uncertainty_ns: 0.0,
            drift_uncertainty_ppb: f64::MAX,
            flagged: false,
            break_at_start: false,
        };
        let (mut window, mut piece) = (seg(15), seg(5));
        widen(&mut window, 20.0, Span::Centred, 1.0);
        widen(&mut piece, 20.0, Span::Centred, 1.0);
        let ratio = piece.uncertainty_ns / window.uncertainty_ns;
        assert!((ratio - (1.0f64 / 3.0).powf(1.5)).abs() < 1e-9, "{ratio}");
        assert_eq!(piece.drift_uncertainty_ppb, f64::MAX);
    }
}
