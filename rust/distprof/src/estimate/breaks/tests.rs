//! Breaks found from probes with known clocks: a servo's frequency change mid-window.

use crate::estimate::online::{estimate_window, WindowEstimate};
use crate::estimate::settings::EstimatorSettings;
use crate::estimate::window_fits::WindowSpec;
use crate::record::ProbeRecord;

const WINDOW_NS: i64 = 15_000_000_000;
const NODES: u32 = 6;

/// A node's clock: local time at true time t (ns from the window's start).
type Clock = Box<dyn Fn(f64) -> f64>;

/// Every node probes every other every 40 ms over one 15 s window; 10 us base delay
/// and 20 us of exponential queueing shared by a pair's two packets, 100 ns of
/// independent stamping noise.
fn window(clocks: &[Clock], seed: u64) -> WindowEstimate {
    let mut noise = crate::estimate::test_noise::XorShift::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut unit = move || noise.unit();
    let mut records = Vec::new();
    for src in 0..NODES {
        for dst in (0..NODES).filter(|&d| d != src) {
            let phase = (src * NODES + dst) as f64 * 2.3e6;
            for seq in 0..(WINDOW_NS / 40_000_000) as u32 {
                let t = seq as f64 * 4e7 + phase;
                let (s, d) = (&clocks[src as usize], &clocks[dst as usize]);
                let (q_fwd, q_rev) = (-20_000.0 * (1.0 - unit()).ln(), -20_000.0 * (1.0 - unit()).ln());
                let mut stamp = |c: &Clock, at: f64| (c(at) + 100.0 * (unit() - 0.5)) as i64;
                let fwd = [t, t + 50_000.0];
                let fwd_rx = fwd.map(|x| x + 10_000.0 + q_fwd);
                let rev = fwd_rx.map(|x| x + 20_000.0);
                let rev_rx = rev.map(|x| x + 10_000.0 + q_rev);
                records.push(ProbeRecord {
                    src,
                    dst,
                    seq,
                    fwd_tx_ns: [stamp(s, fwd[0]), stamp(s, fwd[1])],
                    fwd_rx_ns: [stamp(d, fwd_rx[0]), stamp(d, fwd_rx[1])],
                    rev_tx_ns: [stamp(d, rev[0]), stamp(d, rev[1])],
                    rev_rx_ns: [stamp(s, rev_rx[0]), stamp(s, rev_rx[1])],
                });
            }
        }
    }
    let spec = WindowSpec { window_id: 0, start_local_ns: 0, end_local_ns: WINDOW_NS, num_nodes: NODES, reference: 0 };
    estimate_window(&records, &spec, &EstimatorSettings::default())
}

/// A free-running clock: `offset_ns` ahead, gaining `ppb`.
fn free(offset_ns: f64, ppb: f64) -> Clock {
    Box::new(move |t| t + offset_ns + ppb * 1e-9 * t)
}

/// The true offset of `clock` from the reference's (`clocks[0]`) where it reads
/// `local_ns` (found by bisection: the clocks are monotone but for steps).
fn true_offset(clocks: &[Clock], node: usize, local_ns: i64) -> f64 {
    let (mut lo, mut hi) = (-2e9, WINDOW_NS as f64 + 2e9);
    for _ in 0..200 {
        let m = 0.5 * (lo + hi);
        if clocks[node](m) < local_ns as f64 { lo = m } else { hi = m }
    }
    local_ns as f64 - clocks[0](0.5 * (lo + hi))
}

/// The largest error of a node's model (the piece that holds, else its segment) and
/// of its window's line over the window, every 0.5 s from 0.25 s in.
fn worst_errors_ns(est: &WindowEstimate, clocks: &[Clock], node: usize) -> (f64, f64) {
    let seg = est.segments[node].unwrap();
    let (mut model, mut line) = (0.0f64, 0.0f64);
    for k in 0..30 {
        let local = 250_000_000 + k * 500_000_000;
        let piece = est.pieces[node].iter().find(|p| p.start_local_ns <= local && local < p.end_local_ns).unwrap_or(&seg);
        let truth = true_offset(clocks, node, local);
        model = model.max((piece.correction_ns(local) - truth).abs());
        line = line.max((seg.correction_ns(local) - truth).abs());
    }
    (model, line)
}

