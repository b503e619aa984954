//! NTP-style baseline: trust the probe with the smallest round trip, whose offset error is
//! at most half of it. The offset comes from the best probe of each half-window and the
//! drift from the line through the two. For comparison only.

use super::hull::{FitError, Line};
use super::points::Probe;

pub fn fit(probes: &[Probe]) -> Result<Line, FitError> {
    let best = |half: &mut dyn Iterator<Item = &Probe>| {
        half.filter(|p| p.rtt_ns().is_finite())
            .min_by(|a, b| a.rtt_ns().total_cmp(&b.rtt_ns()))
            .map(Probe::mid)
    };
    let first = best(&mut probes.iter().filter(|p| p.fwd.x_ns < 0.0));
    let second = best(&mut probes.iter().filter(|p| p.fwd.x_ns >= 0.0));
    match (first, second) {
        (Some(a), Some(b)) => Line::through(a, b),
        _ => Err(FitError::TooFewPoints),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::points::Point;

    fn probe(x: f64, theta: f64, d_fwd: f64, d_rev: f64) -> Probe {
        Probe { fwd: Point { x_ns: x, y_ns: theta + d_fwd }, rev: Point { x_ns: x, y_ns: theta - d_rev } }
    }

    #[test]
    fn picks_min_rtt_probe_per_half() {
        // theta(x) = 50 + 0.01 x; the min-RTT probes are symmetric, the others are not.
        let t = |x: f64| 50.0 + 0.01 * x;
        let probes = [
            probe(-1000.0, t(-1000.0), 500.0, 10.0),
            probe(-800.0, t(-800.0), 5.0, 5.0),
            probe(600.0, t(600.0), 7.0, 7.0),
            probe(900.0, t(900.0), 10.0, 900.0),
        ];
        let line = fit(&probes).expect("fit");
        assert!((line.slope - 0.01).abs() < 1e-12);
        assert!((line.intercept_ns - 50.0).abs() < 1e-9);
        assert_eq!(fit(&probes[..2]), Err(FitError::TooFewPoints));
    }
}
