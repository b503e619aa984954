//! The min-RTT midpoint estimator: a deliberately simple, clearly labelled stand-in used
//! by `distprof local` and the standalone summary until the real estimator (max-margin
//! hull fit + network least squares, `estimate/`) is wired in.
//!
//! Per probe, with the prober A and the peer B: forward delay `d_f = fwd_rx - fwd_tx`,
//! reverse delay `d_r = rev_rx - rev_tx`; B's offset from A is `(d_f - d_r) / 2`, exact
//! when both directions take equally long; `d_f + d_r` is the round trip without B's
//! turnaround. Per time bucket the probe with the smallest round trip is kept (the least
//! queued), buckets that queued far longer than the best are dropped, and a least-squares
//! line through the rest gives offset and drift. The bound is half the largest round trip
//! among the points kept: the most any path asymmetry can hide in them.

use crate::context::NodeId;
use crate::record::ProbeRecord;
use std::collections::BTreeMap;

/// The estimator's name, as printed next to its numbers.
pub const NAME: &str = "min-rtt-midpoint";

/// Width of the min-RTT buckets: short enough for a dozen points in a few seconds (the
/// drift's lever), long enough that each holds several probes to pick the least queued.
pub const BUCKET_NS: i64 = 200_000_000;

/// Buckets whose best round trip exceeds the edge's best by this factor are left out.
pub const RTT_KEEP_FACTOR: i64 = 2;
/// ... unless within this much of it (small round trips on loopback vary by tens of us).
pub const RTT_KEEP_SLACK_NS: i64 = 100_000;

/// One probe reduced to (time, offset, round trip), all in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OffsetPoint {
    /// Prober's clock, midpoint of the exchange.
    pub t_ns: i64,
    /// Peer minus prober.
    pub offset_ns: f64,
    pub rtt_ns: i64,
}

pub fn point(r: &ProbeRecord) -> OffsetPoint {
    let mut best: Option<OffsetPoint> = None;
    for i in 0..2 {
        let d_f = r.fwd_rx_ns[i] - r.fwd_tx_ns[i];
        let d_r = r.rev_rx_ns[i] - r.rev_tx_ns[i];
        let p = OffsetPoint {
            t_ns: r.fwd_tx_ns[i] / 2 + r.rev_rx_ns[i] / 2,
            offset_ns: (d_f - d_r) as f64 / 2.0,
            rtt_ns: d_f + d_r,
        };
        if best.is_none_or(|b| p.rtt_ns < b.rtt_ns) {
            best = Some(p);
        }
    }
    best.expect("two candidates")
}

/// Offset of `dst` from `src` as a line in `src`'s clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EdgeFit {
    pub src: NodeId,
    pub dst: NodeId,
    /// Offset at `t0_ns`.
    pub offset_ns: f64,
    pub t0_ns: i64,
    pub drift_ppb: f64,
    pub min_rtt_ns: i64,
    /// Largest round trip among the points of the line: half of it bounds their error.
    pub max_used_rtt_ns: i64,
    pub points: usize,
}

impl EdgeFit {
    pub fn offset_at(&self, t_ns: i64) -> f64 {
        self.offset_ns + self.drift_ppb * 1e-9 * (t_ns - self.t0_ns) as f64
    }
}

/// Fits one edge from its records; `bucket_ns` is the width of the min-RTT buckets.
pub fn fit_edge(records: &[ProbeRecord], bucket_ns: i64) -> Option<EdgeFit> {
    let first = records.first()?;
    let mut minima: BTreeMap<i64, OffsetPoint> = BTreeMap::new();
    for r in records {
        let p = point(r);
        let slot = minima.entry(p.t_ns.div_euclid(bucket_ns)).or_insert(p);
        if p.rtt_ns < slot.rtt_ns {
            *slot = p;
        }
    }
    let all: Vec<OffsetPoint> = minima.into_values().collect();
    // A bucket whose best probe still queued far longer than the edge's best (a stalled
    // relay or host) says little: its asymmetry may be milliseconds. Keep the buckets
    // within RTT_KEEP_FACTOR of the best round trip (or RTT_KEEP_SLACK_NS above it).
    let best = all.iter().map(|p| p.rtt_ns).min()?;
    let keep = (best.saturating_mul(RTT_KEEP_FACTOR)).max(best + RTT_KEEP_SLACK_NS);
    let pts: Vec<OffsetPoint> = all.into_iter().filter(|p| p.rtt_ns <= keep).collect();
    let t0 = pts[pts.len() / 2].t_ns;
    let n = pts.len() as f64;
    let mean_x = pts.iter().map(|p| (p.t_ns - t0) as f64).sum::<f64>() / n;
    let mean_y = pts.iter().map(|p| p.offset_ns).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| ((p.t_ns - t0) as f64 - mean_x).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| ((p.t_ns - t0) as f64 - mean_x) * (p.offset_ns - mean_y)).sum();
    let slope = if pts.len() >= 2 && sxx > 0.0 { sxy / sxx } else { 0.0 };
    Some(EdgeFit {
        src: first.src,
        dst: first.dst,
        offset_ns: mean_y - slope * mean_x,
        t0_ns: t0,
        drift_ppb: slope * 1e9,
        min_rtt_ns: best,
        max_used_rtt_ns: pts.iter().map(|p| p.rtt_ns).max().unwrap_or(best),
        points: pts.len(),
    })
}

