//! The mapping PHC -> CLOCK_REALTIME: a line fitted to the recent samples of one unbroken
//! segment, and for every converted stamp an error that holds even when a clock breaks.
//!
//! **The line.** Over a sliding span (`SPAN_NS`) of the current segment the samples with
//! the narrowest brackets are kept (the tighter half: a read delayed by an interrupt or a
//! preemption has a wide bracket and a misplaced midpoint, which is why phc2sys keeps the
//! tightest reading too), and a least squares line `host - phc = d0 + a + b (phc - origin)`
//! is fitted to their midpoints, `origin` and `d0` the newest sample's PHC reading and host
//! - PHC difference (so that f64 holds what is fitted exactly: a PHC with its own epoch is
//! ~1.8e18 ns from the host clock, where an f64 resolves only 256 ns). Its provisional
//! error (`MappingQuality::error_bound_ns`) is the largest distance of a kept sample from it
//! plus half its bracket, plus what the slope's uncertainty adds up to one sampling gap past
//! the newest kept sample.
//!
//! **Breaks.** The PHC is stepped or re-rated by ptp4l and phc2sys, CLOCK_REALTIME is
//! stepped (a leap second; a PHC on TAI takes none) or slewed at up to 500 ppm by ntpd.
//! Each new sample is compared with the line's prediction: the truth lies within half the
//! sample's bracket of its midpoint (wherever in the bracket the driver latched the PHC, so
//! a latch bias is bounded by the bracket too) and within the line's error of the line, so
//! a midpoint further off than the two together proves a break, however small (a few
//! hundred ns over a sample with a tight bracket). The segment ends there and the fit
//! starts again from that sample, keeping the old slope until a second sample gives one.
//!
//! **A stamp's error.** Between two samples a and b the clocks are linear (one break at
//! most: then linear on each side of it), so the distance of the truth from the line the
//! stamp was converted with is largest at a or b, each known to within half its bracket:
//! `max(|mid - line| + bracket/2 at a and b)` plus the slope's bound over the gap (for a
//! break inside it). Only samples with a tight bracket (no wider than those the fit keeps)
//! serve as a and b, and the line changes only at them; a sample that shows a break
//! serves however wide. A stamp taken before the newest such sample is settled at once
//! (`Converted::error_ns`), one taken after it when the next comes (`add` returns the
//! `Settlement`). Stamps converted across a break are settled with the size of the break
//! in their error and counted. The assumption: at most one break between two samples.

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
/// Rate difference assumed while only one sample is known: crystal oscillators of NICs and
/// hosts are specified within 100 ppm, and ntpd slews the host clock by up to 500 ppm more.
const UNKNOWN_DRIFT: f64 = 600e-6;
/// Standard errors of a fitted slope taken as its bound.
const SLOPE_SIGMAS: f64 = 3.0;
/// The longest stamps wait for a tight sample to settle them (PHC time): eight sampling
/// gaps, after which a wider sample settles them (with its bracket in their error). Half
/// the samples are tight, so eight wide ones in a row come once in 256.
const MAX_UNSETTLED_NS: i64 = 400_000_000;
/// Settling samples remembered (across segments) to settle stamps converted late: a stamp
/// older than the oldest of them is not converted (about 0.8 s at the sampling rate; the
/// probe engine converts a stamp within one pass, microseconds to milliseconds).
const RECENT_SAMPLES: usize = 8;

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
    /// The error a stamp converted now may carry from the mapping, provisionally: until
    /// the next sample shows the clocks did not break (see the module comment).
    pub error_bound_ns: f64,
    /// Breaks (steps, frequency changes, slews) detected since the start: the fit restarted.
    #[serde(default)]
    pub breaks: u64,
}

/// How far the instant of a sample's PHC read may lie from its midpoint: half its bracket
/// (wherever in it the driver latched), plus 1 ns because the reads and the midpoint are
/// whole ns (a cross-timestamp's bracket of 0 is exact only to that).
fn half_width_ns(s: &PhcSample) -> f64 {
    s.bracket_ns() as f64 / 2.0 + 1.0
}

