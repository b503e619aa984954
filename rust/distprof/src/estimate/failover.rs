//! No single reference: the windows of a run solved in order, re-anchored on a surviving
//! node wherever the reference cannot place them.
//!
//! The global timeline G is the reference node's clock. When the reference falls silent
//! (it died, or every link to it did: no probe of this window touches it, or its probes
//! stop a quarter window before the others', `stopped_while_others_went_on`), or part of the
//! network has no accepted path to it, the nodes it cannot place are solved again against
//! an anchor: a node of theirs that an earlier window placed on G. The anchor's clock is
//! carried onto G by its last segment there (its offset and drift, extrapolated to this
//! window), so G stays continuous across the switch: after it, G is the dead reference's
//! clock as its last measured rate against the anchor predicts it. What that prediction
//! can be wrong by grows with the time since the anchor's last segment (its sigma plus
//! its drift's sigma times the time, `ClockSegment::uncertainty_at_ns`; the bound at
//! `EXTRAPOLATION_BOUND_RATE`), and every
//! carried segment carries it, so a long outage ends in flagged segments, not silent error.
//!
//! **The rule** needs no talk between nodes: an anchor in use in the previous window keeps
//! its role while it is alive and unplaced; else the lowest-numbered node that is alive
//! (it has a fitted edge this window), unplaced and placed before. Repeated until no such
//! node is left, so a network cut in parts gets one anchor per part (at most
//! `MAX_ANCHORS_PER_WINDOW`: each is one more solve of the window). Windows where the
//! reference places everyone it can are solved exactly as before (`online::solve`).
//!
//! Every re-anchoring is recorded in the window's estimate (`WindowEstimate::anchors`):
//! which node stood in, from which window's segment, for which reason and at what cost.

use super::online::{solve, WindowEstimate};
use super::settings::EstimatorSettings;
use super::window_fits::{FittedEdge, WindowFits};
use crate::context::NodeId;
use crate::model::{ns_between, ClockSegment};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// At most this many anchors per window: each costs one more solve of the window, so a
/// network shattered into many live parts (not a dead reference: that is one) stays
/// bounded in CPU; the parts beyond it stay unreachable and are reported so.
pub const MAX_ANCHORS_PER_WINDOW: usize = 8;
/// Worst-case growth of a carried bound per ns since the anchor's last segment: 1 ppm,
/// beyond any fitted rate error (merge extrapolates at the same rate, `merge/belong.rs`).
pub const EXTRAPOLATION_BOUND_RATE: f64 = 1e-6;

/// Why a window was re-anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnchorReason {
    /// No probe of this window touches the configured reference, or its probes stop a
    /// quarter window before the other nodes': it stopped, or every link to it did.
    ReferenceSilent,
    /// The reference is alive, but no accepted edge connects these nodes to it.
    CutOff,
}

/// One re-anchoring of one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Anchor {
    pub window_id: u64,
    /// The node whose clock stood in for the reference's.
    pub node: NodeId,
    /// The window of the anchor's segment that carried it onto G (its last placed one).
    pub base_window_id: u64,
    /// How far that segment was extrapolated (anchor's clock, base midpoint to here), ns.
    pub extrapolated_ns: i64,
    /// The sigma the extrapolation adds to every node placed through it, ns.
    pub added_sigma_ns: f64,
    /// Nodes placed through it in this window, the anchor included.
    pub nodes_placed: u32,
    pub reason: AnchorReason,
}

/// The state carried from window to window: every node's last segment on G, and the
/// anchors in use. Solve the windows of one run in order through one `Anchoring`.
#[derive(Debug, Clone, Default)]
pub struct Anchoring {
    /// By node id (the run's, not a renumbered one).
    last: HashMap<NodeId, ClockSegment>,
    /// Anchors of the previous window, each with the segment that carries it.
    in_use: Vec<(NodeId, ClockSegment)>,
}

impl Anchoring {
    /// One window, in order, its node ids the run's.
    pub fn solve(&mut self, fits: &WindowFits, settings: &EstimatorSettings) -> WindowEstimate {
        self.solve_renumbered(fits, None, settings)
    }