/// A node's estimate against the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeEstimate {
    pub offset_ns: f64,
    pub drift_ppb: f64,
    pub bound_ns: f64,
    pub hops: usize,
}

/// Chains edge fits from the reference along the paths of least total round trip
/// (either edge direction), evaluated at time `t_ns`. `None` for unreachable nodes.
pub fn solve_network(num_nodes: usize, reference: NodeId, fits: &[EdgeFit], t_ns: i64) -> Vec<Option<NodeEstimate>> {
    let mut est: Vec<Option<NodeEstimate>> = vec![None; num_nodes];
    let mut cost = vec![f64::INFINITY; num_nodes];
    let mut done = vec![false; num_nodes];
    if (reference as usize) >= num_nodes {
        return est;
    }
    est[reference as usize] = Some(NodeEstimate { offset_ns: 0.0, drift_ppb: 0.0, bound_ns: 0.0, hops: 0 });
    cost[reference as usize] = 0.0;
    while let Some(u) =
        (0..num_nodes).filter(|&i| !done[i] && cost[i].is_finite()).min_by(|&a, &b| cost[a].total_cmp(&cost[b]))
    {
        done[u] = true;
        let base = est[u].expect("finite cost has an estimate");
        for f in fits {
            // Offset of `v` from `u` through this edge, in either direction.
            let (v, off, drift) = if f.src as usize == u {
                (f.dst as usize, f.offset_at(t_ns), f.drift_ppb)
            } else if f.dst as usize == u {
                (f.src as usize, -f.offset_at(t_ns), -f.drift_ppb)
            } else {
                continue;
            };
            if v >= num_nodes || done[v] {
                continue;
            }
            let c = cost[u] + f.min_rtt_ns as f64;
            if c < cost[v] {
                cost[v] = c;
                est[v] = Some(NodeEstimate {
                    offset_ns: base.offset_ns + off,
                    drift_ppb: base.drift_ppb + drift,
                    bound_ns: base.bound_ns + f.max_used_rtt_ns as f64 / 2.0,
                    hops: base.hops + 1,
                });
            }
        }
    }
    est
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Peer ahead by 1 ms and gaining 10 ppm; 30 us one way, 50 us back (asymmetric).
    fn records() -> Vec<ProbeRecord> {
        (0..200)
            .map(|k| {
                let t = 1_000_000_000i64 + k * 20_000_000;
                let peer = |real: i64| real + 1_000_000 + ((real - 1_000_000_000) as f64 * 10e-6) as i64;
                let fwd_tx = [t, t + 50_000];
                let fwd_rx = [peer(t + 30_000), peer(t + 80_000)];
                let rev_tx = [peer(t + 200_000), peer(t + 250_000)];
                let rev_rx = [t + 250_000, t + 300_000];
                ProbeRecord { src: 0, dst: 1, seq: k as u32, fwd_tx_ns: fwd_tx, fwd_rx_ns: fwd_rx, rev_tx_ns: rev_tx, rev_rx_ns: rev_rx }
            })
            .collect()
    }

    #[test]
    fn recovers_offset_and_drift_up_to_half_the_asymmetry() {
        let fit = fit_edge(&records(), 1_000_000_000).unwrap();
        // 80 us round trip; the peer's drift over the 170 us turnaround shaves off 2 ns.
        assert!((fit.min_rtt_ns - 80_000).abs() <= 5, "{}", fit.min_rtt_ns);
        assert!((fit.drift_ppb - 10_000.0).abs() < 50.0, "{}", fit.drift_ppb);
        // True offset at t=3 s real: 1 ms + 20 us; asymmetry (50-30)/2 = 10 us hides as error.
        let off = fit.offset_at(3_000_000_000);
        assert!((off - (1_020_000.0 - 10_000.0)).abs() < 100.0, "{off}");
        let est = solve_network(3, 1, &[fit], 3_000_000_000);
        let n0 = est[0].unwrap();
        assert!((n0.offset_ns + 1_010_000.0).abs() < 100.0);
        assert!((n0.bound_ns - 40_000.0).abs() <= 3.0);
        assert!(est[2].is_none());
    }

    #[test]
    fn a_stalled_stretch_does_not_bend_the_line() {
        let mut recs = records();
        // 0.6 s in which every forward packet is held 20 ms (a stalled relay).
        for r in recs.iter_mut().skip(50).take(30) {
            r.fwd_rx_ns[0] += 20_000_000;
            r.fwd_rx_ns[1] += 20_000_000;
        }
        let fit = fit_edge(&recs, BUCKET_NS).unwrap();
        assert!((fit.drift_ppb - 10_000.0).abs() < 50.0, "{}", fit.drift_ppb);
        assert!((fit.offset_at(3_000_000_000) - 1_010_000.0).abs() < 100.0);
        assert!((fit.max_used_rtt_ns - 80_000).abs() <= 5);
    }
}