#[derive(Debug, Clone, Copy)]
struct Line {
    origin_phc_ns: i64,
    origin_diff_ns: i64,
    a: f64,
    b: f64,
    /// How far `b` may be off the clocks' rate (dimensionless): three standard errors of
    /// a fitted slope, a crystal's and a slew's tolerance for a slope not fitted.
    slope_bound: f64,
    /// `b` was fitted (two samples or more), not carried over a break or assumed.
    fitted: bool,
    /// Largest |residual| + half bracket over the kept samples: the error within them.
    worst_ns: f64,
    /// PHC reading of the newest kept sample: the line is extrapolated beyond it.
    newest_kept_phc_ns: i64,
}

impl Line {
    /// Host - PHC at `phc_ns`, less `origin_diff_ns`.
    fn rel_diff_at(&self, phc_ns: i64) -> f64 {
        self.a + self.b * phc_ns.saturating_sub(self.origin_phc_ns) as f64
    }

    /// How far the sample's midpoint lies from the line, ns.
    fn miss_ns(&self, s: &PhcSample) -> f64 {
        (s.sys_mid_ns() - s.phc_ns).saturating_sub(self.origin_diff_ns) as f64 - self.rel_diff_at(s.phc_ns)
    }

    /// The most the truth at sample `s` can lie from the line: its miss plus half its
    /// bracket (the PHC was read somewhere inside the bracket).
    fn reach_ns(&self, s: &PhcSample) -> f64 {
        self.miss_ns(s).abs() + half_width_ns(s)
    }

    /// The line's own error at `phc_ns` if the clocks did not break: within the kept
    /// samples, plus the slope's uncertainty past the newest of them.
    fn error_at_ns(&self, phc_ns: i64) -> f64 {
        self.worst_ns + self.slope_bound * (phc_ns - self.newest_kept_phc_ns).max(0) as f64
    }

    /// What a break inside a gap of `gap_ns` may add beyond the values at its ends: the
    /// line's slope may be off the clocks' by its uncertainty on either side of the break.
    fn within_gap_ns(&self, gap_ns: i64) -> f64 {
        self.slope_bound * gap_ns.max(0) as f64
    }
}

/// A converted stamp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Converted {
    /// CLOCK_REALTIME ns.
    pub host_ns: i64,
    /// The error it carries from the mapping, when known now (a stamp taken before the
    /// newest settling sample); `None` for a stamp after it: a later `add` settles it.
    pub error_ns: Option<f64>,
    /// The samples around the stamp show a break: `error_ns` holds the break's size.
    pub across_break: bool,
}

/// What a settling sample says about the stamps converted since the one before (those
/// whose `Converted::error_ns` was `None`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settlement {
    /// The error each of them carries from the mapping, ns.
    pub error_ns: f64,
    /// A break came between the two samples: the error holds the break's size.
    pub across_break: bool,
}

/// The sliding fit. `add` samples, `convert` converts.
#[derive(Debug, Clone, Default)]
pub struct PhcMapping {
    /// The current segment's samples, in PHC order.
    samples: VecDeque<PhcSample>,
    /// The last samples that settled, across segments, in the order taken, each with
    /// whether a break was detected at it: they settle a stamp taken before the newest.
    recent: VecDeque<(PhcSample, bool)>,
    line: Option<Line>,
    /// The slope of the segment before a break: the new segment's best guess until it has
    /// two samples (a step leaves the rate as it was); its uncertainty is not carried.
    carried_slope: Option<f64>,
    quality: MappingQuality,
    /// Samples refused for a wide or backwards bracket.
    pub refused: u64,
}

impl PhcMapping {
    pub fn new() -> PhcMapping {
        PhcMapping::default()
    }

    /// Breaks detected since the start (the fit restarted at each).
    pub fn breaks(&self) -> u64 {
        self.quality.breaks
    }

    /// Adds one sample. Returns the settlement of the stamps converted since the last
    /// sample that settled (`None`: nothing is settled yet). A sample settles when its
    /// bracket is no wider than those the fit keeps, or when it shows a break: a wider one
    /// would state its whole bracket for every stamp since, so it waits for a tight one
    /// and leaves the line as it is (the tighter half would not keep it anyway). A refused
    /// sample settles nothing, nor does the first.
    pub fn add(&mut self, s: PhcSample) -> Option<Settlement> {
        self.add_sample(s, false)
    }

