//! Variances of the network solve from the edge sigmas: every node's offset variance and
//! every edge's residual variance, at a cost near-linear in the edges.
//!
//! The solve (`network`) is weighted least squares, x = M^-1 A^T W beta with
//! M = A^T W A (`normal`), and its weights w_e need not be 1 / sigma_e² (they come from
//! the worst-case bounds). With independent edge errors of sigma_e, S = diag(sigma²):
//!
//! - Cov(x) = M^-1 A^T W S W A M^-1 = Z Z^T with Z = M^-1 A^T W S^1/2, so Var(x_i) is the
//!   squared norm of row i of Z. With w = 1 / sigma² it is diag(M^-1): for the grounded
//!   Laplacian, the effective resistance between node i and the reference.
//! - The residuals r = (I - A M^-1 A^T W) err have Var(r_e) = the squared norm of row e
//!   of P = S^1/2 - A Z (what the Birge ratio compares the residuals with).
//!
//! Z is dense (the probe graph is an expander: M^-1 has no small entries) and takes one
//! solve per node. Random projection keeps row norms instead (Johnson-Lindenstrauss, as
//! Spielman and Srivastava estimate effective resistances): with Q a PROBES x edges matrix
//! of independent ±1 / sqrt(PROBES), the squared norm of a row of Z Q^T is an unbiased
//! estimate of that of Z, with a relative standard deviation of at most sqrt(2 / PROBES)
//! (less when one entry dominates the row, as the edge's own term does in P). And
//! Z Q^T = M^-1 (A^T W S^1/2 Q^T) is PROBES solves with one matrix (one block solve),
//! P Q^T = S^1/2 Q^T - A Z Q^T one more pass over the edges. A window with at most PROBES
//! edges takes Q = I: the same formulas, exact.
//!
//! Not Hutchinson's estimator of diag(M^-1) (probe z, take z ∘ M^-1 z): its error is
//! the off-diagonal mass of each row of M^-1, large for a grounded graph, where every
//! node's offset shares the error of the paths to the reference (the tests measure it).

use super::normal::NormalMatrix;
use crate::topology::SplitMix64;

/// Random projections per window. A node's variance is off by at most sqrt(2 / 64) = 18%
/// (1 sd), its sigma by half that, 9%; for 2-sigma coverage that noise costs ~0.003
/// (the coverage's second derivative in the sigma's relative error is -0.86). The cost is
/// this many solves with one matrix, sharing each pass over the edges.
pub const PROBES: usize = 64;
/// The projection's signs: fixed, so that an estimate is reproducible.
const PROBE_SEED: u64 = 0x6469_7374_7072_6f66;
/// Each projected solve stops at this relative residual: its error is then far below
/// the projection's own (percents), measured against the exact covariance in the tests.
const PROBE_CG_REL_TOL: f64 = 1e-6;

/// The variances of one window's solve, in ns².
#[derive(Debug, Clone, PartialEq)]
pub struct Variances {
    /// Per unknown of the matrix (the reference and unreached nodes are not unknowns).
    pub node_var_ns2: Vec<f64>,
    /// Per row of the matrix: the variance of the edge's residual.
    pub residual_var_ns2: Vec<f64>,
    /// Exact (at most `PROBES` rows) rather than projected.
    pub exact: bool,
    pub cg_iterations: usize,
}

