//! The clock model: the contract between estimation and everything downstream
//! (JSONL, the XSpace plane, merge, validate, report).
//!
//! Sign convention: `offset_ns` is how far the node's host clock S_i is ahead of the global
//! timeline G at the window midpoint `mid_local_ns` (in S_i); `drift_ppb` is how fast it
//! gains on G, in parts per billion. So `G = S_i - offset_ns - drift_ppb * 1e-9 * (S_i - mid)`.

use crate::context::NodeId;
use serde::{Deserialize, Serialize};

/// One node's clock against the reference over one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockSegment {
    pub window_id: u64,
    /// Window bounds and midpoint in the node's own host clock S_i.
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub mid_local_ns: i64,
    pub offset_ns: f64,
    pub drift_ppb: f64,
    /// Worst-case error bound of `offset_ns`: it holds whatever the path asymmetry (at
    /// least half the smallest round trip per hop, plus residuals and timestamp noise).
    pub bound_ns: f64,
    /// Calibrated uncertainty of `offset_ns`, one standard deviation: the statistical part
    /// (estimate::uncertainty, for the line actually used), the stated allowance for path
    /// and stamping asymmetry per hop (estimate::allowance) and, in a whole run's model, the
    /// bend of the clocks' wander over the window (estimate::wander), in quadrature; the
    /// truth lies within twice it in ~95% of windows while the asymmetry is within the
    /// allowance.
    /// `f64::MAX` when unknown (files written before it existed).
    #[serde(default = "unknown_uncertainty")]
    pub uncertainty_ns: f64,
    /// Calibrated uncertainty of `drift_ppb`, one standard deviation, from the drift loop
    /// residuals (estimate::uncertainty) and, in a whole run's model, the wander the run
    /// shows (estimate::wander). `f64::MAX` when unknown (no loops in the window, or files
    /// written before it existed).
    #[serde(default = "unknown_uncertainty")]
    pub drift_uncertainty_ppb: f64,
    /// True when `uncertainty_ns` exceeds `max_uncertainty_ns`, `bound_ns` exceeds
    /// `max_bound_ns` of the config, or the node's loops show an asymmetry beyond the
    /// allowance the uncertainty assumes.
    pub flagged: bool,
    /// True when the node's clock breaks at `start_local_ns` (a step or a frequency change
    /// found inside the window, `estimate::breaks`): this segment is a piece of its window
    /// and holds from there on its own, so merge does not interpolate across its start.
    /// False in files written before pieces existed (one segment per window).
    #[serde(default, skip_serializing_if = "is_false")]
    pub break_at_start: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn unknown_uncertainty() -> f64 {
    f64::MAX
}

/// The least drift sigma merge and the failover carry a segment's line with, and the one
/// of a segment that states none (files written before `drift_uncertainty_ppb`). With the
/// wander term (estimate::wander) a run's stated drift sigma covers in the simulator
/// (2-sigma: 0.97 on the reference scenario, 0.95/0.93/0.89 at wander 5/10/20 ppb/sqrt(s),
/// 0.89 disciplined; it was 0.46/0.27/0.15 without), so the floor is no longer what makes
/// wander covered. It stays: a window's model as it closes (the JSONL, a node's own
/// model) has no wander term, the failover extrapolates a segment for tens of seconds
/// where the bend grows as t^1.5, not t, and on `distprof local` runs (whose drift sigma
/// no bench judges yet) the smoothed fits' drift errors reach 27 ppb at p99.
pub const UNSTATED_DRIFT_SIGMA_PPB: f64 = 20.0;

impl ClockSegment {
    /// The correction `c(S) = offset + drift * (S - mid)` at host time `local_ns`: how far
    /// S_i is ahead of G there. Finite for every i64 input (no overflow on hostile models).
    pub fn correction_ns(&self, local_ns: i64) -> f64 {
        self.offset_ns + self.drift_ppb * 1e-9 * ns_between(self.mid_local_ns, local_ns)
    }

    /// One standard deviation of `drift_ppb` as merge and the failover use it: the stated
    /// `drift_uncertainty_ppb`, never below [`UNSTATED_DRIFT_SIGMA_PPB`].
    pub fn drift_sigma_ppb(&self) -> f64 {
        if self.drift_uncertainty_ppb.is_finite() && self.drift_uncertainty_ppb < f64::MAX {
            self.drift_uncertainty_ppb.max(UNSTATED_DRIFT_SIGMA_PPB)
        } else {
            UNSTATED_DRIFT_SIGMA_PPB
        }
    }

    /// The uncertainty of `correction_ns(local_ns)`: the midpoint's, and the drift's over
    /// the distance from it, in quadrature (independent). `f64::MAX` when the midpoint's
    /// is unknown.
    pub fn uncertainty_at_ns(&self, local_ns: i64) -> f64 {
        if self.uncertainty_ns == f64::MAX {
            return f64::MAX;
        }
        self.uncertainty_ns.hypot(self.drift_sigma_ppb() * 1e-9 * ns_between(self.mid_local_ns, local_ns))
    }

    /// Maps a host-clock time of this node onto the global timeline by this segment's line
    /// alone (merge's `GlobalMap` interpolates between segments instead).
    pub fn to_global_ns(&self, local_ns: i64) -> f64 {
        // Subtracted term by term: the big epoch value rounds once, as the report has always
        // computed it.
        local_ns as f64 - self.offset_ns - self.drift_ppb * 1e-9 * ns_between(self.mid_local_ns, local_ns)
    }
}

/// `b - a` in ns as f64, exact to an f64's precision for any two i64 times (the difference
/// is taken in i128, so times near the i64 limits do not overflow).
pub fn ns_between(a: i64, b: i64) -> f64 {
    (b as i128 - a as i128) as f64
}

/// One node's piecewise clock model, segments ordered by `start_local_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeClockModel {
    pub node: NodeId,
    /// False when no path of usable edges connects the node to the reference; then
    /// `segments` is empty and the node must be reported, never given zero.
    pub reachable: bool,
    pub segments: Vec<ClockSegment>,
}
