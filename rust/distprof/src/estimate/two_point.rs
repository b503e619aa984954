//! Score-P-style baseline: one round-trip offset measurement at the start of the window
//! and one at the end, linear interpolation in between. For comparison only.

use super::hull::{FitError, Line};
use super::points::Probe;

/// `probes` sorted by x (as `points` gives them).
pub fn fit(probes: &[Probe]) -> Result<Line, FitError> {
    let valid: Vec<_> = probes.iter().map(Probe::mid).filter(|p| p.x_ns.is_finite() && p.y_ns.is_finite()).collect();
    match (valid.first(), valid.last()) {
        (Some(&a), Some(&b)) => Line::through(a, b),
        _ => Err(FitError::TooFewPoints),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::points::Point;

    #[test]
    fn interpolates_first_and_last() {
        let p = |x: f64, y: f64| Probe { fwd: Point { x_ns: x, y_ns: y + 4.0 }, rev: Point { x_ns: x, y_ns: y - 4.0 } };
        let line = fit(&[p(-100.0, 10.0), p(0.0, 99.0), p(100.0, 30.0)]).expect("fit");
        assert!((line.slope - 0.1).abs() < 1e-12);
        assert!((line.intercept_ns - 20.0).abs() < 1e-9);
        assert_eq!(fit(&[p(0.0, 1.0)]), Err(FitError::TooFewPoints));
    }
}
