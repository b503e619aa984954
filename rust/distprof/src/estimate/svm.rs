//! The reference estimator: a linear soft-margin SVM (linfa-svm) separating forward (+1)
//! from reverse (-1) points. Features are standardized ((v - mean) / std): on raw
//! nanoseconds the solver does not converge (measured on this project's machines). linfa-svm builds a dense
//! N x N kernel, so time and memory grow as N²: use it to check the hull, not online.

use super::hull::{FitError, Line};
use super::points::Point;
use linfa::prelude::*;
use linfa_svm::Svm;
use ndarray::{Array1, Array2};

fn mean_std(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = v.clone().count().max(1) as f64;
    let mean = v.clone().sum::<f64>() / n;
    let var = v.map(|a| (a - mean) * (a - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

pub fn fit(fwd: &[Point], rev: &[Point], c: f64) -> Result<Line, FitError> {
    if fwd.len() < 2 || rev.len() < 2 {
        return Err(FitError::TooFewPoints);
    }
    let all = fwd.iter().chain(rev);
    let (mx, sx) = mean_std(all.clone().map(|p| p.x_ns));
    let (my, sy) = mean_std(all.clone().map(|p| p.y_ns));
    if !(sx > 0.0 && sy > 0.0 && sx.is_finite() && sy.is_finite()) {
        return Err(FitError::Degenerate);
    }
    let n = fwd.len() + rev.len();
    let mut records = Array2::<f64>::zeros((n, 2));
    let mut targets = Array1::<bool>::from_elem(n, false);
    for (i, p) in all.enumerate() {
        records[[i, 0]] = (p.x_ns - mx) / sx;
        records[[i, 1]] = (p.y_ns - my) / sy;
        targets[i] = i < fwd.len();
    }
    let dataset = Dataset::new(records, targets);
    let model: Svm<f64, bool> = Svm::<f64, bool>::params()
        .pos_neg_weights(c, c)
        .linear_kernel()
        .fit(&dataset)
        .map_err(|_| FitError::Solver)?;
    // Decision w0 x' + w1 y' - rho = 0 in standardized units.
    let w0 = model.weighted_sum(&ndarray::arr1(&[1.0, 0.0]));
    let w1 = model.weighted_sum(&ndarray::arr1(&[0.0, 1.0]));
    if w1 == 0.0 || !w0.is_finite() || !w1.is_finite() {
        return Err(FitError::Solver);
    }
    // y' = (rho - w0 x') / w1, then back to nanoseconds.
    let slope = -(w0 / w1) * sy / sx;
    let y_at = |x: f64| my + sy * (model.rho - w0 * (x - mx) / sx) / w1;
    let line = Line { slope, intercept_ns: y_at(0.0) };
    if line.slope.is_finite() && line.intercept_ns.is_finite() {
        Ok(line)
    } else {
        Err(FitError::Solver)
    }
}
