//! Snapshot pairs: how the tracer clock R of a node maps to its host clock S.
//!
//! A pair is one host-clock read and one tracer-clock read taken back to back. Each pair is
//! the best of N bracketed attempts: S is read before and after R, the attempt with the
//! narrowest S window wins, and S is taken at the window midpoint, so the pair's error is at
//! most half its recorded `read_window_ns`. R -> S is then fitted piecewise-linearly
//! (least squares per run of consecutive pairs) and every fit keeps its residuals.

use crate::clock::realtime_ns;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Pairs per least-squares segment of the R -> S fit. At the default 100 ms period this is
/// 1.6 s, short enough that oscillator wander within a segment stays well under a
/// microsecond, long enough that read noise averages out.
pub const PAIRS_PER_SEGMENT: usize = 16;

/// One (S, R) sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPair {
    /// Host clock at the midpoint of the bracketing reads, ns.
    pub s_ns: i64,
    /// Tracer clock, ns.
    pub r_ns: i64,
    /// Width of the host-clock window that bracketed the R read, ns. The pair is exact to
    /// within half of it.
    pub read_window_ns: i64,
}

/// The tracer clock of standalone mode (no GPU, no XLA): the host clock itself, so the fit
/// is the identity up to read noise.
pub fn host_tracer_clock() -> u64 {
    realtime_ns() as u64
}

/// Takes one pair: `best_of` bracketed reads (at least 1), keeping the narrowest.
pub fn sample_pair(
    best_of: u32,
    read_s: &dyn Fn() -> i64,
    read_r: &dyn Fn() -> u64,
) -> SnapshotPair {
    let mut best: Option<SnapshotPair> = None;
    for _ in 0..best_of.max(1) {
        let s0 = read_s();
        let r = read_r() as i64;
        let s1 = read_s();
        let window = s1 - s0;
        if window < 0 {
            // The host clock stepped backwards between the reads: the pair is meaningless.
            continue;
        }
        let pair = SnapshotPair {
            s_ns: s0 + window / 2,
            r_ns: r,
            read_window_ns: window,
        };
        if best.is_none_or(|b| window < b.read_window_ns) {
            best = Some(pair);
        }
    }
    best.unwrap_or_else(|| {
        let s = read_s();
        SnapshotPair {
            s_ns: s,
            r_ns: read_r() as i64,
            read_window_ns: i64::MAX,
        }
    })
}

/// Samples pairs on a background thread every `period_ms` until stopped.
pub struct SnapshotSampler {
    stop: Arc<AtomicBool>,
    pairs: Arc<Mutex<Vec<SnapshotPair>>>,
    thread: Option<JoinHandle<()>>,
}

impl SnapshotSampler {
    /// Starts sampling; takes one pair immediately so even a short profile has a knot at
    /// its start. `read_r` is the tracer clock (the C++ hook's reader) or a host clock in
    /// standalone mode.
    pub fn start(period_ms: u64, best_of: u32, read_r: fn() -> u64) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let pairs = Arc::new(Mutex::new(Vec::new()));
        let (stop2, pairs2) = (stop.clone(), pairs.clone());
        let period = Duration::from_millis(period_ms.max(1));
        let thread = std::thread::Builder::new()
            .name("distprof-snapshot".into())
            .spawn(move || {
                while !stop2.load(Ordering::Acquire) {
                    let p = sample_pair(best_of, &realtime_ns, &read_r);
                    if let Ok(mut v) = pairs2.lock() {
                        v.push(p);
                    }
                    std::thread::park_timeout(period);
                }
            })?;
        Ok(Self {
            stop,
            pairs,
            thread: Some(thread),
        })
    }

    /// Stops the thread, takes a final pair (so the fit covers the profile's end) and
    /// returns every pair in sampling order.
    pub fn stop(mut self, best_of: u32, read_r: fn() -> u64) -> Vec<SnapshotPair> {
        self.halt();
        let mut v = std::mem::take(&mut *self.pairs.lock().unwrap_or_else(|e| e.into_inner()));
        v.push(sample_pair(best_of, &realtime_ns, &read_r));
        v
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for SnapshotSampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// One least-squares piece of the R -> S map: `S = s0_ns + slope * (R - r0_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FitSegment {
    /// R range of the pairs this piece was fitted on.
    pub r_first_ns: i64,
    pub r_last_ns: i64,
    pub r0_ns: i64,
    /// Fitted S at `r0_ns`, rounded to ns (epoch ns do not fit an f64 mantissa).
    pub s0_ns: i64,
    pub slope: f64,
    /// Largest and RMS |S - fit| over the piece's pairs, ns.
    pub max_residual_ns: f64,
    pub rms_residual_ns: f64,
}

