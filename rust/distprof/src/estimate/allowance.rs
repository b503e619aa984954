//! The stated asymmetry allowance: what the uncertainty assumes about the part of the
//! error two-way probes cannot see, and where the data shows the assumption broken.
//!
//! A difference between an edge's forward and reverse minimum delays (path asymmetry,
//! or a node's stamps taken at different points on send and receive) moves the edge's
//! theta by half that difference and leaves every point consistent: no amount of probing
//! on the edge reveals it. The statistical sigma (`uncertainty`) therefore holds only for
//! symmetric paths, and on real clusters it does not cover (a per-node stamping asymmetry
//! of +-100 ns took the 2-sigma coverage from 0.96 to 0.77 in the simulator). So every
//! uncertainty states an allowance A per hop (`Config::asymmetry_allowance_ns`, chosen by
//! timestamp mode) and includes it in quadrature with the statistical sigma.
//!
//! What the network solve cannot average away is what all paths of a node share: its own
//! stamping. A node that stamps its sends early and its receives late by b (a NIC's or
//! driver's constant bias) moves the theta of every edge through it by b / 2, so an edge
//! src -> dst is off by (b_src - b_dst) / 2, and the node's offset by (b_node - b_ref) / 2
//! whatever the paths. Asymmetry within +-A per hop is thus biases within +-A per node;
//! taken uniform, the node's error has standard deviation A sqrt(2/3) / 2 = A / sqrt(6).
//! Independent asymmetries of single paths (uniform within +-A per hop: A / sqrt(3) per
//! edge) are averaged by the solve and grow the loop residuals instead (the Birge ratio of
//! `uncertainty`): they need no per-node share. A smaller share (triangular biases, A as a
//! 2-sigma bound) narrows the uncertainty where there is no asymmetry but stops covering a
//! cluster whose biases do spread over +-A: on tuning seeds the reference scenario reaches
//! 0.99 only at ~A / 5, where +-100 ns of uniform stamping bias falls to 0.81
//! (docs/estimation.md, "The asymmetry allowance").
//!
//! Where an asymmetry differs between a node's paths the loops do see it: an edge's
//! loop-closure residual is its own asymmetry less what the other paths absorb. When half
//! or more of a node's edges (accepted, or rejected for disagreeing) disagree with the
//! network by more than the allowance plus their noise allows, the assumption is broken at
//! that node and its segment says so.

use super::network::{EdgeObs, NetworkSolution, RejectReason};
use crate::context::NodeId;

/// An edge's residual counts against the allowance only beyond this many of its own
/// (statistical) sigmas: 3 keeps ~0.3% of the ordinary edges' noise out.
const NOISE_SIGMAS: f64 = 3.0;
/// A node is judged on at least this many edges: with fewer, one bad peer is
/// half the evidence.
const MIN_EDGES: usize = 3;

/// The standard deviation the allowance adds per node, ns: half the difference of two
/// stamping biases (the node's and the reference's), each uniform within +-`allowance_ns`.
pub fn allowance_sigma_ns(allowance_ns: f64) -> f64 {
    allowance_ns / 6f64.sqrt()
}

/// The total uncertainty of a node's offset: the statistical sigma and the allowance's,
/// in quadrature (independent errors). The reference has none: it is the timeline.
pub fn total_sigma_ns(statistical_ns: f64, allowance_ns: f64, is_reference: bool) -> f64 {
    if is_reference {
        return statistical_ns;
    }
    statistical_ns.hypot(allowance_sigma_ns(allowance_ns))
}

