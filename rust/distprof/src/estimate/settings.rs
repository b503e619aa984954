//! The estimator's knobs, built from `Config` in one place (`EstimatorSettings::from_config`).

use crate::config::{Config, EstimatorKind};

/// Whether node clocks come from all edges at once or from single edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkMode {
    /// Weighted least squares over every accepted edge, both directions (the default).
    Wls,
    /// Each node from the single edge that first reaches it in a breadth-first walk from
    /// the reference: what per-edge estimation without network correction gives.
    Tree,
}

/// Everything the estimation chain needs besides the records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimatorSettings {
    pub estimator: EstimatorKind,
    /// A coded pair is pure when |received gap - sent gap| <= abs + rel * sent gap.
    pub purity_abs_tolerance_ns: u64,
    pub purity_rel_tolerance: f64,
    /// Segments whose calibrated uncertainty (one sigma, symmetric paths) exceeds this
    /// are flagged...
    pub max_uncertainty_ns: u64,
    /// ...and those whose worst-case bound (any asymmetry) exceeds this.
    pub max_bound_ns: u64,
    /// The path and stamping asymmetry every uncertainty assumes, ns per hop
    /// (`Config::effective_asymmetry_allowance_ns`; `allowance`).
    pub asymmetry_allowance_ns: f64,
    pub network: NetworkMode,
    /// How far the drift fit reaches (hull estimator): online
    /// (`online::estimate_window_with_history`) the current window plus as many past
    /// windows as make up this span (`history_windows`); over a whole run (`Smoother`)
    /// about this span centred on the window (`smoothing_radius`). Longer spans average more probes
    /// (the slope error of extreme points falls as 1 / span^1.5-2) but lag behind the
    /// clocks' wander: 30 s balances the two at 1 ppb/sqrt(s) wander (docs/estimation.md).
    pub drift_span_s: f64,
    /// Cost parameter of the linfa-svm reference estimator (large C: close to hard margin).
    pub svm_c: f64,
}

impl EstimatorSettings {
    /// The one place the estimator reads `Config`.
    pub fn from_config(config: &Config) -> Self {
        Self {
            estimator: config.estimator,
            purity_abs_tolerance_ns: config.purity_abs_tolerance_ns,
            purity_rel_tolerance: config.purity_rel_tolerance,
            max_uncertainty_ns: config.max_uncertainty_ns,
            max_bound_ns: config.max_bound_ns,
            asymmetry_allowance_ns: config.effective_asymmetry_allowance_ns() as f64,
            ..Self::default()
        }
    }
}

impl EstimatorSettings {
    /// Past windows the drift fit uses with windows of `window_ns`: enough that the
    /// current and past windows together span `drift_span_s` (none when one window does).
    pub fn history_windows(&self, window_ns: i64) -> usize {
        if !(self.drift_span_s.is_finite() && self.drift_span_s > 0.0) || window_ns <= 0 {
            return 0;
        }
        let windows = (self.drift_span_s * 1e9 / window_ns as f64 - 1e-9).ceil();
        (windows as usize).saturating_sub(1).min(64)
    }
}

impl EstimatorSettings {
    /// Windows on each side of a window in the two-sided drift fit (`Smoother`): the
    /// centred span is about `drift_span_s` plus the window itself (3 windows of 15 s).
    /// Measured in the reference simulation (seeds 1-4), one window each side beats two:
    /// p99 drift 6.2-12.7 ppb (median 9.1) against 9.1-11.4 (median 11.3); a wider span
    /// lags the clocks' wander more than it averages.
    pub fn smoothing_radius(&self, window_ns: i64) -> usize {
        self.history_windows(window_ns).div_ceil(2)
    }
}

impl Default for EstimatorSettings {
    fn default() -> Self {
        Self {
            estimator: EstimatorKind::Hull,
            purity_abs_tolerance_ns: 2_000,
            purity_rel_tolerance: 0.1,
            max_uncertainty_ns: crate::config::Config::DEFAULT_MAX_UNCERTAINTY_NS,
            max_bound_ns: crate::config::Config::DEFAULT_MAX_BOUND_NS,
            asymmetry_allowance_ns: crate::config::TimestampMode::Auto.default_asymmetry_allowance_ns() as f64,
            network: NetworkMode::Wls,
            drift_span_s: 30.0,
            // Measured: C = 1 is visibly soft (0.5 µs off); C = 100 approaches the
            // exact max-margin line the hull computes.
            svm_c: 100.0,
        }
    }
}