    /// As `solve`, for fits renumbered (`WindowFits::renumbered`): node `i` of `fits` is
    /// node `ids[i]` of the run. The estimate keeps the fits' numbering; the anchors name
    /// the run's ids.
    pub fn solve_renumbered(&mut self, fits: &WindowFits, ids: Option<&[NodeId]>, settings: &EstimatorSettings) -> WindowEstimate {
        let run_id = |i: usize| ids.and_then(|v| v.get(i).copied()).unwrap_or(i as NodeId);
        let without_reference;
        let fits = if stopped_while_others_went_on(fits) {
            without_reference = without_edges_of(fits, fits.spec.reference);
            &without_reference
        } else {
            fits
        };
        let mut est = solve(fits, settings);
        let n = est.segments.len();
        let reference = fits.spec.reference as usize;
        let mut alive = vec![false; n];
        for f in &fits.fitted {
            for end in [f.key.0 as usize, f.key.1 as usize] {
                if end < n {
                    alive[end] = true;
                }
            }
        }
        let reference_silent = reference < n && !alive[reference];
        let mut placed: Vec<bool> = est.segments.iter().map(Option::is_some).collect();
        let mut in_use = Vec::new();
        let mut anchors = Vec::new();
        while let Some(a) = self.pick(&alive, &placed, &run_id).filter(|_| anchors.len() < MAX_ANCHORS_PER_WINDOW) {
            let (a_run, base) = (run_id(a), self.base_of(run_id(a)));
            let mut against = fits.clone();
            against.spec.reference = a as NodeId;
            let rel = solve(&against, settings);
            let mid = fits.mid_ns();
            // The anchor's clock when it reads the midpoint: where its base is evaluated.
            let extrapolated_ns = mid.saturating_sub(base.mid_local_ns);
            let added_sigma_ns = base.uncertainty_at_ns(mid);
            let mut nodes_placed = 0;
            for i in 0..n {
                let Some(seg) = rel.segments[i].filter(|_| !placed[i]) else { continue };
                let carried = carry(&seg, &base, settings);
                if carried.flagged {
                    est.flagged.push(i as NodeId);
                }
                est.segments[i] = Some(carried);
                // Its pieces were against the silent reference: the carried line holds.
                est.pieces[i].clear();
                placed[i] = true;
                nodes_placed += 1;
            }
            adopt_edge_verdicts(&mut est, &rel);
            in_use.push((a_run, base));
            anchors.push(Anchor {
                window_id: fits.spec.window_id,
                node: a_run,
                base_window_id: base.window_id,
                extrapolated_ns,
                added_sigma_ns,
                nodes_placed,
                reason: if reference_silent { AnchorReason::ReferenceSilent } else { AnchorReason::CutOff },
            });
        }
        if reference_silent && !anchors.is_empty() {
            // Its clock was G; now G is the anchors' carried clocks, and how far the dead
            // reference's own clock is from them nothing measures.
            est.segments[reference] = None;
            est.pieces[reference].clear();
            est.flagged.retain(|&f| f as usize != reference);
        }
        est.flagged.sort_unstable();
        est.unreachable = (0..n).filter(|&i| est.segments[i].is_none()).map(|i| i as NodeId).collect();
        est.anchors = anchors;
        for (i, s) in est.segments.iter().enumerate() {
            if let Some(s) = s {
                self.last.insert(run_id(i), *s);
            }
        }
        self.in_use = in_use;
        est
    }

    /// The next anchor (the fits' numbering): an anchor of the previous window still alive
    /// and unplaced, else the lowest-numbered alive, unplaced node placed before.
    fn pick(&self, alive: &[bool], placed: &[bool], run_id: &dyn Fn(usize) -> NodeId) -> Option<usize> {
        let candidate = |i: usize| alive[i] && !placed[i] && self.last.contains_key(&run_id(i));
        let local_of = |node: NodeId| (0..alive.len()).find(|&i| run_id(i) == node);
        self.in_use
            .iter()
            .filter_map(|(node, _)| local_of(*node))
            .find(|&i| candidate(i))
            .or_else(|| (0..alive.len()).find(|&i| candidate(i)))
    }

    /// The segment that carries `node` onto G: the one it was anchored by in the previous
    /// window (an anchor keeps its base, so its error grows with the whole outage, not in
    /// steps), else its last.
    fn base_of(&self, node: NodeId) -> ClockSegment {
        self.in_use.iter().find(|(n, _)| *n == node).map(|(_, b)| *b).unwrap_or_else(|| self.last[&node])
    }
}

/// Below this, a gap between the reference's last probe and the others' is no sign of a
/// death, ns: an edge's last time is read from its half-second slices (`last_x_ns`), and
/// with 30% loss a short window's last pure pairs can end early on every edge of a
/// three-node run by chance (`bench faults --only loss`, 0.5 s windows). Two seconds
/// are 50 probe rounds: no loss short of the reference's own end removes them all.
const MIN_SILENCE_NS: f64 = 2.0e9;

