//! The node's clock: the real CLOCK_REALTIME, optionally seen through a virtual clock.
//!
//! All processes on one machine (and in all its network namespaces) share one real clock,
//! so tests give each node a `VirtualClock` (offset, drift, slow wander) that is applied
//! to every timestamp the node records: kernel RX/TX stamps, user-space stamps and window
//! bounds. The truth is then known exactly: `local = real + offset + drift * (real - epoch)
//! + wander(real)`.

use serde::{Deserialize, Serialize};

/// Period of the sinusoidal wander: slow compared to a window, fast compared to a run of
/// hours, like the temperature swings that make real oscillators wander.
pub const WANDER_PERIOD_S: f64 = 60.0;

/// A virtual clock derived from the real one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VirtualClock {
    /// How far the node's clock is ahead of the real clock at `epoch_real_ns`.
    pub offset_ns: i64,
    /// How fast it gains on the real clock, in parts per billion.
    pub drift_ppb: f64,
    /// Amplitude of a sinusoidal wander of period `WANDER_PERIOD_S`, in nanoseconds.
    pub wander_ns: f64,
    /// Real time at which drift and wander are zero; shared by all nodes of a run.
    pub epoch_real_ns: i64,
}

impl VirtualClock {
    pub const IDENTITY: VirtualClock =
        VirtualClock { offset_ns: 0, drift_ppb: 0.0, wander_ns: 0.0, epoch_real_ns: 0 };

    /// Maps a real CLOCK_REALTIME value to this node's clock.
    pub fn apply(&self, real_ns: i64) -> i64 {
        let dt_ns = (real_ns - self.epoch_real_ns) as f64;
        let drift = self.drift_ppb * 1e-9 * dt_ns;
        let wander = if self.wander_ns == 0.0 {
            0.0
        } else {
            self.wander_ns * (std::f64::consts::TAU * dt_ns * 1e-9 / WANDER_PERIOD_S).sin()
        };
        real_ns + self.offset_ns + (drift + wander).round() as i64
    }

    /// `apply` without rounding, on times relative to `epoch_real_ns` (absolute times in
    /// an f64 would keep only 256 ns): the truth a test compares an estimate with.
    /// Returns the clock's reading minus `epoch_real_ns` at `epoch_real_ns + dt_ns`.
    pub fn read_rel_ns(&self, dt_ns: f64) -> f64 {
        let wander = if self.wander_ns == 0.0 {
            0.0
        } else {
            self.wander_ns * (std::f64::consts::TAU * dt_ns * 1e-9 / WANDER_PERIOD_S).sin()
        };
        dt_ns + self.offset_ns as f64 + self.drift_ppb * 1e-9 * dt_ns + wander
    }

    /// The inverse of `read_rel_ns`: real time (relative to the epoch) at which the clock
    /// reads `epoch_real_ns + local_rel_ns`. Newton steps; the wander is slow, so a few
    /// reach well under a nanosecond.
    pub fn invert_rel_ns(&self, local_rel_ns: f64) -> f64 {
        let rate = 1.0 + self.drift_ppb * 1e-9;
        let mut t = local_rel_ns - self.offset_ns as f64;
        for _ in 0..6 {
            t -= (self.read_rel_ns(t) - local_rel_ns) / rate;
        }
        t
    }

    /// How far this clock is ahead of `reference` at real time `real_ns` (nanoseconds).
    pub fn offset_from_ns(&self, reference: &VirtualClock, real_ns: i64) -> i64 {
        self.apply(real_ns) - reference.apply(real_ns)
    }

    /// Rate at which this clock gains on `reference`, in ppm (ignoring wander).
    pub fn drift_from_ppm(&self, reference: &VirtualClock) -> f64 {
        ((1.0 + self.drift_ppb * 1e-9) / (1.0 + reference.drift_ppb * 1e-9) - 1.0) * 1e6
    }

    /// Parses `+1500000ns,-12.5ppm` (offset, drift, optional `wander=200ns`). Units:
    /// offsets in `ns`, `us`, `ms`, `s`; drift in `ppm` or `ppb`. The epoch is set by the
    /// caller (the run's start).
    pub fn parse(text: &str) -> Result<VirtualClock, String> {
        let mut clock = VirtualClock::IDENTITY;
        let mut have_offset = false;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some(w) = part.strip_prefix("wander=") {
                clock.wander_ns = parse_duration_ns(w).map_err(|e| {
                    format!("clock `{text}`: wander `{w}`: {e} (e.g. `wander=200ns`)")
                })?;
            } else if let Some(v) = part.strip_suffix("ppm") {
                let ppm: f64 = v.parse().map_err(|_| {
                    format!("clock `{text}`: drift `{part}` is not a number of ppm (e.g. `-12.5ppm`)")
                })?;
                clock.drift_ppb = ppm * 1000.0;
            } else if let Some(v) = part.strip_suffix("ppb") {
                clock.drift_ppb = v.parse().map_err(|_| {
                    format!("clock `{text}`: drift `{part}` is not a number of ppb (e.g. `250ppb`)")
                })?;
            } else {
                let ns = parse_duration_ns(part).map_err(|e| {
                    format!("clock `{text}`: `{part}`: {e}; expected e.g. `+1500000ns,-12.5ppm`")
                })?;
                if have_offset {
                    return Err(format!("clock `{text}`: two offsets given; give one offset and one drift"));
                }
                have_offset = true;
                clock.offset_ns = ns.round() as i64;
            }
        }
        if !clock.drift_ppb.is_finite() || clock.drift_ppb.abs() > 1e6 {
            return Err(format!("clock `{text}`: drift must be finite and within ±1000 ppm"));
        }
        Ok(clock)
    }
}

