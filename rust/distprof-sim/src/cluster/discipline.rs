//! What a time daemon does to a host clock, on top of the crystal's own drift and wander:
//! chrony's servo, which sets a new frequency at every poll, and ntpd's slew, which
//! corrects a large offset by running the clock up to 500 ppm fast or slow for as long as
//! that takes. Both only rewrite a `SimClock`'s rates; the phase stays continuous.

use super::clock::{SimClock, KNOT_NS};
use super::random::Stream;
use serde::Serialize;

/// A chrony-like servo. At every poll it measures the clock's offset from true time (with
/// the noise of an NTP exchange over a LAN), and sets the frequency that removes that
/// offset by the next poll, within `max_frequency_error_ppb` of true time: the crystal's
/// own drift is cancelled (the servo has learnt it), its wander between polls is not.
/// The poll interval is a power of two between the bounds, fixed per node, as chrony's
/// minpoll/maxpoll give.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Discipline {
    pub poll_min_s: f64,
    pub poll_max_s: f64,
    /// Largest frequency error the servo sets against true time, ppb.
    pub max_frequency_error_ppb: f64,
    /// One sigma of the servo's offset measurement, ns.
    pub measurement_sigma_ns: f64,
}

impl Discipline {
    /// chrony on a LAN: polls of 16-64 s, corrections within +-1 ppm, measured offsets
    /// good to ~20 us (a LAN NTP exchange through the kernel).
    pub fn chrony() -> Self {
        Self { poll_min_s: 16.0, poll_max_s: 64.0, max_frequency_error_ppb: 1000.0, measurement_sigma_ns: 20_000.0 }
    }

    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !(self.poll_min_s >= KNOT_NS * 1e-9 && self.poll_max_s >= self.poll_min_s && self.poll_max_s <= 3600.0) {
            p.push(format!(
                "discipline.poll_min_s = {}, poll_max_s = {}: need {} <= min <= max <= 3600 s",
                self.poll_min_s,
                self.poll_max_s,
                KNOT_NS * 1e-9
            ));
        }
        for (name, v) in [("max_frequency_error_ppb", self.max_frequency_error_ppb), ("measurement_sigma_ns", self.measurement_sigma_ns)] {
            if !(v.is_finite() && v >= 0.0) {
                p.push(format!("discipline.{name} = {v}: must be a finite number >= 0"));
            }
        }
        p
    }

    /// Disciplines `clock` from its first knot on; returns the knots at which it polled.
    pub fn apply(&self, clock: &mut SimClock, rng: &mut Stream) -> Vec<usize> {
        // Powers of two within the bounds (at least the lower bound itself).
        let mut polls = vec![self.poll_min_s];
        while polls[polls.len() - 1] * 2.0 <= self.poll_max_s {
            polls.push(polls[polls.len() - 1] * 2.0);
        }
        let poll_s = polls[(rng.uniform(0.0, polls.len() as f64) as usize).min(polls.len() - 1)];
        let knots_per_poll = ((poll_s * 1e9 / KNOT_NS).round() as usize).max(1);
        let first = (rng.uniform(0.0, knots_per_poll as f64) as usize).min(knots_per_poll - 1);
        let max_rate = self.max_frequency_error_ppb * 1e-9;
        let mut phase = clock.read(clock.knot_start_ns(0)) - clock.knot_start_ns(0);
        let mut poll_knots = Vec::new();
        let mut noise = || rng.normal(self.measurement_sigma_ns);
        clock.adjust_rates(|rates| {
            // Before the first poll: what the servo set at the poll before the run.
            let mut target = (-(phase + noise()) / (poll_s * 1e9)).clamp(-max_rate, max_rate);
            let mut correction = target - rates[0];
            for k in 0..rates.len() {
                if k >= first && (k - first) % knots_per_poll == 0 {
                    target = (-(phase + noise()) / (poll_s * 1e9)).clamp(-max_rate, max_rate);
                    // The servo knows the crystal's frequency as of this poll.
                    correction = target - rates[k];
                    poll_knots.push(k);
                }
                rates[k] += correction;
                phase += rates[k] * KNOT_NS;
            }
        });
        poll_knots
    }
}

/// An ntpd-like slew: the kernel runs the clock `rate_ppb` fast or slow until an offset of
/// `amount_ns` is corrected, so it lasts |amount| / rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slew {
    /// Share of the non-reference nodes that slew once, at an instant in the middle half
    /// of the run.
    pub fraction: f64,
    pub rate_ppb: f64,
    /// The corrected offset is uniform in +-[min, max].
    pub min_amount_ns: f64,
    pub max_amount_ns: f64,
}

