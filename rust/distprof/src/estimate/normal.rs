//! The normal matrix of the network solve, M = A^T W A, applied without forming it
//! (matrix-free over the edge list), and Jacobi-preconditioned conjugate gradients on it
//! for several right-hand sides at once.
//!
//! A row of A is one edge's equation, value(dst) - k value(src), over the unknowns (the
//! reached nodes but the reference, which is fixed at zero). With k = 1 + alpha within
//! 1e-3 of 1, M is the weighted graph Laplacian with the reference's row and column
//! removed: positive definite when every unknown is connected to the reference, with
//! O(edges) entries, while its inverse is dense (the probe graph is an expander, so a
//! Cholesky factor fills in too). Hence iterations, never a factorisation.
//!
//! Why Jacobi is enough: scaled by the degrees, an expander's Laplacian has its spectrum
//! in a narrow band away from zero, except one eigenvalue of order deg(ref) / N (the
//! near-constant vector, held to zero by the reference's edges alone), and conjugate
//! gradients remove one isolated eigenvalue in an iteration or two. The iteration count
//! therefore barely grows with N (docs/estimation.md has the measured counts); a
//! spanning-tree preconditioner, which is what helps on grids and paths, would trade that
//! band for the tree's stretch, which grows with N.
//!
//! Several right-hand sides run in lockstep, each with its own step sizes, sharing one
//! pass over the edges per iteration: the two of the solve (offsets, rates) and the
//! random projections of `variance`. Block vectors are row-major, unknown by unknown:
//! `x[u * cols + j]` is column j of unknown u.

/// Edges of the normal matrix. Endpoints index the unknowns; `ground` (= the number of
/// unknowns) stands for the reference, whose value is zero: block vectors carry one
/// extra, always-zero row for it, so the edge loop needs no branch.
#[derive(Debug, Clone)]
pub struct NormalMatrix {
    src: Vec<u32>,
    dst: Vec<u32>,
    k: Vec<f64>,
    w: Vec<f64>,
    diag: Vec<f64>,
    unknowns: usize,
}

/// One edge's equation value(dst) - k value(src) with weight w; None: the reference.
#[derive(Debug, Clone, Copy)]
pub struct NormalRow {
    pub src: Option<usize>,
    pub dst: Option<usize>,
    pub k: f64,
    pub w: f64,
}

impl NormalMatrix {
    /// Rows with neither end an unknown are dropped (they constrain nothing), so row
    /// indices follow the caller's only when every row has an unknown end.
    pub fn new(unknowns: usize, rows: impl IntoIterator<Item = NormalRow>) -> Self {
        let ground = unknowns as u32;
        let mut m = Self { src: Vec::new(), dst: Vec::new(), k: Vec::new(), w: Vec::new(), diag: vec![0.0; unknowns + 1], unknowns };
        for r in rows {
            // A row between two reference ends would be a self-loop of the reference.
            if r.src.is_none() && r.dst.is_none() {
                continue;
            }
            let (a, b) = (r.src.map_or(ground, |a| a as u32), r.dst.map_or(ground, |b| b as u32));
            m.diag[a as usize] += r.w * r.k * r.k;
            m.diag[b as usize] += r.w;
            m.src.push(a);
            m.dst.push(b);
            m.k.push(r.k);
            m.w.push(r.w);
        }
        m.diag[unknowns] = 0.0;
        m
    }

    pub fn unknowns(&self) -> usize {
        self.unknowns
    }

    /// Rows, in the order given (all have an unknown end).
    pub fn rows(&self) -> usize {
        self.src.len()
    }

    /// Row r: block-vector index of its source and destination (the ground row for the
    /// reference), its k and its weight.
    pub fn row(&self, r: usize) -> (usize, usize, f64, f64) {
        (self.src[r] as usize, self.dst[r] as usize, self.k[r], self.w[r])
    }

    /// A^T W y for a block of per-row values `y[r * cols + j]`, into a block vector
    /// (with the ground row).
    pub fn scatter(&self, y: &[f64], cols: usize, out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for r in 0..self.rows() {
            let (a, b, k, w) = self.row(r);
            for j in 0..cols {
                let wy = w * y[r * cols + j];
                out[b * cols + j] += wy;
                out[a * cols + j] -= k * wy;
            }
        }
        self.zero_ground(out, cols);
    }

    fn zero_ground(&self, v: &mut [f64], cols: usize) {
        v[self.unknowns * cols..].iter_mut().for_each(|x| *x = 0.0);
    }

    /// out = M x for a block of `cols` columns.
    pub fn apply(&self, x: &[f64], cols: usize, out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for r in 0..self.rows() {
            let (a, b) = (self.src[r] as usize * cols, self.dst[r] as usize * cols);
            let (k, w) = (self.k[r], self.w[r]);
            let (xa, xb) = (&x[a..a + cols], &x[b..b + cols]);
            // Two disjoint rows of `out` (a != b: no edge joins a node to itself).
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            let (left, right) = out.split_at_mut(hi);
            let (out_lo, out_hi) = (&mut left[lo..lo + cols], &mut right[..cols]);
            let (oa, ob) = if a < b { (out_lo, out_hi) } else { (out_hi, out_lo) };
            for j in 0..cols {
                let v = w * (xb[j] - k * xa[j]);
                ob[j] += v;
                oa[j] -= k * v;
            }
        }
        self.zero_ground(out, cols);
    }

