//! The asymmetry of a `distprof local` run's paths as its true clocks show it: the part of
//! a node-window's error that no two-way measurement can see.
//!
//! Two-way probes estimate an edge's offset from its forward and reverse minimum delays,
//! so the estimate is off by half their difference, whatever the estimator. The relay adds
//! the same delay both ways, but a datagram's path also runs through the sending node's
//! kernel, the relay's receive and send and the receiving node's kernel, all on this one
//! machine. On a loaded 2-core machine those paths are not alike: measured on
//! `local --nodes 4 --duration 30 --seed 21` at load 8-9, each datagram took ~102.0 µs
//! (sender to relay 0.2 µs, relay's send 1.6 µs, relay to receiver 0.2 µs) or ~102.5 µs
//! (0.3, 1.95, 0.3 µs), and which of the two depended on the sending node for seconds at a
//! time: a node whose sends were slow and whose receives were not was off by up to ~250 ns,
//! on every path alike, so the loops could not show it. Its true size is known here: local
//! knows every node's clock, so every stamp's real time, so every datagram's true delay.

use distprof::clock::VirtualClock;
use distprof::context::NodeId;
use distprof::record::ProbeRecord;

/// Half the difference of the true minimum delays from `reference` to `node` and back,
/// over `records` (every datagram of the window between the two, whichever probed): the
/// error in `node`'s offset from the reference that these paths alone make, in the sign
/// of the estimate's error (the estimate minus the truth). None without datagrams both
/// ways.
pub fn to_reference_ns(records: &[ProbeRecord], clocks: &[VirtualClock], reference: NodeId, node: NodeId) -> Option<f64> {
    let base = clocks.get(reference as usize)?.epoch_real_ns;
    // Real times relative to `base`: absolute nanoseconds in an f64 keep only 256 ns.
    let real = |n: NodeId, local_ns: i64| {
        let c = clocks.get(n as usize)?;
        Some(c.invert_rel_ns((local_ns - c.epoch_real_ns) as f64) + (c.epoch_real_ns - base) as f64)
    };
    let (mut out, mut back) = (f64::INFINITY, f64::INFINITY);
    for r in records.iter().filter(|r| (r.src, r.dst) == (reference, node) || (r.src, r.dst) == (node, reference)) {
        for k in 0..2 {
            // Forward datagrams leave src, reverse ones dst.
            let fwd = real(r.dst, r.fwd_rx_ns[k])? - real(r.src, r.fwd_tx_ns[k])?;
            let rev = real(r.src, r.rev_rx_ns[k])? - real(r.dst, r.rev_tx_ns[k])?;
            let (from_reference, to_reference) = if r.src == reference { (fwd, rev) } else { (rev, fwd) };
            out = out.min(from_reference);
            back = back.min(to_reference);
        }
    }
    (out.is_finite() && back.is_finite()).then(|| (out - back) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 1 runs 1.5 ms ahead and 12.5 ppm slow; its paths from the reference take
    /// 100 µs at best, those back 100.4 µs: the estimate of its offset is 200 ns low.
    #[test]
    fn half_the_difference_of_the_true_floors_in_the_estimate_s_sign() {
        let epoch = 1_795_000_000_000_000_000;
        let reference = VirtualClock { epoch_real_ns: epoch, ..VirtualClock::IDENTITY };
        let node = VirtualClock { offset_ns: 1_500_000, drift_ppb: -12_500.0, wander_ns: 150.0, epoch_real_ns: epoch };
        let clocks = [reference, node];
        let stamp = |n: NodeId, real_ns: i64| clocks[n as usize].apply(real_ns);
        let (to_node, from_node) = (100_000, 100_400);
        let mut records = Vec::new();
        for k in 0..50i64 {
            // Queueing on top of the floors; the first probe of each direction has none.
            let q = |i: i64| if k == 0 { 0 } else { 1_000 + (i * 7919 + k * 104_729) % 5_000 };
            for (src, dst) in [(0, 1), (1, 0)] {
                let t = epoch + 1_000_000_000 + k * 40_000_000 + src as i64 * 7_000_000;
                let out = if src == 0 { to_node } else { from_node };
                let back = if src == 0 { from_node } else { to_node };
                let turn = t + 2_000_000;
                records.push(ProbeRecord {
                    src,
                    dst,
                    seq: k as u32,
                    fwd_tx_ns: [stamp(src, t), stamp(src, t + 50_000)],
                    fwd_rx_ns: [stamp(dst, t + out + q(1)), stamp(dst, t + 50_000 + out + q(2))],
                    rev_tx_ns: [stamp(dst, turn), stamp(dst, turn + 50_000)],
                    rev_rx_ns: [stamp(src, turn + back + q(3)), stamp(src, turn + 50_000 + back + q(4))],
                });
            }
        }
        let a = to_reference_ns(&records, &clocks, 0, 1).unwrap();
        // Within the stamps' rounding to whole nanoseconds.
        assert!((a - (-200.0)).abs() <= 2.0, "{a}");
        // No datagrams to node 2: nothing to say.
        assert_eq!(to_reference_ns(&records, &clocks, 0, 2), None);
        // The paths made symmetric: no error from them.
        let symmetric: Vec<ProbeRecord> = records
            .iter()
            .map(|r| {
                let shift = |n: NodeId, local: i64| if n == 0 && r.src == 1 { local - 400 } else { local };
                ProbeRecord { fwd_rx_ns: r.fwd_rx_ns.map(|s| shift(r.dst, s)), ..*r }
            })
            .collect();
        let a = to_reference_ns(&symmetric, &clocks, 0, 1).unwrap();
        assert!(a.abs() <= 2.0, "{a}");
    }
}