impl Slew {
    /// ntpd's kernel slew: 500 ppm, correcting 0.5-5 ms (1-10 s of slewing) on a quarter
    /// of the nodes.
    pub fn ntpd() -> Self {
        Self { fraction: 0.25, rate_ppb: 500_000.0, min_amount_ns: 500_000.0, max_amount_ns: 5_000_000.0 }
    }

    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !(0.0..=1.0).contains(&self.fraction) {
            p.push(format!("slew.fraction = {}: must be in [0, 1]", self.fraction));
        }
        if !(self.rate_ppb > 0.0 && self.rate_ppb <= 1e6) {
            p.push(format!("slew.rate_ppb = {}: must be in (0, 1e6]", self.rate_ppb));
        }
        if !(self.min_amount_ns >= 0.0 && self.max_amount_ns >= self.min_amount_ns && self.max_amount_ns.is_finite()) {
            p.push(format!(
                "slew.min_amount_ns = {}, max_amount_ns = {}: need 0 <= min <= max",
                self.min_amount_ns, self.max_amount_ns
            ));
        }
        p
    }

    /// Slews `clock` by `amount_ns` from the start of knot `from`: the full rate over whole
    /// knots, the rest in the last one, so the phase moves by exactly `amount_ns`. Returns
    /// the knots it spans.
    pub fn apply(&self, clock: &mut SimClock, from: usize, amount_ns: f64) -> std::ops::Range<usize> {
        let per_knot = self.rate_ppb * 1e-9 * KNOT_NS;
        let whole = (amount_ns.abs() / per_knot).floor() as usize;
        let rest = amount_ns.abs() - whole as f64 * per_knot;
        let sign = amount_ns.signum();
        let end = (from + whole + (rest > 0.0) as usize).min(clock.knot_count());
        clock.adjust_rates(|rates| {
            for (i, r) in rates[from..end].iter_mut().enumerate() {
                *r += sign * (if i < whole { per_knot } else { rest }) / KNOT_NS;
            }
        });
        from..end
    }
}

#[cfg(test)]
mod tests {
    use super::super::random::stream;
    use super::*;

    /// A disciplined clock's frequency changes at its polls (and only there, beyond the
    /// crystal's wander), stays within the servo's bound plus that wander, and keeps the
    /// clock within a few measurement sigmas of true time.
    #[test]
    fn the_servo_changes_frequency_at_polls_within_its_bound() {
        let d = Discipline::chrony();
        let wander = 1.0; // ppb/sqrt(s)
        for seed in 0..8 {
            let mut rng = stream(seed, 7, 0, 0);
            let mut c = SimClock::new(-2.5e9, 300e9, 50_000.0, 40_000.0, wander, &mut rng);
            let crystal = c.clone();
            let polls = d.apply(&mut c, &mut rng);
            let n = c.knot_count();
            // 300 s at 16-64 s polls.
            assert!((4..=20).contains(&polls.len()), "seed {seed}: {} polls", polls.len());
            let gaps: Vec<usize> = polls.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(gaps.iter().all(|&g| g == gaps[0]) && [64, 128, 256].contains(&gaps[0]), "seed {seed}: {gaps:?}");
            // Between polls the correction is constant: the rate moves with the crystal only.
            let correction = |k: usize| c.rate_of_knot(k) - crystal.rate_of_knot(k);
            let mut changes = 0;
            for k in 1..n {
                let changed = (correction(k) - correction(k - 1)).abs() > 1e-15;
                assert!(!changed || polls.contains(&k), "seed {seed}: correction changed at knot {k}, not a poll");
                changes += (changed && (correction(k) - correction(k - 1)).abs() > 10e-9) as usize;
            }
            assert!(changes * 2 >= polls.len(), "seed {seed}: only {changes} of {} polls moved the frequency by 10 ppb", polls.len());
            // The crystal wanders by ~1 ppb/sqrt(s) * sqrt(64 s) = 8 ppb between polls.
            let bound = d.max_frequency_error_ppb * 1e-9 + 50e-9;
            assert!((0..n).all(|k| c.rate_of_knot(k).abs() <= bound), "seed {seed}: rate beyond +-1 ppm");
            let worst = (polls[0]..n).map(|k| (c.read(c.knot_start_ns(k)) - c.knot_start_ns(k)).abs()).fold(0.0, f64::max);
            assert!(worst < 6.0 * d.measurement_sigma_ns + 64e9 * 50e-9, "seed {seed}: phase {worst} ns");
        }
    }

    #[test]
    fn a_slew_moves_the_phase_by_its_amount_at_its_rate() {
        let s = Slew::ntpd();
        let mut c = SimClock::new(-2.5e9, 60e9, 0.0, 0.0, 0.0, &mut stream(1, 7, 0, 0));
        let from = c.knot_of(20e9);
        let t0 = c.knot_start_ns(from);
        let span = s.apply(&mut c, from, -3_000_000.0);
        // 3 ms at 500 ppm: 6 s, 24 knots.
        assert_eq!(span, from..from + 24);
        assert!((c.read(t0) - t0).abs() < 1e-6);
        let t1 = c.knot_start_ns(span.end);
        assert!((c.read(t1) - t1 + 3_000_000.0).abs() < 1e-3, "{}", c.read(t1) - t1);
        assert!((c.rate_of_knot(from) + 500e-6).abs() < 1e-12);
        assert_eq!(c.rate_of_knot(span.end), 0.0);
    }
}