    /// As `add`, but the sample settles however wide its bracket: when the stamps so far
    /// must be settled now (a window closes).
    pub fn add_settling(&mut self, s: PhcSample) -> Option<Settlement> {
        self.add_sample(s, true)
    }

    fn add_sample(&mut self, s: PhcSample, force: bool) -> Option<Settlement> {
        self.quality.samples_taken += 1;
        if s.bracket_ns() < 0 || s.bracket_ns() > MAX_BRACKET_NS {
            self.refused += 1;
            return None;
        }
        let settlement = match (self.line, self.recent.back()) {
            (Some(line), Some(&(settled_at, _))) => {
                let miss = line.miss_ns(&s);
                // A line whose slope is not fitted yet (one sample since the start or a
                // break) is not tested: its assumed slope may be off by a slew, which the
                // second sample measures instead of restarting the fit for ever.
                let across_break = line.fitted && miss.abs() > half_width_ns(&s) + line.error_at_ns(s.phc_ns);
                // Tight: no wider than the brackets the fit keeps, once it keeps a half.
                let tight = self.samples.len() < 4 || s.bracket_ns() <= self.quality.bracket_max_ns;
                // Waiting costs the slope's bound over the longer gap: while the slope is
                // loose (a young segment) that exceeds what a tight sample would save.
                let waited = s.phc_ns - settled_at.phc_ns;
                let waiting_costs_more = line.within_gap_ns(waited + SAMPLE_EVERY.as_nanos() as i64) > half_width_ns(&s);
                if !(tight || across_break || force || waiting_costs_more || waited >= MAX_UNSETTLED_NS) {
                    self.push_to_segment(s);
                    return None;
                }
                if across_break {
                    tracing::warn!("NIC clock mapping: a sample {miss:.0} ns off the line (a clock stepped or changed rate); the fit starts again");
                    self.quality.breaks += 1;
                    self.samples.clear();
                    self.carried_slope = Some(line.b);
                }
                let gap = (s.phc_ns - settled_at.phc_ns).abs();
                let error_ns = line.reach_ns(&settled_at).max(line.reach_ns(&s)) + line.within_gap_ns(gap);
                Some(Settlement { error_ns, across_break })
            }
            _ => None,
        };
        self.push_to_segment(s);
        self.recent.push_back((s, settlement.is_some_and(|x| x.across_break)));
        if self.recent.len() > RECENT_SAMPLES {
            self.recent.pop_front();
        }
        self.refit();
        settlement
    }