    /// Solves M x = b for every column of the block `b` (with its ground row), each column
    /// until its residual is within `rel_tol` of its right-hand side's norm. Returns the
    /// solution (ground row zero) and the iterations run.
    pub fn solve(&self, b: &[f64], cols: usize, rel_tol: f64) -> (Vec<f64>, usize) {
        let n = self.unknowns + 1;
        let precond = |r: &[f64], z: &mut [f64]| {
            for (u, d) in self.diag.iter().enumerate() {
                let inv = if *d > 0.0 { 1.0 / d } else { 0.0 };
                for j in 0..cols {
                    z[u * cols + j] = r[u * cols + j] * inv;
                }
            }
        };
        let col_dots = |x: &[f64], y: &[f64]| -> Vec<f64> {
            let mut s = vec![0.0; cols];
            for (xu, yu) in x.chunks_exact(cols).zip(y.chunks_exact(cols)) {
                for j in 0..cols {
                    s[j] += xu[j] * yu[j];
                }
            }
            s
        };
        let mut x = vec![0.0; n * cols];
        let mut r = b.to_vec();
        self.zero_ground(&mut r, cols);
        let tol2: Vec<f64> = col_dots(&r, &r).iter().map(|b2| b2 * rel_tol * rel_tol).collect();
        let mut active: Vec<bool> = tol2.iter().map(|t| *t > 0.0).collect();
        let mut z = vec![0.0; n * cols];
        precond(&r, &mut z);
        let mut p = z.clone();
        let mut rz = col_dots(&r, &z);
        let mut ap = vec![0.0; n * cols];
        // CG ends within `unknowns` steps in exact arithmetic; rounding can need more.
        let max_iter = 10 * self.unknowns + 100;
        let mut it = 0;
        while active.iter().any(|a| *a) && it < max_iter {
            it += 1;
            self.apply(&p, cols, &mut ap);
            let pap = col_dots(&p, &ap);
            let step: Vec<f64> = (0..cols)
                .map(|j| {
                    if active[j] && pap[j] > 0.0 {
                        rz[j] / pap[j]
                    } else {
                        // Converged, or no longer descending (rounding at convergence).
                        active[j] = false;
                        0.0
                    }
                })
                .collect();
            let mut r2 = vec![0.0; cols];
            for i in 0..n * cols {
                let j = i % cols;
                x[i] += step[j] * p[i];
                r[i] -= step[j] * ap[i];
                r2[j] += r[i] * r[i];
            }
            for j in 0..cols {
                active[j] &= r2[j] > tol2[j];
            }
            precond(&r, &mut z);
            let rz_new = col_dots(&r, &z);
            let beta: Vec<f64> = (0..cols).map(|j| if active[j] && rz[j] > 0.0 { rz_new[j] / rz[j] } else { 0.0 }).collect();
            rz = rz_new;
            for i in 0..n * cols {
                p[i] = z[i] + beta[i % cols] * p[i];
            }
        }
        (x, it)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of `n` unknowns plus the reference, with chords of stride 7: every solve
    /// checked against M x = b itself.
    fn ring(n: usize) -> NormalMatrix {
        let node = |i: usize| (i % (n + 1)).checked_sub(1);
        let rows = (0..=n).flat_map(|i| {
            [(i, i + 1, 1.0 + 1e-4, 1.0), (i, i + 7, 1.0 - 2e-4, 0.25 + (i % 3) as f64)].map(|(a, b, k, w)| NormalRow {
                src: node(a),
                dst: node(b),
                k,
                w,
            })
        });
        NormalMatrix::new(n, rows.collect::<Vec<_>>())
    }

    /// Conjugate gradients reach the tolerance on every column (each with its own
    /// scale), and the result satisfies the equations to it.
    #[test]
    fn block_solve_converges_on_every_column() {
        let m = ring(300);
        let cols = 3;
        let mut b = vec![0.0; (m.unknowns() + 1) * cols];
        for u in 0..m.unknowns() {
            b[u * cols] = ((u * 37) % 11) as f64 - 5.0;
            b[u * cols + 1] = 1e6 * (u as f64).sin();
            b[u * cols + 2] = if u == 150 { 1.0 } else { 0.0 };
        }
        let tol = 1e-9;
        let (x, it) = m.solve(&b, cols, tol);
        let mut mx = vec![0.0; b.len()];
        m.apply(&x, cols, &mut mx);
        for j in 0..cols {
            let norm = |v: &[f64]| v.iter().skip(j).step_by(cols).map(|a| a * a).sum::<f64>().sqrt();
            let diff: Vec<f64> = mx.iter().zip(&b).map(|(a, b)| a - b).collect();
            // The recursive residual drifts from the true one by rounding: a factor 10 of slack.
            assert!(norm(&diff) <= 10.0 * tol * norm(&b), "column {j}: {} vs {}", norm(&diff), norm(&b));
        }
        // Far fewer steps than unknowns: the chords make the graph well connected.
        assert!(it < 150, "{it} iterations");
        assert!(x[m.unknowns() * cols..].iter().all(|v| *v == 0.0), "the ground row stays zero");
    }

    /// A zero right-hand side needs no iteration and gives zero.
    #[test]
    fn zero_right_hand_side_is_zero() {
        let m = ring(20);
        let (x, it) = m.solve(&vec![0.0; 21], 1, 1e-8);
        assert_eq!(it, 0);
        assert!(x.iter().all(|v| *v == 0.0));
    }
}