/// The variances of the solve with matrix `m` when row r's error has sd `sigma_ns[r]`.
pub fn variances(m: &NormalMatrix, sigma_ns: &[f64]) -> Variances {
    let rows = m.rows();
    let exact = rows <= PROBES;
    let q = if exact { rows } else { PROBES };
    // Entry (row r, probe j) of sqrt(q) Q^T: ±1, or the identity when exact.
    let signs = |r: usize, out: &mut [f64]| {
        if exact {
            out.iter_mut().enumerate().for_each(|(j, v)| *v = (j == r) as u8 as f64);
            return;
        }
        let mut rng = SplitMix64::new(PROBE_SEED.wrapping_add(r as u64));
        for chunk in out.chunks_mut(64) {
            let bits = rng.next_u64();
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = if bits >> j & 1 == 1 { 1.0 } else { -1.0 };
            }
        }
    };
    let scale = if exact { 1.0 } else { 1.0 / q as f64 };
    let n = m.unknowns() + 1;
    if q == 0 {
        return Variances { node_var_ns2: vec![0.0; n - 1], residual_var_ns2: Vec::new(), exact, cg_iterations: 0 };
    }
    // A^T W S^1/2 (sqrt(q) Q^T), unknown-major.
    let mut rhs = vec![0.0; n * q];
    let mut s = vec![0.0; q];
    for r in 0..rows {
        let (a, b, k, w) = m.row(r);
        signs(r, &mut s);
        let ws = w * sigma_ns[r];
        for j in 0..q {
            rhs[b * q + j] += ws * s[j];
            rhs[a * q + j] -= k * ws * s[j];
        }
    }
    let (z, cg_iterations) = m.solve(&rhs, q, PROBE_CG_REL_TOL);
    let node_var_ns2 = z.chunks_exact(q).take(n - 1).map(|zu| scale * zu.iter().map(|v| v * v).sum::<f64>()).collect();
    let residual_var_ns2 = (0..rows)
        .map(|r| {
            let (a, b, k, _) = m.row(r);
            signs(r, &mut s);
            let p = (0..q).map(|j| sigma_ns[r] * s[j] - (z[b * q + j] - k * z[a * q + j]));
            scale * p.map(|v| v * v).sum::<f64>()
        })
        .collect();
    Variances { node_var_ns2, residual_var_ns2, exact, cg_iterations }
}

/// The same variances from the dense inverse of M: cubic in the unknowns, the reference
/// the projection is measured against (tests, `distprof bench accuracy --solve-curve`).
/// None when M is not positive definite (an unknown not connected to the reference).
pub fn dense_variances(m: &NormalMatrix, sigma_ns: &[f64]) -> Option<Variances> {
    let u = m.unknowns();
    let mut dense = vec![0.0f64; u * u];
    let rows: Vec<_> = (0..m.rows()).map(|r| m.row(r)).collect();
    // Terms of a row: (unknown, coefficient), the reference's left out.
    let terms = |&(a, b, k, _): &(usize, usize, f64, f64)| [(b, 1.0), (a, -k)].into_iter().filter(move |t| t.0 < u);
    for row in &rows {
        for (p, cp) in terms(row) {
            for (q, cq) in terms(row) {
                dense[p * u + q] += row.3 * cp * cq;
            }
        }
    }
    let inv = spd_inverse(dense, u)?;
    // g_r = M^-1 a_r (a column per row), then Var(x_i) = sum_r (w_r sigma_r g_r[i])² and
    // Var(res_e) = sum_r (sigma_r [e == r] - w_r sigma_r a_e^T g_r)².
    let g: Vec<Vec<f64>> = rows
        .iter()
        .map(|row| (0..u).map(|i| terms(row).map(|(p, c)| inv[i * u + p] * c).sum()).collect())
        .collect();
    let mut node_var_ns2 = vec![0.0; u];
    for (r, row) in rows.iter().enumerate() {
        let ws = row.3 * sigma_ns[r];
        for (v, gi) in node_var_ns2.iter_mut().zip(&g[r]) {
            *v += (ws * gi).powi(2);
        }
    }
    let residual_var_ns2 = rows
        .iter()
        .enumerate()
        .map(|(e, row_e)| {
            rows.iter()
                .enumerate()
                .map(|(r, row_r)| {
                    let ae_g: f64 = terms(row_e).map(|(p, c)| c * g[r][p]).sum();
                    let own = if e == r { sigma_ns[r] } else { 0.0 };
                    (own - row_r.3 * sigma_ns[r] * ae_g).powi(2)
                })
                .sum()
        })
        .collect();
    Some(Variances { node_var_ns2, residual_var_ns2, exact: true, cg_iterations: 0 })
}

/// How far the projected variances (`variances`) lie from the exact ones
/// (`dense_variances`), in the node sigmas (square roots) and in the sum of the residual
/// variances (what the Birge ratio divides by).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProjectionError {
    /// Root mean square and largest |projected / exact - 1| of the node sigmas.
    pub sigma_rms_rel: f64,
    pub sigma_max_rel: f64,
    /// Mean of projected / exact - 1 of the node sigmas (the projection is unbiased in the
    /// variance, so this is ~ -rms² / 2).
    pub sigma_mean_rel: f64,
    /// projected / exact - 1 of the summed residual variances.
    pub residual_sum_rel: f64,
}