/// A chrony-like servo gives node 1 a new frequency (+1 ppm) 6.3 s into the window:
/// its phase bends ~2 us away from any one line. The break is found within 0.3 s in
/// its clock (measured 0.1-0.25 s), on no other node, and the pieces are within
/// 250 ns of the truth at their midpoints and 600 ns anywhere in the window, where the
/// window's line misses by over 1 us (1.8-2.0).
#[test]
fn a_one_ppm_frequency_change_mid_window_gives_two_right_pieces() {
    let at = 6.3e9;
    for seed in 1..=3 {
        let clocks: Vec<Clock> = vec![
            free(0.0, 0.0),
            Box::new(move |t| t + 3_000.0 + 2_000.0 * 1e-9 * t + 1_000.0 * 1e-9 * (t - at).max(0.0)),
            free(-7_000.0, -4_000.0),
            free(12_000.0, 9_000.0),
            free(-1_000.0, 5_000.0),
            free(500.0, -300.0),
        ];
        let est = window(&clocks, seed);
        for node in [0, 2, 3, 4, 5] {
            assert!(est.pieces[node].is_empty(), "seed {seed}: node {node} has pieces {:?}", est.pieces[node]);
        }
        let p = &est.pieces[1];
        assert_eq!(p.len(), 2, "seed {seed}: {p:?}");
        let found = (p[1].start_local_ns as f64 - clocks[1](at)).abs();
        assert!(found < 0.3e9, "seed {seed}: break {} ns from the truth", found);
        assert!(p[1].break_at_start && !p[0].break_at_start);
        let (worst, line) = worst_errors_ns(&est, &clocks, 1);
        assert!(line > 1_000.0, "seed {seed}: the window's line already follows: {line} ns");
        let at_mids = p.iter().map(|s| (s.offset_ns - true_offset(&clocks, 1, s.mid_local_ns)).abs()).fold(0.0, f64::max);
        // Measured: 95 / 187 / 154 ns at the midpoints, 142 / 512 / 227 over the window
        // (the break 0.1 / 0.2 / 0.25 s early; 512 ns is 0.2 s of the 1 ppm kink plus the
        // slopes' errors).
        assert!(at_mids < 250.0, "seed {seed}: a piece {at_mids} ns off at its midpoint");
        assert!(worst < 600.0, "seed {seed}: a piece {worst} ns off within the window");
    }
}

/// The middle half of the edges' values: the quarter below and above left out, the rest
/// averaged (so far-off edges do not move it); the median itself below four values. The
/// error is the median's, from the spread (1.2533 x 1.4826 x the median absolute
/// deviation / sqrt(n)).
#[test]
fn a_piece_takes_the_mean_of_its_edges_middle_half() {
    // 12 values: the quarter each side is 3 values; far outliers fall into it.
    let mut v = vec![-5_000.0, 104.0, 98.0, 101.0, 9_000.0, 97.0, 103.0, 100.0, 99.0, 102.0, 4_000.0, 96.0];
    let (mean, error) = super::middle_mean_and_error(&mut v);
    // Sorted: -5000, 96, 97 | 98 99 100 101 102 103 | 104, 4000, 9000.
    assert!((mean - 100.5).abs() < 1e-9, "{mean}");
    // The median (the upper of the middle two) is 101; the absolute deviations from it,
    // sorted, 0 1 1 2 2 3 | 3 4 5 3899 5101 8899: their median is 3.
    assert!((error - 1.2533 * 1.4826 * 3.0 / 12f64.sqrt()).abs() < 1e-9, "{error}");
    let mut three = vec![7.0, -400.0, 9.0];
    assert_eq!(super::middle_mean_and_error(&mut three).0, 7.0);
}