/// The reference stopped while the others went on: it has fitted edges, but the points of
/// every one end at least a quarter window (and `MIN_SILENCE_NS`) before the last point of
/// the other nodes' edges. (Against the others, not the window's end: at the end of a run
/// every node stops at once, often early in its last window, and that is no death; with
/// no other edge there is nothing to tell a death from the end.) Such a reference places
/// G at the midpoint from a few dozen probes at one end (each edge's theta is then
/// microseconds off, and the network keeps whichever edge happens to agree: in the
/// simulated `reference-dies`, seeds 1-4, a common error of up to 1.6 us under a stated
/// 550 ns), where the anchor's segment of the previous, whole window carries G within a
/// few hundred ns. So the window is solved as if the reference were silent.
fn stopped_while_others_went_on(fits: &WindowFits) -> bool {
    let reference = fits.spec.reference;
    let w = fits.window();
    let silence_ns = ((w.end_ns - w.start_ns) as f64 / 4.0).max(MIN_SILENCE_NS);
    let touches = |f: &&FittedEdge| f.key.0 == reference || f.key.1 == reference;
    let last_of = |edges: &mut dyn Iterator<Item = &FittedEdge>| edges.map(FittedEdge::last_x_ns).fold(f64::NEG_INFINITY, f64::max);
    let reference_last = last_of(&mut fits.fitted.iter().filter(touches));
    let others_last = last_of(&mut fits.fitted.iter().filter(|f| !touches(f)));
    reference_last.is_finite() && others_last.is_finite() && reference_last < others_last - silence_ns
}

/// The fits without any line of `node`'s edges (their reports stay, with no line).
fn without_edges_of(fits: &WindowFits, node: NodeId) -> WindowFits {
    let mut out = fits.clone();
    out.fitted.retain(|f| f.key.0 != node && f.key.1 != node);
    out
}

/// One line per stretch of windows that stood on the same anchor for the same reason:
/// what `distprof local`, merge and the report print of a run's re-anchoring.
pub fn describe(anchors: &[Anchor], reference: NodeId) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = anchors;
    while let Some(first) = rest.first() {
        let same = |a: &Anchor| (a.node, a.base_window_id, a.reason) == (first.node, first.base_window_id, first.reason);
        let len = rest.iter().take_while(|a| same(a)).count();
        let last = &rest[len - 1];
        let why = match first.reason {
            AnchorReason::ReferenceSilent => format!("reference node {reference} silent"),
            AnchorReason::CutOff => format!("no path to reference node {reference}"),
        };
        out.push(format!(
            "windows {}..={}: {why}; node {} stood in, carried from its window {} (sigma +{:.0} to +{:.0} ns, {} node(s) placed)",
            first.window_id, last.window_id, first.node, first.base_window_id, first.added_sigma_ns, last.added_sigma_ns, last.nodes_placed
        ));
        rest = &rest[len..];
    }
    out
}

/// Node i's segment against anchor a (`rel`: S_i - S_a) carried onto G by a's segment
/// `base` (S_a - G): S_i - G = (S_i - S_a) + (S_a - G), with S_a read where S_i reads the
/// midpoint. The uncertainties add in quadrature (independent), the bounds linearly.
fn carry(rel: &ClockSegment, base: &ClockSegment, settings: &EstimatorSettings) -> ClockSegment {
    let s_a = rel.mid_local_ns.saturating_sub(rel.offset_ns.round() as i64);
    let d_rel = rel.drift_ppb * 1e-9;
    let added_sigma = base.uncertainty_at_ns(s_a);
    let sigma_ns = if rel.uncertainty_ns == f64::MAX || added_sigma == f64::MAX { f64::MAX } else { rel.uncertainty_ns.hypot(added_sigma) };
    let bound_ns = rel.bound_ns + base.bound_ns + EXTRAPOLATION_BOUND_RATE * ns_between(base.mid_local_ns, s_a).abs();
    let bound_ns = if bound_ns.is_finite() { bound_ns.min(f64::MAX) } else { f64::MAX };
    // The carried drift is the relative one plus the anchor's, so its sigma is both (the
    // anchor's as its offset's growth takes it, floor included).
    let drift_uncertainty_ppb =
        if rel.drift_uncertainty_ppb < f64::MAX { rel.drift_uncertainty_ppb.hypot(base.drift_sigma_ppb()) } else { f64::MAX };
    ClockSegment {
        offset_ns: rel.offset_ns + base.correction_ns(s_a),
        // d(S_i - G)/dS_i = d_rel + d_a dS_a/dS_i, and dS_a/dS_i = 1 - d_rel.
        drift_ppb: (d_rel + base.drift_ppb * 1e-9 * (1.0 - d_rel)) * 1e9,
        bound_ns,
        uncertainty_ns: sigma_ns,
        drift_uncertainty_ppb,
        flagged: !(sigma_ns <= settings.max_uncertainty_ns as f64) || !(bound_ns <= settings.max_bound_ns as f64),
        ..*rel
    }
}

