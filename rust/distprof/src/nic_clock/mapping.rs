//! The mapping PHC -> CLOCK_REALTIME: a line fitted to the recent samples.
//!
//! Over a sliding span (`SPAN`) the samples with the narrowest brackets are kept (the
//! tighter half: a read delayed by an interrupt or a preemption has a wide bracket and a
//! misplaced midpoint, which is why phc2sys keeps the tightest reading too), and a least
//! squares line `host - phc = d0 + a + b (phc - origin)` is fitted to their midpoints,
//! `origin` and `d0` the newest sample's PHC reading and host - PHC difference (so that f64
//! holds what is fitted exactly: a PHC with its own epoch is ~1.8e18 ns from the host clock,
//! where an f64 resolves only 256 ns). The line's
//! error is stated: the largest distance of a kept sample from it plus half its bracket,
//! plus what the uncertainty of the slope adds over the longest a stamp may lie past the
//! newest sample (`SAMPLE_EVERY`).

use super::PhcSample;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// How often the NIC clock is sampled: often enough that the slope's uncertainty adds
/// little over the gap, rarely enough to cost nothing (one ioctl of a few microseconds).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Samples older than this (in PHC time) leave the fit: long enough to pin the drift to a
/// few ppb, short enough that the drift's own wander over the span stays far below the
/// hardware stamp's error.
pub const SPAN_NS: i64 = 4_000_000_000;
/// A bracket wider than this is no sample (the reads were preempted).
pub const MAX_BRACKET_NS: i64 = 1_000_000;
/// A sample this far from the current line means a clock stepped (ptp4l or NTP set the PHC
/// or the system clock): the fit starts again from that sample.
pub const STEP_NS: f64 = 1_000_000.0;
/// Rate difference assumed while only one sample is known: crystal oscillators of NICs and
/// hosts are specified within 100 ppm.
const UNKNOWN_DRIFT: f64 = 100e-6;

/// How good the mapping is now: in the JSONL, the summaries, the trace plane and the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MappingQuality {
    /// Samples taken since the start (all of them, kept or not).
    pub samples_taken: u64,
    /// Samples the current line is fitted to.
    pub samples_used: u32,
    /// PHC time between the oldest and newest kept sample.
    pub span_ns: i64,
    /// Host minus PHC at the newest sample (-37 s for a PHC on TAI and a host on UTC).
    pub offset_ns: f64,
    /// How fast the host clock gains on the PHC, ppm.
    pub drift_ppm: f64,
    /// Root mean square and largest distance of the kept samples from the line.
    pub residual_rms_ns: f64,
    pub residual_max_ns: f64,
    /// Widest bracket among the kept samples (0 for cross-timestamps).
    pub bracket_max_ns: i64,
    /// The error a converted stamp may carry from the mapping (see the module comment).
    pub error_bound_ns: f64,
}

#[derive(Debug, Clone, Copy)]
struct Line {
    origin_phc_ns: i64,
    origin_diff_ns: i64,
    a: f64,
    b: f64,
}

impl Line {
    /// Host - PHC at `phc_ns`, less `origin_diff_ns`.
    fn rel_diff_at(&self, phc_ns: i64) -> f64 {
        self.a + self.b * phc_ns.saturating_sub(self.origin_phc_ns) as f64
    }
}

/// The sliding fit. `add` samples, `to_host_ns` converts.
#[derive(Debug, Clone, Default)]
pub struct PhcMapping {
    samples: VecDeque<PhcSample>,
    line: Option<Line>,
    quality: MappingQuality,
    /// Clock steps seen (the fit restarted).
    pub steps: u64,
    /// Samples refused for a wide or backwards bracket.
    pub refused: u64,
}

impl PhcMapping {
    pub fn new() -> PhcMapping {
        PhcMapping::default()
    }

    /// Adds one sample and refits.
    pub fn add(&mut self, s: PhcSample) {
        self.quality.samples_taken += 1;
        if s.bracket_ns() < 0 || s.bracket_ns() > MAX_BRACKET_NS {
            self.refused += 1;
            return;
        }
        if let Some(line) = self.line {
            let off = (s.sys_mid_ns() - s.phc_ns).saturating_sub(line.origin_diff_ns) as f64 - line.rel_diff_at(s.phc_ns);
            if off.abs() > STEP_NS {
                tracing::warn!("NIC clock mapping: a clock stepped by {:.0} ns; the fit starts again", off);
                self.steps += 1;
                self.samples.clear();
            }
        }
        // The PHC may only run forward; a sample behind the newest is a step too (handled
        // above when large) or noise: keep the order by PHC time.
        self.samples.retain(|o| o.phc_ns < s.phc_ns);
        self.samples.push_back(s);
        while self.samples.front().is_some_and(|o| s.phc_ns - o.phc_ns > SPAN_NS) {
            self.samples.pop_front();
        }
        self.refit();
    }

