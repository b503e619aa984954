//! One line per edge and window with the configured estimator.

use super::hull::{self, FitError, Hulls, Line};
use super::points::EdgePoints;
use crate::config::EstimatorKind;

/// The line of one edge plus the hulls the bound needs (computed for every estimator:
/// the bound comes from the data, not from the estimator).
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeLine {
    /// theta(x) - y_origin, x from the window midpoint in the src clock.
    pub line: Line,
    pub hulls: Hulls,
    /// Smallest distance of a pure point to the hull line (negative: overlap).
    pub margin_ns: f64,
}

pub fn fit_edge(kind: EstimatorKind, e: &EdgePoints, svm_c: f64) -> Result<EdgeLine, FitError> {
    let exact = hull::fit(&e.fwd, &e.rev);
    let line = match kind {
        EstimatorKind::Hull => exact.as_ref().map(|f| f.line).map_err(|err| *err)?,
        EstimatorKind::Ntp => super::ntp::fit(&e.probes)?,
        EstimatorKind::TwoPoint => super::two_point::fit(&e.probes)?,
        EstimatorKind::Svm => svm_line(e, svm_c)?,
    };
    let (hulls, margin_ns) = match exact {
        Ok(f) => (f.hulls, f.margin_ns),
        Err(_) => (Hulls::of(&e.fwd, &e.rev), f64::NAN),
    };
    Ok(EdgeLine { line, hulls, margin_ns })
}

#[cfg(feature = "svm")]
fn svm_line(e: &EdgePoints, c: f64) -> Result<Line, FitError> {
    super::svm::fit(&e.fwd, &e.rev, c)
}

#[cfg(not(feature = "svm"))]
fn svm_line(_: &EdgePoints, _: f64) -> Result<Line, FitError> {
    Err(FitError::Solver)
}
