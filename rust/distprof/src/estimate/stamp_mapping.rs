//! The error of a node's hardware stamp mapping, added to its segment's uncertainty.
//!
//! A node with hardware stamps converts every NIC stamp to its host clock through the
//! PHC mapping (`nic_clock::mapping`), whose error over a window is bounded
//! (`NicClockInfo::mapping_error_max_ns`). An error e in that conversion shifts every
//! stamp of the node alike: the probes see the node's host clock as e ahead of where it
//! is, on every path through the node, so no loop residual and no spacing of points shows
//! it (the estimator's sigma is blind to it), and the trace events, stamped by the host
//! clock itself, are corrected by e too much. So the node's offset against the reference
//! carries e_node - e_reference beyond what the data shows. It is added here: to the bound
//! as |e_node| + |e_reference|, and to the sigma as a variance of (E/2)² per end, so that
//! two sigma alone cover the stated bound E of each end (the mapping's error is a bound,
//! not a spread: a biased latch makes it one sign over a whole window).

use super::online::WindowEstimate;
use super::settings::EstimatorSettings;
use crate::context::NodeId;

/// One segment (or piece) widened by the two mapping errors, and flagged beyond the limits.
fn widen(seg: &mut crate::model::ClockSegment, own: f64, at_reference: f64, settings: &EstimatorSettings) {
    // f64::MAX stands for unbounded / unknown and stays so.
    if seg.bound_ns < f64::MAX {
        seg.bound_ns += own + at_reference;
    }
    if seg.uncertainty_ns < f64::MAX {
        seg.uncertainty_ns = (seg.uncertainty_ns.powi(2) + (own / 2.0).powi(2) + (at_reference / 2.0).powi(2)).sqrt();
    }
    seg.flagged |= !(seg.uncertainty_ns <= settings.max_uncertainty_ns as f64) || !(seg.bound_ns <= settings.max_bound_ns as f64);
}

/// Widens every segment and piece of `est` (a window solved against `reference`) by the mapping
/// errors `mapping_error_ns(node)` of the node and of the reference (0 for a node without
/// hardware stamps), and flags the segments that now exceed the configured limits.
pub fn add_stamp_mapping_errors(est: &mut WindowEstimate, reference: NodeId, settings: &EstimatorSettings, mapping_error_ns: impl Fn(NodeId) -> f64) {
    let at_reference = mapping_error_ns(reference).max(0.0);
    for (i, (seg, pieces)) in est.segments.iter_mut().zip(&mut est.pieces).enumerate() {
        let Some(seg) = seg else { continue };
        let node = i as NodeId;
        if node == reference {
            continue;
        }
        let own = mapping_error_ns(node).max(0.0);
        if own == 0.0 && at_reference == 0.0 {
            continue;
        }
        let mut flag = false;
        for s in std::iter::once(seg).chain(pieces.iter_mut()) {
            widen(s, own, at_reference, settings);
            flag |= s.flagged;
        }
        if flag && !est.flagged.contains(&node) {
            est.flagged.push(node);
        }
    }
    est.flagged.sort_unstable();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{fit_window, solve, WindowSpec};
    use crate::record::ProbeRecord;

    /// Three nodes on symmetric 20 us paths, node 1's clock 3 us ahead; node 2 has hardware
    /// stamps whose mapping is 900 ns off (its every stamp late by that). The estimate of
    /// node 2 is off by the 900 ns no residual shows; with the mapping's stated error of
    /// 1 us added, the truth lies within two sigma and within the bound, and node 1, whose
    /// stamps are exact, keeps its sigma.
    #[test]
    fn a_mapping_error_no_residual_shows_is_covered_by_the_widened_sigma() {
        let truth = [0.0, 3_000.0, 0.0];
        let mapping_off = [0i64, 0, 900];
        let stamp = |node: usize, real: i64| real + truth[node] as i64 + mapping_off[node];
        let mut records = Vec::new();
        let mut seq = 0u32;
        for k in 0..400i64 {
            for (src, dst) in [(0usize, 1usize), (1, 2), (2, 0), (0, 2)] {
                let t = k * 5_000_000 + (src * 7 + dst) as i64 * 100_000;
                // Delays 20 us plus a little queueing, the same floor both ways.
                let q = |i: i64| 20_000 + (i * 7919 + k * 104_729) % 3_000;
                let fwd_tx = [stamp(src, t), stamp(src, t + 40_000)];
                let fwd_rx = [stamp(dst, t + q(1)), stamp(dst, t + 40_000 + q(1))];
                let back = t + 200_000;
                let rev_tx = [stamp(dst, back), stamp(dst, back + 40_000)];
                let rev_rx = [stamp(src, back + q(2)), stamp(src, back + 40_000 + q(2))];
                records.push(ProbeRecord { src: src as NodeId, dst: dst as NodeId, seq, fwd_tx_ns: fwd_tx, fwd_rx_ns: fwd_rx, rev_tx_ns: rev_tx, rev_rx_ns: rev_rx });
                seq += 1;
            }
        }
        let spec = WindowSpec { window_id: 0, start_local_ns: 0, end_local_ns: 2_000_000_000, num_nodes: 3, reference: 0 };
        let settings = EstimatorSettings::default();
        let mut est = solve(&fit_window(&records, &spec, &settings), &settings);
        let before = est.segments.clone();
        let err = |est: &WindowEstimate, i: usize| est.segments[i].unwrap().offset_ns - truth[i];
        let seg = |est: &WindowEstimate, i: usize| est.segments[i].unwrap();
        assert!((err(&est, 2) - 900.0).abs() < 50.0, "node 2 off by {} ns", err(&est, 2));
        assert!(err(&est, 2).abs() > 2.0 * seg(&est, 2).uncertainty_ns, "the data alone cannot see it: {:?}", seg(&est, 2));
        add_stamp_mapping_errors(&mut est, 0, &settings, |n| if n == 2 { 1_000.0 } else { 0.0 });
        let s2 = seg(&est, 2);
        assert!(err(&est, 2).abs() <= 2.0 * s2.uncertainty_ns && err(&est, 2).abs() <= s2.bound_ns, "{s2:?}");
        assert!((s2.bound_ns - before[2].unwrap().bound_ns - 1_000.0).abs() < 1e-6);
        assert_eq!(seg(&est, 1), before[1].unwrap());
        assert_eq!(seg(&est, 0), before[0].unwrap());
        // A reference with hardware stamps widens every other node.
        let mut est2 = solve(&fit_window(&records, &spec, &settings), &settings);
        add_stamp_mapping_errors(&mut est2, 0, &settings, |n| if n == 0 { 400.0 } else { 0.0 });
        assert!(seg(&est2, 1).uncertainty_ns >= 200.0 && seg(&est2, 2).uncertainty_ns >= 200.0);
        // A mapping error beyond the configured sigma limit flags the node.
        let mut est3 = solve(&fit_window(&records, &spec, &settings), &settings);
        let big = 2.0 * settings.max_uncertainty_ns as f64 + 2.0;
        add_stamp_mapping_errors(&mut est3, 0, &settings, |n| if n == 2 { big } else { 0.0 });
        assert!(seg(&est3, 2).flagged && est3.flagged.contains(&2), "{:?}", est3.flagged);
    }
}
