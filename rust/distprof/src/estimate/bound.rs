//! The error bound: what the data proves, not a statistical guess.
//!
//! For an edge A -> B, every forward point lies on or above the true theta and every
//! reverse point on or below it, whatever the delays. So at any x the true theta lies
//! between the upper hull of the reverse points and the lower hull of the forward points:
//! the interval is at most the smallest round trip wide (half the min RTT on each side of
//! the midpoint) and the lines that fit through it bound the slope as well. The edge
//! uncertainty `u_e` is the distance from the edge's estimate to the far end of that
//! interval, plus a timestamp-noise allowance. A node's bound is the cheapest path of
//! edge uncertainties from the reference (shortest path) plus how far the network
//! solution lies from that path's own estimate (the residual), so it holds whatever the
//! network solve did with the other edges.
//!
//! What it cannot know: a constant difference between the forward and reverse one-way
//! delays (path asymmetry) shifts every point of a direction equally and is invisible to
//! two-way probes. The interval above is exactly the set of offsets some asymmetry could
//! explain, so the bound covers any asymmetry, but the estimate assumes symmetry, and no
//! amount of data narrows the bound below half the min round trip.

use super::hull::{eval_chain, Hulls, Line};
use super::network::{adjacency, EdgeObs, NetworkSolution};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Hull vertices are extreme points, picked partly for their timestamp noise; this many
/// noise standard deviations (estimated from the purity gaps) are added per edge.
const NOISE_SIGMAS: f64 = 4.0;
/// Outside the x range of its points an edge's interval is extrapolated with this rate
/// uncertainty (1 ppm, beyond any fitted rate error), a conservative guess.
const EXTRAPOLATION_RATE: f64 = 1e-6;

/// Uncertainty of an edge's theta at x (from the window midpoint, src clock), in ns.
pub fn edge_uncertainty_ns(hulls: &Hulls, line: &Line, x_ns: f64, gap_noise_ns: f64) -> f64 {
    let end = |chain: &[super::points::Point]| -> Option<(f64, f64)> {
        let (first, last) = (chain.first()?, chain.last()?);
        let xc = x_ns.clamp(first.x_ns, last.x_ns);
        Some((eval_chain(chain, xc)?, xc))
    };
    let est = line.at(x_ns);
    let noise = NOISE_SIGMAS * gap_noise_ns;
    match (end(&hulls.fwd_lower), end(&hulls.rev_upper)) {
        (Some((hv, hx)), Some((lv, lx))) => {
            // Beyond the points, the ends follow the line's slope, widened by the
            // extrapolation rate.
            let hi = hv + line.slope * (x_ns - hx) + EXTRAPOLATION_RATE * (x_ns - hx).abs();
            let lo = lv + line.slope * (x_ns - lx) - EXTRAPOLATION_RATE * (x_ns - lx).abs();
            (hi - est).max(est - lo).max(0.0) + noise
        }
        _ => f64::INFINITY,
    }
}

/// Half of how far an edge's hulls cross along `line`: crossing hulls contradict every
/// line, the one used lies amid the crossing and points of each side are half of it
/// beyond. The bound of the edge is at least that (`online::solve`); its weight in the
/// network is not lowered by it, because the robust rejection removes such an edge where
/// a low weight would keep it (a stepping node's edges: with crossing-lowered weights the
/// simulated leap second's p99 went from 37 us to 503 ms, seeds 101-102).
pub fn crossing_ns(hulls: &Hulls, line: &Line) -> f64 {
    0.5 * hulls.overlap_ns(line.slope)
}

/// Per node: shortest path of edge uncertainties to the reference plus the distance of
/// the network solution from that path's estimate. None for unreachable nodes.
pub fn node_bounds_ns(
    num_nodes: usize,
    reference: u32,
    obs: &[EdgeObs],
    uncertainty_ns: &[f64],
    solution: &NetworkSolution,
) -> Vec<Option<f64>> {
    let rejected: Vec<_> = solution.edges.iter().map(|v| v.rejected).collect();
    let adj = adjacency(num_nodes, obs, &rejected);
    let mut dist = vec![f64::INFINITY; num_nodes];
    let mut path_o = vec![0.0; num_nodes];
    let mut path_r = vec![0.0; num_nodes];
    let mut out = vec![None; num_nodes];
    if (reference as usize) >= num_nodes {
        return out;
    }
    dist[reference as usize] = 0.0;
    // Non-negative f64s order like their bit patterns.
    let mut heap = BinaryHeap::from([Reverse((0u64, reference))]);
    while let Some(Reverse((d_bits, u))) = heap.pop() {
        let d = f64::from_bits(d_bits);
        if d > dist[u as usize] {
            continue;
        }
        for &i in &adj[u as usize] {
            let u_e = uncertainty_ns[i];
            if !u_e.is_finite() {
                continue;
            }
            let v = obs[i].other(u);
            let nd = d + u_e;
            if nd < dist[v as usize] {
                dist[v as usize] = nd;
                let (o, r) = obs[i].propagate(u, path_o[u as usize], path_r[u as usize]);
                path_o[v as usize] = o;
                path_r[v as usize] = r;
                heap.push(Reverse((nd.to_bits(), v)));
            }
        }
    }
    for i in 0..num_nodes {
        if let (Some(o), true) = (solution.offset_ns[i], dist[i].is_finite()) {
            out[i] = Some(dist[i] + (o - path_o[i]).abs());
        }
    }
    out
}