/// The projection's error on one system; None when the exact inverse does not exist.
pub fn projection_error(m: &NormalMatrix, sigma_ns: &[f64]) -> Option<ProjectionError> {
    let exact = dense_variances(m, sigma_ns)?;
    let est = variances(m, sigma_ns);
    let rel: Vec<f64> = est
        .node_var_ns2
        .iter()
        .zip(&exact.node_var_ns2)
        .filter(|(_, x)| **x > 0.0)
        .map(|(e, x)| (e / x).sqrt() - 1.0)
        .collect();
    let n = rel.len().max(1) as f64;
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    Some(ProjectionError {
        sigma_rms_rel: (rel.iter().map(|r| r * r).sum::<f64>() / n).sqrt(),
        sigma_max_rel: rel.iter().fold(0.0, |a: f64, r| a.max(r.abs())),
        sigma_mean_rel: sum(&rel) / n,
        residual_sum_rel: sum(&est.residual_var_ns2) / sum(&exact.residual_var_ns2) - 1.0,
    })
}

/// The inverse of a symmetric positive definite m x m matrix (row-major) by Cholesky;
/// None when it is not positive definite.
fn spd_inverse(mut a: Vec<f64>, m: usize) -> Option<Vec<f64>> {
    // Cholesky, lower triangle in place.
    for j in 0..m {
        let d = a[j * m + j] - (0..j).map(|k| a[j * m + k] * a[j * m + k]).sum::<f64>();
        if !(d > 0.0) {
            return None;
        }
        let d = d.sqrt();
        a[j * m + j] = d;
        for i in j + 1..m {
            let s = a[i * m + j] - (0..j).map(|k| a[i * m + k] * a[j * m + k]).sum::<f64>();
            a[i * m + j] = s / d;
        }
    }
    // L^-1 (lower), column by column: L z = e_j, z zero above j.
    let mut linv = vec![0.0; m * m];
    for j in 0..m {
        linv[j * m + j] = 1.0 / a[j * m + j];
        for i in j + 1..m {
            let s: f64 = (j..i).map(|k| a[i * m + k] * linv[k * m + j]).sum();
            linv[i * m + j] = -s / a[i * m + i];
        }
    }
    // A^-1 = L^-T L^-1: entry (i, j) = sum over k >= max(i, j) of linv[k][i] linv[k][j].
    let mut inv = vec![0.0; m * m];
    for k in 0..m {
        let row = &linv[k * m..k * m + k + 1];
        for i in 0..=k {
            let ri = row[i];
            if ri == 0.0 {
                continue;
            }
            for j in 0..=i {
                inv[i * m + j] += ri * row[j];
            }
        }
    }
    for i in 0..m {
        for j in 0..i {
            inv[j * m + i] = inv[i * m + j];
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::normal::NormalRow;
    use crate::topology::{build_probe_graph, SplitMix64};

    /// Weights are relative (the solve scales them to mean 1): these keep M's entries near
    /// 1. With w = WEIGHT_SCALE / sigma², Cov = WEIGHT_SCALE M^-1.
    const WEIGHT_SCALE: f64 = 1e4;

    /// Relative sd of a node sigma from the projection: half the variance's sqrt(2 / q).
    fn sigma_sd() -> f64 {
        (2.0 / PROBES as f64).sqrt() / 2.0
    }

    /// The real probe graph (ring + random chords, out-degree 8) over `n` nodes, node 0 the
    /// reference; per edge a rate within ±50 ppm, a sigma of 50-500 ns and, unless
    /// `inverse_variance`, a weight from an unrelated 100-1,000 ns (as the bounds give it).
    fn system(n: u32, inverse_variance: bool) -> (NormalMatrix, Vec<f64>) {
        let mut rng = SplitMix64::new(7);
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let unknown = |i: u32| (i as usize).checked_sub(1);
        let mut rows = Vec::new();
        let mut sigma = Vec::new();
        for (src, outs) in build_probe_graph(n, 8, 1).iter().enumerate() {
            for &dst in outs {
                let s = uniform(50.0, 500.0);
                let u = if inverse_variance { s } else { uniform(100.0, 1000.0) };
                rows.push(NormalRow { src: unknown(src as u32), dst: unknown(dst), k: 1.0 + uniform(-5e-5, 5e-5), w: WEIGHT_SCALE / (u * u) });
                sigma.push(s);
            }
        }
        (NormalMatrix::new(n as usize - 1, rows), sigma)
    }

    /// At 256 nodes (2,048 edges) the projected sigmas are the exact ones within the
    /// projection's own error: rms over the nodes within sqrt(2/64)/2 = 8.8% (the bound; a
    /// ±1 projection does better) with 25% margin, the worst node within 4.5 of those sds
    /// (255 nodes: the chance of one beyond is ~0.2%), and the summed residual variances
    /// (the Birge ratio's denominator, averaged over ~1,800 loops) within 3%, five times
    /// their sd of sqrt(2 / (64 * 1,800)) = 0.4%.
    #[test]
    fn projected_variances_are_the_exact_ones_within_the_projection_error() {
        let (m, sigma) = system(256, false);
        let e = projection_error(&m, &sigma).expect("connected");
        eprintln!("{e:?}");
        assert!(e.sigma_rms_rel <= 1.25 * sigma_sd(), "{e:?}");
        assert!(e.sigma_max_rel <= 4.5 * sigma_sd(), "{e:?}");
        assert!(e.residual_sum_rel.abs() <= 0.03, "{e:?}");
        // Deterministic: the same signs every time.
        assert_eq!(variances(&m, &sigma), variances(&m, &sigma));
    }

    /// With at most `PROBES` edges the projection is the identity: exact to rounding.
    #[test]
    fn few_edges_are_exact() {
        let (m, sigma) = system(8, false);
        assert!(m.rows() <= PROBES);
        let (est, exact) = (variances(&m, &sigma), dense_variances(&m, &sigma).expect("connected"));
        assert!(est.exact);
        for (a, b) in est.node_var_ns2.iter().zip(&exact.node_var_ns2).chain(est.residual_var_ns2.iter().zip(&exact.residual_var_ns2)) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    /// Why not Hutchinson: estimating diag(M^-1) (weights 1 / sigma², where it is the
    /// variance) from z ∘ M^-1 z with as many ±1 probes has an error set by each row's
    /// off-diagonal mass, which a grounded expander's inverse is full of (every node shares
    /// the error of the paths to the reference), so it grows as sqrt(N): measured rms 0.64
    /// at 128 nodes and 0.93 at 256, against the projection's 0.15 and 0.17. Asserted:
    /// more than three times the projection's at 256 nodes.
    #[test]
    fn hutchinson_is_far_worse_on_a_grounded_graph() {
        let (m, sigma) = system(256, true);
        let exact = dense_variances(&m, &sigma).expect("connected").node_var_ns2;
        let projected = variances(&m, &sigma).node_var_ns2;
        let u = m.unknowns();
        let mut z = vec![0.0; (u + 1) * PROBES];
        let mut rng = SplitMix64::new(11);
        for row in z.chunks_mut(PROBES).take(u) {
            let bits = rng.next_u64();
            row.iter_mut().enumerate().for_each(|(j, v)| *v = if bits >> j & 1 == 1 { 1.0 } else { -1.0 });
        }
        let (mz, _) = m.solve(&z, PROBES, PROBE_CG_REL_TOL);
        let hutchinson: Vec<f64> = (0..u)
            .map(|i| WEIGHT_SCALE * (0..PROBES).map(|j| z[i * PROBES + j] * mz[i * PROBES + j]).sum::<f64>() / PROBES as f64)
            .collect();
        let rms = |est: &[f64]| (est.iter().zip(&exact).map(|(e, x)| (e / x - 1.0).powi(2)).sum::<f64>() / u as f64).sqrt();
        let (h, p) = (rms(&hutchinson), rms(&projected));
        eprintln!("variance rms relative error: hutchinson {h:.3}, projection {p:.3}");
        assert!(p <= 1.25 * (2.0 / PROBES as f64).sqrt(), "projection {p}");
        assert!(h > 3.0 * p, "hutchinson {h}, projection {p}");
    }
}
