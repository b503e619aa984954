//! The whole run's windows, each with a drift fit that looks both ways.
//!
//! While probing, a window's drift can only come from it and the windows before it
//! (`online::History`). Once later windows exist, a span centred on the window follows a
//! wandering rate better (the rate a one-sided span measures lags the window's own by half
//! the span) and the first window of a run gets a span at all. This is what the model a
//! run delivers uses: the export at profiler stop and every offline estimate. A window is
//! final once the windows its span needs have arrived, so memory stays a few windows.

use super::drift::long_lines;
use super::failover::Anchoring;
use super::online::{fit_window, WindowEstimate};
use super::wander::add_wander_terms;
use super::window_fits::{WindowFits, WindowSpec};
use crate::clock::thread_cpu_s;
use crate::record::ProbeRecord;
use super::settings::EstimatorSettings;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Smoother {
    settings: EstimatorSettings,
    /// Windows each side of a window in its drift fit: 2 * radius + 1 in all, shifted
    /// inwards at the ends of the run.
    radius: usize,
    /// Windows `first..first + buf.len()` of the run.
    buf: VecDeque<WindowFits>,
    first: usize,
    /// Windows pushed, and the next window to finish.
    pushed: usize,
    next: usize,
    /// The final windows are solved in order through it, re-anchored where the reference
    /// cannot place them (`failover`).
    anchoring: Anchoring,
}

impl Smoother {
    /// `window_ns`: the run's window length (the radius follows from `drift_span_s`).
    pub fn new(settings: EstimatorSettings, window_ns: i64) -> Self {
        let radius = settings.smoothing_radius(window_ns);
        Self { settings, radius, buf: VecDeque::new(), first: 0, pushed: 0, next: 0, anchoring: Anchoring::default() }
    }

    /// Adds the run's next window; returns the windows that are final now, in order.
    pub fn push(&mut self, fits: WindowFits) -> Vec<WindowEstimate> {
        let done = self.push_fits(fits);
        done.iter().map(|f| self.anchoring.solve(f, &self.settings)).collect()
    }

    /// As `push`, the final windows' fits before the network solve: a node's plane carries
    /// these (`estimate::shared`) so that merge can solve the whole network.
    pub fn push_fits(&mut self, fits: WindowFits) -> Vec<WindowFits> {
        self.buf.push_back(fits);
        self.pushed += 1;
        let mut out = Vec::new();
        // Window k's span starts at k - radius (or 0) and needs 2 * radius more windows.
        while self.next < self.pushed && self.next + self.radius < self.pushed {
            let lo = self.next.saturating_sub(self.radius);
            out.push(self.finish_window(lo, self.next + self.radius));
        }
        out
    }

    /// The remaining windows, their spans shifted back from the end of the run.
    pub fn finish(self) -> Vec<WindowEstimate> {
        let (settings, mut anchoring) = (self.settings, self.anchoring.clone());
        self.finish_fits().iter().map(|f| anchoring.solve(f, &settings)).collect()
    }

    /// As `finish`, before the network solve.
    pub fn finish_fits(mut self) -> Vec<WindowFits> {
        let mut out = Vec::new();
        while self.next < self.pushed {
            let lo = self.next.saturating_sub(self.radius);
            out.push(self.finish_window(lo, self.pushed - 1));
        }
        out
    }

    /// Fixes the lines of window `next` with the span starting at window `lo`.
    fn finish_window(&mut self, lo: usize, hi: usize) -> WindowFits {
        let k = self.next;
        let at = |j: usize| j - self.first;
        let lines = {
            let neighbours: Vec<&WindowFits> = (lo..=hi).filter(|&j| j != k).map(|j| &self.buf[at(j)]).collect();
            long_lines(&self.buf[at(k)], &neighbours, &self.settings)
        };
        let fits = &mut self.buf[at(k)];
        fits.set_lines(lines);
        let done = fits.clone();
        self.next += 1;
        // The spans of later windows start at next - 2 * radius at the earliest (at the end).
        while self.first + 2 * self.radius < self.next && !self.buf.is_empty() {
            self.buf.pop_front();
            self.first += 1;
        }
        done
    }
}

/// Every window of a run estimated as the run's model is (`Smoother`), with each window's
/// thread CPU time in ms: its fits plus its share of the solve that finished it.
/// `windows` yields each window's records and spec, in order.
pub fn estimate_run_windows<R: AsRef<[ProbeRecord]>>(
    windows: impl IntoIterator<Item = (R, WindowSpec)>,
    settings: &EstimatorSettings,
) -> Vec<(WindowEstimate, f64)> {
    let mut smoother: Option<Smoother> = None;
    let mut out: Vec<(WindowEstimate, f64)> = Vec::new();
    let mut fit_ms: Vec<f64> = Vec::new();
    let solved = |done: Vec<WindowEstimate>, ms: f64, fit_ms: &[f64], out: &mut Vec<(WindowEstimate, f64)>| {
        let share = ms / done.len().max(1) as f64;
        for e in done {
            let own = fit_ms.get(out.len()).copied().unwrap_or(0.0);
            out.push((e, own + share));
        }
    };
    let mut reference = 0;
    for (records, spec) in windows {
        reference = spec.reference;
        let started = thread_cpu_s();
        let fits = fit_window(records.as_ref(), &spec, settings);
        fit_ms.push((thread_cpu_s() - started) * 1e3);
        let s = smoother.get_or_insert_with(|| Smoother::new(*settings, spec.end_local_ns - spec.start_local_ns));
        let started = thread_cpu_s();
        let done = s.push(fits);
        solved(done, (thread_cpu_s() - started) * 1e3, &fit_ms, &mut out);
    }
    if let Some(s) = smoother {
        let started = thread_cpu_s();
        let done = s.finish();
        solved(done, (thread_cpu_s() - started) * 1e3, &fit_ms, &mut out);
    }
    // The run's wander, measured from all its windows, widens each window's sigmas.
    add_wander_terms(out.iter_mut().map(|(e, _)| e), reference, settings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::online::fit_window;

    fn spec(k: u64) -> WindowSpec {
        let w = 15_000_000_000;
        WindowSpec { window_id: k, start_local_ns: k as i64 * w, end_local_ns: (k as i64 + 1) * w, num_nodes: 3, reference: 0 }
    }

    /// Each window comes out once, in order, as soon as its span is complete, and the
    /// smoother holds only the windows later spans still need.
    #[test]
    fn windows_come_out_once_in_order_and_memory_stays_bounded() {
        let settings = EstimatorSettings::default();
        let mut s = Smoother::new(settings, 15_000_000_000);
        assert_eq!(s.radius, 1);
        let mut ids = Vec::new();
        for k in 0..40 {
            let done = s.push(fit_window(&[], &spec(k), &settings));
            // One window behind: window k - 1 is final once window k exists.
            assert_eq!(done.iter().map(|e| e.window_id).collect::<Vec<_>>(), if k == 0 { vec![] } else { vec![k - 1] });
            ids.extend(done.iter().map(|e| e.window_id));
            assert!(s.buf.len() <= 2 * s.radius + 2, "{} windows held", s.buf.len());
        }
        ids.extend(s.finish().iter().map(|e| e.window_id));
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
        // A run of one window, and of none.
        let mut one = Smoother::new(settings, 15_000_000_000);
        assert!(one.push(fit_window(&[], &spec(0), &settings)).is_empty());
        assert_eq!(one.finish().len(), 1);
        assert!(Smoother::new(settings, 15_000_000_000).finish().is_empty());
    }
}