impl FitSegment {
    /// S at tracer time `r_ps`, in ps (epoch ps need i128). S - R is not small (R may
    /// count from boot), so the integral part stays integral and only the slope term goes
    /// through f64.
    fn s_ps(&self, r_ps: i128) -> i128 {
        let dr_ps = (r_ps - self.r0_ns as i128 * 1000) as f64;
        self.s0_ns as i128 * 1000 + (self.slope * dr_ps).round() as i128
    }
}

/// One linear piece of the R -> S map: `S = s0 + slope * (R - r0)` for R in [lo, hi) ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RPiece {
    pub lo_ns: i64,
    pub hi_ns: i64,
    pub r0_ps: i128,
    pub s0_ps: i128,
    pub slope: f64,
}

impl RPiece {
    pub const EMPTY: Self = Self {
        lo_ns: 1,
        hi_ns: 0,
        r0_ps: 0,
        s0_ps: 0,
        slope: 1.0,
    };

    #[inline]
    pub fn contains(&self, r_ns: i64) -> bool {
        self.lo_ns <= r_ns && r_ns < self.hi_ns
    }

    pub fn s_ps(&self, r_ps: i128) -> i128 {
        self.s0_ps + (self.slope * (r_ps - self.r0_ps) as f64).round() as i128
    }
}

/// Piecewise-linear R -> S map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotFit {
    pub segments: Vec<FitSegment>,
}

impl SnapshotFit {
    /// Fits `pairs` (any order). Returns `None` for fewer than one pair. With a single pair
    /// the map is a pure offset.
    pub fn fit(pairs: &[SnapshotPair]) -> Option<Self> {
        let mut sorted: Vec<SnapshotPair> = pairs
            .iter()
            .copied()
            .filter(|p| p.read_window_ns != i64::MAX)
            .collect();
        sorted.sort_by_key(|p| p.r_ns);
        if sorted.is_empty() {
            return None;
        }
        let mut segments = Vec::new();
        let n = sorted.len();
        let mut start = 0;
        while start < n {
            let mut end = (start + PAIRS_PER_SEGMENT).min(n);
            // A short last piece would give a noisy slope: fold it into this one.
            if n - end < PAIRS_PER_SEGMENT / 2 {
                end = n;
            }
            segments.push(fit_piece(&sorted[start..end]));
            start = end;
        }
        Some(Self { segments })
    }

    /// The linear piece of the map that holds at tracer time `r_ns`.
    pub fn piece(&self, r_ns: i64) -> RPiece {
        let i = self
            .segments
            .partition_point(|s| s.r_last_ns < r_ns)
            .min(self.segments.len() - 1);
        let seg = &self.segments[i];
        if r_ns < seg.r_first_ns && i > 0 {
            // Between two pieces: the straight line from the end of one to the start of the
            // next keeps the map continuous and monotone.
            let prev = &self.segments[i - 1];
            let (a_r, b_r) = (prev.r_last_ns as i128 * 1000, seg.r_first_ns as i128 * 1000);
            let (a, b) = (prev.s_ps(a_r), seg.s_ps(b_r));
            let slope = (b - a) as f64 / (b_r - a_r).max(1) as f64;
            return RPiece {
                lo_ns: prev.r_last_ns,
                hi_ns: seg.r_first_ns,
                r0_ps: a_r,
                s0_ps: a,
                slope,
            };
        }
        let lo_ns = if i == 0 { i64::MIN } else { seg.r_first_ns };
        let hi_ns = if i + 1 == self.segments.len() {
            i64::MAX
        } else {
            seg.r_last_ns + 1
        };
        RPiece {
            lo_ns,
            hi_ns,
            r0_ps: seg.r0_ns as i128 * 1000,
            s0_ps: seg.s0_ns as i128 * 1000,
            slope: seg.slope,
        }
    }

    /// Maps tracer time to host time, in ps.
    pub fn r_to_s_ps(&self, r_ps: i128) -> i128 {
        // The ns value only chooses the piece: f64 rounding (256 ns at epoch scale) cannot
        // matter there because neighbouring pieces join continuously.
        self.piece((r_ps as f64 * 1e-3) as i64).s_ps(r_ps)
    }