/// The edges the main solve could not judge (no end placed) take the anchor's verdicts.
fn adopt_edge_verdicts(est: &mut WindowEstimate, rel: &WindowEstimate) {
    let judged = |v: &super::network::EdgeVerdict| v.offset_residual_ns.is_finite();
    for (k, v) in est.network.edges.iter_mut().enumerate() {
        if let Some(r) = rel.network.edges.get(k).filter(|r| !judged(v) && judged(r)) {
            *v = *r;
        }
    }
    for (e, r) in est.edges.iter_mut().zip(&rel.edges) {
        if e.verdict.is_none_or(|v| !judged(&v)) && r.verdict.is_some_and(|v| judged(&v)) {
            e.verdict = r.verdict;
            e.uncertainty_ns = r.uncertainty_ns;
        }
    }
    if est.network.rms_offset_residual_ns == 0.0 && est.network.rms_drift_residual_ppb == 0.0 {
        est.network.rms_offset_residual_ns = rel.network.rms_offset_residual_ns;
        est.network.rms_drift_residual_ppb = rel.network.rms_drift_residual_ppb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(window_id: u64, mid_local_ns: i64, offset_ns: f64, drift_ppb: f64, uncertainty_ns: f64) -> ClockSegment {
        ClockSegment {
            window_id,
            start_local_ns: mid_local_ns - 1_000_000_000,
            end_local_ns: mid_local_ns + 1_000_000_000,
            mid_local_ns,
            offset_ns,
            drift_ppb,
            bound_ns: 1_000.0,
            uncertainty_ns,
            drift_uncertainty_ppb: f64::MAX,
            flagged: false,
            break_at_start: false,
        }
    }

    /// S_i - G = (S_i - S_a) + (S_a - G): node i is 1 us ahead of the anchor and gains
    /// 10 ppb on it; the anchor was 5 us ahead of G and gaining 20 ppb, 4 s before.
    #[test]
    fn a_carried_segment_adds_the_anchors_extrapolated_clock_and_its_uncertainty() {
        let base = segment(3, 0, 5_000.0, 20.0, 30.0);
        let rel = segment(5, 4_000_000_000, 1_000.0, 10.0, 40.0);
        let c = carry(&rel, &base, &EstimatorSettings::default());
        // The anchor reads 4 s - 1 us when node i reads the midpoint.
        let s_a = 4_000_000_000.0 - 1_000.0;
        assert!((c.offset_ns - (1_000.0 + 5_000.0 + 20e-9 * s_a)).abs() < 1e-6, "{c:?}");
        assert!((c.drift_ppb - (10.0 + 20.0 * (1.0 - 10e-9))).abs() < 1e-9, "{c:?}");
        let drift_sigma_ns = crate::model::UNSTATED_DRIFT_SIGMA_PPB * 1e-9 * s_a;
        assert!((c.uncertainty_ns - 40f64.hypot(30f64.hypot(drift_sigma_ns))).abs() < 1e-6, "{c:?}");
        assert!((c.bound_ns - (2_000.0 + EXTRAPOLATION_BOUND_RATE * s_a)).abs() < 1e-6, "{c:?}");
        assert_eq!((c.window_id, c.mid_local_ns, c.flagged), (5, 4_000_000_000, false));
        // The drift's sigma: the relative one's (3 ppb) and the anchor's (unstated: the floor).
        let stated = ClockSegment { drift_uncertainty_ppb: 3.0, ..rel };
        let c = carry(&stated, &base, &EstimatorSettings::default());
        assert!((c.drift_uncertainty_ppb - 3f64.hypot(crate::model::UNSTATED_DRIFT_SIGMA_PPB)).abs() < 1e-9, "{c:?}");
        assert_eq!(carry(&rel, &base, &EstimatorSettings::default()).drift_uncertainty_ppb, f64::MAX);
        // Beyond the flag threshold (1 us by default) the carried segment is flagged.
        let far = carry(&segment(60, 120_000_000_000, 0.0, 0.0, 40.0), &base, &EstimatorSettings::default());
        assert!(far.flagged && far.uncertainty_ns > 1_000.0, "{far:?}");
    }

    #[test]
    fn the_record_reads_one_line_per_stretch_of_windows() {
        let a = |window_id, node, reason| Anchor {
            window_id,
            node,
            base_window_id: 5,
            extrapolated_ns: 0,
            added_sigma_ns: 10.0 * window_id as f64,
            nodes_placed: 3,
            reason,
        };
        let lines = describe(&[a(6, 1, AnchorReason::ReferenceSilent), a(7, 1, AnchorReason::ReferenceSilent), a(9, 2, AnchorReason::CutOff)], 0);
        assert_eq!(
            lines,
            [
                "windows 6..=7: reference node 0 silent; node 1 stood in, carried from its window 5 (sigma +60 to +70 ns, 3 node(s) placed)",
                "windows 9..=9: no path to reference node 0; node 2 stood in, carried from its window 5 (sigma +90 to +90 ns, 3 node(s) placed)",
            ]
        );
    }
}