/// The nodes whose edges, half of them or more, disagree with the network by more than
/// `allowance_ns` beyond `NOISE_SIGMAS` of their own sigma: an asymmetry beyond
/// the allowance (or a timestamp fault) the loops show. `edge_sigma_ns` in the order of
/// `obs` and of `solution.edges`.
pub fn nodes_beyond_allowance(num_nodes: usize, obs: &[EdgeObs], edge_sigma_ns: &[f64], solution: &NetworkSolution, allowance_ns: f64) -> Vec<NodeId> {
    // Per node: (edges judged, edges beyond).
    let mut count = vec![(0usize, 0usize); num_nodes];
    for (i, (e, v)) in obs.iter().zip(&solution.edges).enumerate() {
        // Edges the network rejected for disagreeing count too (their residual is taken at
        // the final solution): a node whose paths all disagree loses them one by one, and
        // its estimate then rests on the few left, which disagree as much.
        if v.rejected == Some(RejectReason::Implausible) || !v.offset_residual_ns.is_finite() {
            continue;
        }
        let sigma = edge_sigma_ns.get(i).copied().filter(|s| s.is_finite()).unwrap_or(0.0);
        let beyond = v.offset_residual_ns.abs() > allowance_ns + NOISE_SIGMAS * sigma;
        for end in [e.src, e.dst] {
            if let Some(c) = count.get_mut(end as usize) {
                c.0 += 1;
                c.1 += beyond as usize;
            }
        }
    }
    (0..num_nodes).filter(|&i| count[i].0 >= MIN_EDGES && 2 * count[i].1 >= count[i].0).map(|i| i as NodeId).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::network;

    /// Half the difference of two uniforms on +-A has standard deviation A / sqrt(6), and
    /// independent errors add in quadrature; the reference gets nothing added.
    #[test]
    fn the_allowance_adds_half_a_bias_difference_in_quadrature() {
        assert!((allowance_sigma_ns(600.0) - 244.948_974_278_317_8).abs() < 1e-9);
        // 40 ns statistical, 100 ns allowance: sqrt(40² + 100²/6) = 57.16 ns.
        assert!((total_sigma_ns(40.0, 100.0, false) - (1600.0f64 + 10_000.0 / 6.0).sqrt()).abs() < 1e-9);
        assert_eq!(total_sigma_ns(40.0, 0.0, false), 40.0);
        assert_eq!(total_sigma_ns(0.0, 100.0, true), 0.0);
        // Monte Carlo of the stated model: the node's and the reference's biases uniform
        // within +-A, plus Gaussian noise; 2 total sigmas cover ~95%.
        let mut noise = crate::estimate::test_noise::XorShift::new(0x853c_49e6_748f_ea9b);
        let mut uniform = move || noise.open_unit();
        let (stat, a) = (40.0, 100.0);
        let sigma = total_sigma_ns(stat, a, false);
        let n = 20_000;
        let mut sum2 = 0.0;
        let mut within = 0;
        for _ in 0..n {
            let gauss = (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos();
            let bias = 0.5 * (a * (2.0 * uniform() - 1.0) - a * (2.0 * uniform() - 1.0));
            sum2 += bias * bias;
            within += ((bias + stat * gauss).abs() <= 2.0 * sigma) as usize;
        }
        let bias_sd = (sum2 / n as f64).sqrt();
        assert!((bias_sd / allowance_sigma_ns(a) - 1.0).abs() < 0.02, "{bias_sd}");
        let coverage = within as f64 / n as f64;
        assert!((0.95..=0.97).contains(&coverage), "{coverage}");
    }

    /// A ring with chords of 16 nodes, every edge within 50 ns of the truth; node 5's
    /// edges carry +-2 us alternately (an asymmetry that differs by peer). Node 5 and
    /// only node 5 is beyond a 100 ns allowance; with a 5 us allowance none is.
    #[test]
    fn a_node_whose_paths_disagree_beyond_the_allowance_is_named() {
        let n = 16u32;
        let truth = |i: u32| i as f64 * 1_000.0;
        let mut obs = Vec::new();
        // Node 5's view of its paths: half put it 2 us ahead, half 2 us behind. The solve
        // follows one half and rejects the other; which half is right, no data can say.
        let (mut k, mut at_5) = (0, 0);
        for i in 0..n {
            for stride in [1, 3, 7] {
                let j = (i + stride) % n;
                let noise = if k % 2 == 0 { 30.0 } else { -30.0 };
                k += 1;
                let mut asym = 0.0;
                if i == 5 || j == 5 {
                    let ahead = if at_5 % 2 == 0 { 2_000.0 } else { -2_000.0 };
                    at_5 += 1;
                    // theta = S_dst - S_src: node 5 ahead raises it as dst, lowers it as src.
                    asym = if j == 5 { ahead } else { -ahead };
                }
                obs.push(EdgeObs { src: i, dst: j, alpha: 0.0, beta_ns: truth(j) - truth(i) + noise + asym, weight: 1.0 });
            }
        }
        let sol = network::solve(n, 0, &obs, true);
        let sigmas = vec![20.0; obs.len()];
        assert_eq!(nodes_beyond_allowance(n as usize, &obs, &sigmas, &sol, 100.0), vec![5]);
        assert!(nodes_beyond_allowance(n as usize, &obs, &sigmas, &sol, 5_000.0).is_empty());
    }
}