    /// `s` joins the current segment, which keeps `SPAN_NS` of PHC time.
    fn push_to_segment(&mut self, s: PhcSample) {
        // The PHC may only run forward; a sample behind the newest is a step too (handled
        // above when it shows) or noise: keep the order by PHC time.
        self.samples.retain(|o| o.phc_ns < s.phc_ns);
        self.samples.push_back(s);
        while self.samples.front().is_some_and(|o| s.phc_ns - o.phc_ns > SPAN_NS) {
            self.samples.pop_front();
        }
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
            .map(|s| ((s.phc_ns - origin) as f64, (s.sys_mid_ns() - s.phc_ns - origin_diff) as f64, half_width_ns(s)))
            .collect();
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let fitted_slope = pts.len() >= 2 && sxx > 0.0;
        let b = if fitted_slope { sxy / sxx } else { self.carried_slope.unwrap_or(0.0) };
        let a = my - b * mx;
        let resid: Vec<f64> = pts.iter().map(|p| p.1 - (a + b * p.0)).collect();
        let rms = (resid.iter().map(|r| r * r).sum::<f64>() / n).sqrt();
        let max_res = resid.iter().fold(0.0f64, |m, r| m.max(r.abs()));
        let worst = pts.iter().zip(&resid).fold(0.0f64, |m, (p, r)| m.max(r.abs() + p.2));
        let half_bracket_max = pts.iter().fold(0.0f64, |m, p| m.max(p.2));
        // The slope's uncertainty: statistical where there are enough samples, never less
        // than what the brackets allow over the span, and a crystal's tolerance with one sample.
        let slope_bound = if !fitted_slope {
            UNKNOWN_DRIFT
        } else {
            let spread = sxx.sqrt();
            let stat = if pts.len() > 2 { (resid.iter().map(|r| r * r).sum::<f64>() / (n - 2.0)).sqrt() / spread } else { 0.0 };
            SLOPE_SIGMAS * stat.max(2.0 * half_bracket_max / (spread * n.sqrt()).max(1.0))
        };
        if fitted_slope {
            self.carried_slope = None;
        }
        let newest_kept_phc_ns = kept.iter().map(|s| s.phc_ns).max().unwrap_or(origin);
        let line = Line { origin_phc_ns: origin, origin_diff_ns: origin_diff, a, b, slope_bound, fitted: fitted_slope, worst_ns: worst, newest_kept_phc_ns };
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
            error_bound_ns: line.error_at_ns(origin + SAMPLE_EVERY.as_nanos() as i64),
            breaks: self.quality.breaks,
        };
    }

    /// The host time (CLOCK_REALTIME ns) of the PHC reading `phc_ns`, with its error when
    /// it can be known now; `None` before the first sample, and for a stamp older than the
    /// remembered samples (its error could not be settled).
    pub fn convert(&self, phc_ns: i64) -> Option<Converted> {
        let line = self.line?;
        let host_ns = self.to_host_ns(phc_ns)?;
        let &(newest, _) = self.recent.back()?;
        if phc_ns >= newest.phc_ns {
            return Some(Converted { host_ns, error_ns: None, across_break: false });
        }
        // Taken before the newest settling sample: the two around it settle it now,
        // against the line it is converted with (the newest pair first: after a step back
        // of the PHC a reading may lie in an older gap too).
        (1..self.recent.len()).rev().find_map(|i| {
            let ((a, _), (b, broke)) = (self.recent[i - 1], self.recent[i]);
            (a.phc_ns <= phc_ns && phc_ns <= b.phc_ns).then(|| {
                let error_ns = line.reach_ns(&a).max(line.reach_ns(&b)) + line.within_gap_ns(b.phc_ns - a.phc_ns);
                Converted { host_ns, error_ns: Some(error_ns), across_break: broke }
            })
        })
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
        assert_eq!(map.breaks(), 1);
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
        assert!((q.error_bound_ns - (101.0 + UNKNOWN_DRIFT * SAMPLE_EVERY.as_nanos() as f64)).abs() < 1e-6, "{q:?}");
        let _ = SimulatedPhc::new(SimulatedNicClock::tai_20ppm(0), 1).describe();
    }

    /// A sample wider than those the fit keeps settles nothing and leaves the line alone;
    /// the next tight one settles every stamp since the last settling sample, and a stamp
    /// taken between two settling samples is settled at once when converted late.
    #[test]
    fn wide_samples_wait_for_a_tight_one_to_settle() {
        let nic = SimulatedNicClock::tai_20ppm(0);
        let sample = |real: i64, half: i64| PhcSample { sys_before_ns: real - half, phc_ns: nic.phc_at(real), sys_after_ns: real + half };
        let mut map = PhcMapping::new();
        let gap = SAMPLE_EVERY.as_nanos() as i64;
        for k in 0..20i64 {
            map.add(sample(k * gap, 100));
        }
        let stamp = nic.phc_at(19 * gap + 10_000_000);
        let converted = map.convert(stamp).unwrap();
        assert_eq!(converted.error_ns, None, "taken after the newest sample: not settled yet");
        let before = map.quality().unwrap();
        assert_eq!(map.add(sample(20 * gap, 5_000)), None, "a 10 us bracket does not settle");
        assert_eq!(map.quality().unwrap().offset_ns, before.offset_ns, "nor moves the line");
        let settled = map.add(sample(21 * gap, 100)).expect("a tight one settles");
        // Half the tight bracket and the slope's bound over 100 ms, not the 5 us of the wide one.
        assert!(!settled.across_break && settled.error_ns < 300.0, "{settled:?}");
        // Converted late, the same stamp is settled at once by the samples around it.
        let late = map.convert(stamp).unwrap();
        assert!(late.error_ns.is_some_and(|e| e < 300.0) && !late.across_break, "{late:?}");
        assert!((late.host_ns - (19 * gap + 10_000_000)).abs() <= 2, "{late:?}");
    }
}