    fn refit(&mut self) {
        let Some(newest) = self.samples.back().copied() else { return };
        let origin = newest.phc_ns;
        let origin_diff = newest.sys_mid_ns() - newest.phc_ns;
        // The tighter half of the span, at least two (all when fewer than four).
        let mut kept: Vec<PhcSample> = self.samples.iter().copied().collect();
        if kept.len() >= 4 {
            kept.sort_by_key(|s| s.bracket_ns());
            kept.truncate(kept.len().div_ceil(2));
        }
        let pts: Vec<(f64, f64, f64)> = kept
            .iter()
            .map(|s| ((s.phc_ns - origin) as f64, (s.sys_mid_ns() - s.phc_ns - origin_diff) as f64, s.bracket_ns() as f64 / 2.0))
            .collect();
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let b = if pts.len() >= 2 && sxx > 0.0 { sxy / sxx } else { 0.0 };
        let a = my - b * mx;
        let line = Line { origin_phc_ns: origin, origin_diff_ns: origin_diff, a, b };
        let resid: Vec<f64> = pts.iter().map(|p| p.1 - (a + b * p.0)).collect();
        let rms = (resid.iter().map(|r| r * r).sum::<f64>() / n).sqrt();
        let max_res = resid.iter().fold(0.0f64, |m, r| m.max(r.abs()));
        let worst = pts.iter().zip(&resid).fold(0.0f64, |m, (p, r)| m.max(r.abs() + p.2));
        let half_bracket_max = pts.iter().fold(0.0f64, |m, p| m.max(p.2));
        // The slope's uncertainty: statistical where there are enough samples, never less
        // than what the brackets allow over the span, and a crystal's tolerance with one sample.
        let slope_err = if pts.len() < 2 || sxx <= 0.0 {
            UNKNOWN_DRIFT
        } else {
            let spread = sxx.sqrt();
            let stat = if pts.len() > 2 { (resid.iter().map(|r| r * r).sum::<f64>() / (n - 2.0)).sqrt() / spread } else { 0.0 };
            stat.max(2.0 * half_bracket_max / (spread * n.sqrt()).max(1.0))
        };
        let horizon = SAMPLE_EVERY.as_nanos() as f64;
        self.line = Some(line);
        let oldest = self.samples.front().map_or(origin, |s| s.phc_ns);
        self.quality = MappingQuality {
            samples_taken: self.quality.samples_taken,
            samples_used: kept.len() as u32,
            span_ns: origin - oldest,
            offset_ns: origin_diff as f64 + a,
            drift_ppm: b * 1e6,
            residual_rms_ns: rms,
            residual_max_ns: max_res,
            bracket_max_ns: kept.iter().map(|s| s.bracket_ns()).max().unwrap_or(0),
            error_bound_ns: worst + 3.0 * slope_err * horizon,
        };
    }

    /// The host time (CLOCK_REALTIME ns) of the PHC reading `phc_ns`; `None` before the
    /// first sample.
    pub fn to_host_ns(&self, phc_ns: i64) -> Option<i64> {
        let line = self.line?;
        Some(phc_ns.saturating_add(line.origin_diff_ns).saturating_add(line.rel_diff_at(phc_ns).round() as i64))
    }

