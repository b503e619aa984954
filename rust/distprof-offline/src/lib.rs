//! distprof's offline tools: what runs after a job, on the traces and JSONL it left.
//!
//! - [`merge`]: every node's `.xplane.pb` onto one global timeline (XProf run directory and
//!   Chrome JSON).
//! - [`validate`]: happens-before violations of collectives, before and after correction.
//! - [`report`]: the sync quality of a run as one self-contained HTML page.
//! - [`run_dir_estimate`]: the network-wide estimate of a finished run from every node's
//!   JSONL (`--run-dir`).
//!
//! The runtime crate `distprof` (what the XLA plugin links) never depends on this one.

pub mod merge;
pub mod report;
pub mod run_dir_estimate;
pub mod validate;

/// Set-up shared by this crate's unit tests. (The synthetic XSpace builder of
/// distprof-testkit serves the integration tests; unit tests cannot link it, since it
/// depends on this crate.)
#[cfg(test)]
pub(crate) mod test_support {
    use distprof::model::ClockSegment;

    /// Back-to-back windows of `window_ns` from `t0_ns`, one per offset (ns), all with
    /// `drift_ppb` and an uncertainty of 40 ns; `bound_flag(w)` gives window `w`'s bound
    /// and whether it is flagged.
    pub fn segments(
        t0_ns: i64,
        window_ns: i64,
        offsets_ns: &[f64],
        drift_ppb: f64,
        bound_flag: impl Fn(usize) -> (f64, bool),
    ) -> Vec<ClockSegment> {
        offsets_ns
            .iter()
            .enumerate()
            .map(|(w, &offset_ns)| {
                let start = t0_ns + w as i64 * window_ns;
                let (bound_ns, flagged) = bound_flag(w);
                ClockSegment {
                    window_id: w as u64,
                    start_local_ns: start,
                    end_local_ns: start + window_ns,
                    mid_local_ns: start + window_ns / 2,
                    offset_ns,
                    drift_ppb,
                    bound_ns,
                    uncertainty_ns: 40.0,
                    drift_uncertainty_ppb: 5.0,
                    flagged,
                break_at_start: false,
                }
            })
            .collect()
    }
}