fn parse_duration_ns(s: &str) -> Result<f64, String> {
    let (num, scale) = if let Some(v) = s.strip_suffix("ns") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix("us") {
        (v, 1e3)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1e6)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e9)
    } else {
        return Err("missing unit (ns, us, ms or s)".into());
    };
    let v: f64 = num.parse().map_err(|_| format!("`{num}` is not a number"))?;
    let ns = v * scale;
    if !ns.is_finite() || ns.abs() > 1e18 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(ns)
}

/// Reads CLOCK_REALTIME in nanoseconds: the host clock S, the clock XLA's profiler stamps
/// host events with (`EnvTime::NowNanos`).
// The casts are no-ops on 64-bit Linux only; time_t and c_long are 32 bits elsewhere.
#[allow(clippy::unnecessary_cast)]
pub fn realtime_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

/// CPU time of the calling thread, in seconds: what "on one core" means on a shared
/// machine, where wall time also counts the other processes.
#[allow(clippy::unnecessary_cast)]
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offset_and_drift() {
        let c = VirtualClock::parse("+1500000ns,-12.5ppm").unwrap();
        assert_eq!(c.offset_ns, 1_500_000);
        assert_eq!(c.drift_ppb, -12_500.0);
        let c = VirtualClock::parse("-2ms, 300ppb, wander=150ns").unwrap();
        assert_eq!(c.offset_ns, -2_000_000);
        assert_eq!(c.drift_ppb, 300.0);
        assert_eq!(c.wander_ns, 150.0);
    }

    #[test]
    fn errors_name_the_input_and_the_fix() {
        let e = VirtualClock::parse("+15,3ppm").unwrap_err();
        assert!(e.contains("`+15`") && e.contains("unit"), "{e}");
        let e = VirtualClock::parse("1ms,xppm").unwrap_err();
        assert!(e.contains("xppm") && e.contains("-12.5ppm"), "{e}");
        let e = VirtualClock::parse("1ms,2ms").unwrap_err();
        assert!(e.contains("two offsets"), "{e}");
        assert!(VirtualClock::parse("0ns,5000ppm").is_err());
    }

    #[test]
    fn applies_offset_and_drift_from_the_epoch() {
        let c = VirtualClock { offset_ns: 1000, drift_ppb: 10_000.0, wander_ns: 0.0, epoch_real_ns: 5_000_000_000 };
        assert_eq!(c.apply(5_000_000_000), 5_000_001_000);
        // 1 s later at +10 ppm: 10 us gained.
        assert_eq!(c.apply(6_000_000_000), 6_000_011_000);
        let r = VirtualClock { offset_ns: -500, ..VirtualClock::IDENTITY };
        let r = VirtualClock { epoch_real_ns: 5_000_000_000, ..r };
        assert_eq!(c.offset_from_ns(&r, 6_000_000_000), 11_500);
        assert!((c.drift_from_ppm(&r) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn exact_inverse_round_trips() {
        let c = VirtualClock { offset_ns: 1_500_000, drift_ppb: -12_500.0, wander_ns: 200.0, epoch_real_ns: 1_000_000_000 };
        for local in [0.0, 3.3e9, 7.7e10] {
            let t = c.invert_rel_ns(local);
            assert!((c.read_rel_ns(t) - local).abs() < 1e-3, "{local}");
            let real = c.epoch_real_ns + t.round() as i64;
            assert!(((c.apply(real) - c.epoch_real_ns) as f64 - local).abs() <= 1.5);
        }
    }

    #[test]
    fn wander_is_bounded_and_slow() {
        let c = VirtualClock { wander_ns: 200.0, ..VirtualClock::IDENTITY };
        let quarter = (WANDER_PERIOD_S / 4.0 * 1e9) as i64;
        assert_eq!(c.apply(quarter) - quarter, 200);
        for t in (0..120).map(|s| s * 1_000_000_000i64) {
            assert!((c.apply(t) - t).abs() <= 200);
        }
    }
}
