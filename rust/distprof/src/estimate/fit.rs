//! One line per edge and window with the configured estimator.
//!
//! Which points: every pure pair's, or every packet of every valid pair. A packet that
//! queued more than its pair partner still lies on the right side of the line (its delay
//! is never below the path's floor), so on paths where the two packets of a pair do not
//! share a queue (sprayed fabrics, virtual NICs, per-packet jitter) the pure pairs are a
//! few and the rest still carry information. The purity filter guards against what a gap
//! test catches and a floor does not (a stamp taken late, a transient that moved one
//! packet below the others). Neither is right everywhere, so both sets are fitted and the
//! one whose line has the smaller uncertainty (`uncertainty::edge_sigma_ns`) is used.

use super::hull::{self, FitError, HullFit, Hulls, Line};
use super::points::{EdgePoints, Point};
use super::uncertainty::{edge_sigma_and_lowest, edge_sigma_ns, FloorPoints};
use crate::config::EstimatorKind;

/// The line of one edge plus the hulls the bound needs (computed for every estimator:
/// the bound comes from the data, not from the estimator).
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeLine {
    /// theta(x) - y_origin, x from the window midpoint in the src clock.
    pub line: Line,
    pub hulls: Hulls,
    /// Smallest distance of a used point to the hull line (negative: overlap).
    pub margin_ns: f64,
    /// Calibrated sigma of theta at the midpoint under symmetric paths
    /// (`uncertainty::edge_sigma_ns`).
    pub sigma_ns: f64,
    /// True when the points of every packet were used, false for the pure pairs' only.
    pub all_packets: bool,
    /// The used points near the line's floors, from which `sigma_ns` is computed again
    /// when the drift refit changes the line (`WindowFits::set_lines`).
    pub floor: FloorPoints,
}

/// The hull fit of one point set, its sigma and its floor points (the lowest few and the
/// hull vertices).
fn hull_candidate(fwd: &[Point], rev: &[Point]) -> Result<(HullFit, f64, FloorPoints), FitError> {
    let f = hull::fit(fwd, rev)?;
    let (sigma, floor) = edge_sigma_and_lowest(fwd, rev, &f.line);
    let floor = floor.with_vertices(&f.hulls.fwd_lower, &f.hulls.rev_upper);
    Ok((f, sigma, floor))
}

pub fn fit_edge(kind: EstimatorKind, e: &EdgePoints, svm_c: f64) -> Result<EdgeLine, FitError> {
    let pure = hull_candidate(&e.fwd, &e.rev);
    // The set of every packet is a superset: only worth fitting when it adds points.
    let adds = e.fwd_all.len() > e.fwd.len() || e.rev_all.len() > e.rev.len();
    let all = if adds { hull_candidate(&e.fwd_all, &e.rev_all).ok() } else { None };
    let (exact, all_packets) = match (pure, all) {
        (Ok(p), Some(a)) if a.1 < p.1 => (Ok(a), true),
        (Err(_), Some(a)) => (Ok(a), true),
        (p, _) => (p, false),
    };
    let (fwd, rev) = if all_packets { (&e.fwd_all, &e.rev_all) } else { (&e.fwd, &e.rev) };
    let line = match kind {
        EstimatorKind::Hull => exact.as_ref().map(|f| f.0.line).map_err(|err| *err)?,
        EstimatorKind::Ntp => super::ntp::fit(&e.probes)?,
        EstimatorKind::TwoPoint => super::two_point::fit(&e.probes)?,
        EstimatorKind::Svm => svm_line(fwd, rev, svm_c)?,
    };
    let (hulls, margin_ns, hull_sigma_ns, hull_floor) = match exact {
        Ok((f, sigma, floor)) => (f.hulls, f.margin_ns, Some(sigma), floor),
        Err(_) => (Hulls::of(fwd, rev), f64::NAN, None, FloorPoints::default()),
    };
    // The hull line's sigma is its candidate's (same points, same line: computing it
    // again was a tenth of a window's fit time); the other estimators' lines are judged by
    // the same points' spread around them.
    let sigma_ns = match (kind, hull_sigma_ns) {
        (EstimatorKind::Hull, Some(sigma)) => sigma,
        _ => edge_sigma_ns(fwd, rev, &line),
    };
    // Only hull lines are refit over neighbouring windows (`drift`), and then the sigma
    // of the line used comes from these points (`WindowFits::set_lines`).
    let floor = if kind == EstimatorKind::Hull { hull_floor } else { FloorPoints::default() };
    Ok(EdgeLine { line, hulls, margin_ns, sigma_ns, all_packets, floor })
}

#[cfg(feature = "svm")]
fn svm_line(fwd: &[Point], rev: &[Point], c: f64) -> Result<Line, FitError> {
    super::svm::fit(fwd, rev, c)
}

#[cfg(not(feature = "svm"))]
fn svm_line(_: &[Point], _: &[Point], _: f64) -> Result<Line, FitError> {
    Err(FitError::Solver)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::purity::PurityCounts;

    /// Independent per-packet jitter: few pure pairs, many packets. The fit chooses every
    /// packet's points by their smaller sigma, and its line is closer to the truth.
    #[test]
    fn every_packet_wins_when_pure_pairs_are_few() {
        let mut noise = crate::estimate::test_noise::XorShift::new(0x2545_f491_4f6c_dd1du64);
        let mut exp = move |mean: f64| noise.exp(mean);
        // theta = 0; 20 us floor each way, exponential jitter of mean 50 us per packet.
        let mut side = |sign: f64| -> Vec<Point> {
            (0..400).map(|i| Point { x_ns: i as f64 * 1e7 - 2e9, y_ns: sign * (20_000.0 + exp(50_000.0)) }).collect()
        };
        let (fwd_all, rev_all) = (side(1.0), side(-1.0));
        let e = EdgePoints {
            src: 0,
            dst: 1,
            y_origin_ns: 0,
            fwd: fwd_all.iter().step_by(50).copied().collect(),
            rev: rev_all.iter().step_by(50).copied().collect(),
            fwd_all,
            rev_all,
            probes: Vec::new(),
            counts: PurityCounts::default(),
            gap_noise_ns: 0.0,
        };
        let pure_only = EdgePoints { fwd_all: Vec::new(), rev_all: Vec::new(), ..e.clone() };
        let all = fit_edge(EstimatorKind::Hull, &e, 1.0).unwrap();
        let pure = fit_edge(EstimatorKind::Hull, &pure_only, 1.0).unwrap();
        assert!(all.all_packets && !pure.all_packets);
        assert!(all.sigma_ns < pure.sigma_ns, "{} vs {}", all.sigma_ns, pure.sigma_ns);
        assert!(all.line.at(0.0).abs() < 0.25 * pure.line.at(0.0).abs().max(2_000.0), "{:?} vs {:?}", all.line, pure.line);
    }
}