    /// Maps tracer time to host time, in ns.
    pub fn r_to_s_ns(&self, r_ns: i64) -> i64 {
        self.r_to_s_ps(r_ns as i128 * 1000).div_euclid(1000) as i64
    }

    /// Largest residual over all pieces, ns.
    pub fn max_residual_ns(&self) -> f64 {
        self.segments
            .iter()
            .map(|s| s.max_residual_ns)
            .fold(0.0, f64::max)
    }
}

fn fit_piece(p: &[SnapshotPair]) -> FitSegment {
    let r0 = p[0].r_ns;
    let s_ref = p[0].s_ns;
    // Work in small differences: absolute epoch ns do not fit an f64 mantissa.
    let xs: Vec<f64> = p.iter().map(|q| (q.r_ns - r0) as f64).collect();
    let ys: Vec<f64> = p.iter().map(|q| (q.s_ns - s_ref) as f64).collect();
    let n = p.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 1.0 };
    let intercept = my - slope * mx;
    let res: Vec<f64> = xs
        .iter()
        .zip(&ys)
        .map(|(x, y)| y - (intercept + slope * x))
        .collect();
    let max_residual_ns = res.iter().map(|r| r.abs()).fold(0.0, f64::max);
    let rms_residual_ns = (res.iter().map(|r| r * r).sum::<f64>() / n).sqrt();
    FitSegment {
        r_first_ns: r0,
        r_last_ns: p[p.len() - 1].r_ns,
        r0_ns: r0,
        s0_ns: s_ref + intercept.round() as i64,
        slope,
        max_residual_ns,
        rms_residual_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A tracer clock with a known offset and rate against S: the fit must recover it to
    /// within the read noise.
    #[test]
    fn fit_recovers_known_offset_and_rate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let s_start: i64 = 1_763_000_000_000_000_000;
        let r_offset: i64 = -1_762_999_000_000_000_000; // R counts from about boot
        let rate_ppb = 35_000.0; // R runs 35 ppm fast
        let mut pairs = Vec::new();
        for k in 0..100 {
            let s = s_start + k * 100_000_000;
            let r = s + r_offset + ((s - s_start) as f64 * rate_ppb * 1e-9) as i64;
            let noise: i64 = rng.gen_range(-40..=40);
            pairs.push(SnapshotPair {
                s_ns: s + noise,
                r_ns: r,
                read_window_ns: 80,
            });
        }
        let fit = SnapshotFit::fit(&pairs).expect("fit");
        assert_eq!(fit.segments.len(), 100 / PAIRS_PER_SEGMENT);
        for k in [0i64, 13, 50, 99, 104] {
            let s_true = s_start + k * 100_000_000 + 37;
            let r = s_true + r_offset + ((s_true - s_start) as f64 * rate_ppb * 1e-9) as i64;
            let s_est = fit.r_to_s_ns(r);
            // A least-squares line through 16 points with +-40 ns noise can err by up to about
            // twice the noise at the ends of a piece.
            assert!(
                (s_est - s_true).abs() <= 80,
                "k={k}: error {} ns",
                s_est - s_true
            );
        }
        assert!(fit.max_residual_ns() <= 80.0 && fit.max_residual_ns() >= 10.0);
    }

    #[test]
    fn best_of_keeps_narrowest_window() {
        use std::cell::Cell;
        // Bracketing reads of three attempts: windows 1000, 10 and 1000 ns.
        let reads = [0i64, 1000, 2000, 2010, 3000, 4000];
        let i = Cell::new(0usize);
        let read_s = || {
            let v = reads[i.get()];
            i.set(i.get() + 1);
            v
        };
        let pair = sample_pair(3, &read_s, &|| 42);
        assert_eq!(
            pair,
            SnapshotPair {
                s_ns: 2005,
                r_ns: 42,
                read_window_ns: 10
            }
        );
    }

    #[test]
    fn sampler_thread_samples_at_the_period() {
        let sampler = SnapshotSampler::start(5, 5, host_tracer_clock).expect("spawn");
        std::thread::sleep(Duration::from_millis(60));
        let pairs = sampler.stop(5, host_tracer_clock);
        assert!(
            pairs.len() >= 5 && pairs.len() <= 20,
            "{} pairs",
            pairs.len()
        );
        // R is the host clock itself, so S - R must be within the read window.
        for p in &pairs {
            assert!((p.s_ns - p.r_ns).abs() <= p.read_window_ns / 2 + 1, "{p:?}");
        }
    }
}