    pub fn quality(&self) -> Option<MappingQuality> {
        self.line.map(|_| self.quality.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic_clock::{PhcClock, SimulatedNicClock, SimulatedPhc};

    /// Samples of a PHC at +37 s and 20 ppm with read jitter, every `SAMPLE_EVERY` for
    /// `secs` (simulated time, no sleeping); returns the mapping and the clock.
    fn fitted(jitter_ns: f64, secs: f64) -> (PhcMapping, SimulatedPhc) {
        let nic = SimulatedNicClock { read_jitter_ns: jitter_ns, ..SimulatedNicClock::tai_20ppm(1_700_000_000_000_000_000) };
        let mut phc = SimulatedPhc::new(nic, 3);
        let mut map = PhcMapping::new();
        let steps = (secs / SAMPLE_EVERY.as_secs_f64()) as i64;
        for k in 0..steps {
            let real = nic.epoch_real_ns + k * SAMPLE_EVERY.as_nanos() as i64;
            map.add(phc.sample_at(real));
        }
        (map, phc)
    }

    /// Against the known truth: a converted stamp lands on the real time within the
    /// mapping's stated error, at the newest sample and up to one sampling gap past it;
    /// the fitted offset and drift are the simulated ones.
    #[test]
    fn the_fit_recovers_the_known_mapping_within_its_stated_error() {
        for jitter in [0.0, 200.0, 2_000.0] {
            let (map, phc) = fitted(jitter, 10.0);
            let q = map.quality().unwrap();
            let nic = phc.params();
            let last = nic.epoch_real_ns + (10.0 / SAMPLE_EVERY.as_secs_f64() - 1.0) as i64 * SAMPLE_EVERY.as_nanos() as i64;
            let mut worst = 0i64;
            for dt in (-2_000_000_000i64..=SAMPLE_EVERY.as_nanos() as i64).step_by(10_000_000) {
                let real = last + dt;
                let back = map.to_host_ns(nic.phc_at(real)).unwrap();
                worst = worst.max((back - real).abs());
            }
            println!("jitter {jitter} ns: worst conversion error {worst} ns, {q:?}");
            assert!((worst as f64) <= q.error_bound_ns, "jitter {jitter}: {worst} ns > stated {:.1}", q.error_bound_ns);
            // Drift: the host loses 20 ppm on the PHC, within three standard errors of a
            // slope fitted to `samples_used` points spread evenly over the span.
            let slope_se_ppm = q.residual_rms_ns / (q.span_ns as f64 * (q.samples_used as f64 / 12.0).sqrt()) * 1e6;
            let drift_err = q.drift_ppm - (1.0 / (1.0 + 20e-6) - 1.0) * 1e6;
            assert!(drift_err.abs() <= 1e-6 + 3.0 * slope_se_ppm, "drift off by {drift_err} ppm: {q:?}");
            assert!(q.samples_used >= 40 && q.span_ns > 3_900_000_000, "{q:?}");
            assert!(q.error_bound_ns < 10.0 + 3.0 * jitter, "jitter {jitter}: bound {:.1} too loose", q.error_bound_ns);
        }
    }

    /// The tighter half is what counts: samples with a wide bracket (preempted reads with
    /// their PHC read late in the bracket) would pull a plain fit by microseconds.
    #[test]
    fn wide_brackets_do_not_pull_the_line() {
        let nic = SimulatedNicClock::tai_20ppm(0);
        let mut map = PhcMapping::new();
        for k in 0..80i64 {
            let real = k * 50_000_000;
            let s = if k % 3 == 0 {
                // 40 us bracket, PHC read at its very end: midpoint 20 us early.
                PhcSample { sys_before_ns: real - 40_000, phc_ns: nic.phc_at(real), sys_after_ns: real }
            } else {
                PhcSample { sys_before_ns: real - 100, phc_ns: nic.phc_at(real), sys_after_ns: real + 100 }
            };
            map.add(s);
        }
        let real = 79 * 50_000_000;
        let err = map.to_host_ns(nic.phc_at(real)).unwrap() - real;
        assert!(err.abs() <= 2, "conversion off by {err} ns");
        assert_eq!(map.quality().unwrap().bracket_max_ns, 200);
    }

    /// A stepped clock restarts the fit instead of bending the line.
    #[test]
    fn a_step_restarts_the_fit() {
        let nic = SimulatedNicClock::tai_20ppm(0);
        let mut map = PhcMapping::new();
        for k in 0..40i64 {
            let real = k * 50_000_000;
            let phc = nic.phc_at(real) + if k >= 20 { 5_000_000_000 } else { 0 };
            map.add(PhcSample { sys_before_ns: real - 50, phc_ns: phc, sys_after_ns: real + 50 });
        }
        assert_eq!(map.steps, 1);
        let real = 39 * 50_000_000;
        assert!((map.to_host_ns(nic.phc_at(real) + 5_000_000_000).unwrap() - real).abs() <= 2);
        // A bracket running backwards is refused, not fitted.
        map.add(PhcSample { sys_before_ns: 10, phc_ns: nic.phc_at(2_000_000_000), sys_after_ns: 0 });
        assert_eq!(map.refused, 1);
    }

    /// A PHC on its own epoch (days since its reset, ~1.8e18 ns from the host clock)
    /// converts as precisely as one on TAI: nothing absolute goes through an f64.
    #[test]
    fn a_far_epoch_costs_no_precision() {
        let real0 = 1_790_000_000_123_456_789;
        let nic = SimulatedNicClock { offset_ns: 1_036_800_000_000_000 - real0, read_jitter_ns: 0.0, ..SimulatedNicClock::tai_20ppm(real0) };
        let mut phc = SimulatedPhc::new(nic, 5);
        let mut map = PhcMapping::new();
        for k in 0..80i64 {
            map.add(phc.sample_at(real0 + k * 50_000_000 + k % 7));
        }
        for k in 0..100i64 {
            let real = real0 + 3_000_000_000 + k * 10_000_001;
            let err = map.to_host_ns(nic.phc_at(real)).unwrap() - real;
            assert!(err.abs() <= 1, "off by {err} ns at {real}");
        }
        assert!(map.quality().unwrap().residual_max_ns <= 1.0);
    }

    #[test]
    fn one_sample_maps_with_a_crystal_tolerance_in_its_bound() {
        let mut map = PhcMapping::new();
        assert_eq!(map.to_host_ns(5), None);
        map.add(PhcSample { sys_before_ns: 1_000, phc_ns: 38_000_000_000, sys_after_ns: 1_200 });
        assert_eq!(map.to_host_ns(38_000_000_000), Some(1_100));
        let q = map.quality().unwrap();
        assert!((q.error_bound_ns - (100.0 + 3.0 * UNKNOWN_DRIFT * SAMPLE_EVERY.as_nanos() as f64)).abs() < 1e-6, "{q:?}");
        let _ = SimulatedPhc::new(SimulatedNicClock::tai_20ppm(0), 1).describe();
    }
}
