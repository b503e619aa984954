//! A trace and a model must belong together: the checks merge makes before it moves any
//! event, each failing with an error that names both files.
//!
//! - One run: every input plane carries the session id its rendezvous agreed; the planes
//!   must agree with each other and with the model's origin (the JSONL meta lines of
//!   `--run-dir`).
//! - One host and process: a plane's host name is among the host names its own trace
//!   records (XLA's planes name the machine), and a given model names a node the traces
//!   have.
//! - Inside the model's time: the trace's profile span lies inside the model's windows
//!   extended by [`MAX_EXTRAPOLATION_NS`]; what lies outside the windows is extrapolated,
//!   stated per node (`extrapolated_ns`) and grown into its bound at
//!   [`EXTRAPOLATION_RATE`] (the estimator's own allowance beyond its points) and into its
//!   uncertainty by the drift's sigma (`max_uncertainty_ns`); a node whose profile reaches
//!   beyond [`MAX_MERGE_UNCERTAINTY_NS`] is flagged (`uncertainty_exceeded`) and the merge
//!   says so.
//! - The model's own windows: a given model shares windows (id and start) with the model
//!   in the node's own plane, since both come from the node's probe windows of one run;
//!   `--models` files record no session, so this is what tells another run's model apart.
//! - Sane values: a model with a non-finite or absurd offset, drift or bound is refused.
//!
//! `--force` turns the identity and time checks off (for experts who know why the files
//! disagree); sane values are never optional.

use super::MergeError;
use distprof::distprof_plane::DistprofPlaneData;
use distprof::model::NodeClockModel;
use std::path::{Path, PathBuf};

/// How far beyond its windows a model may be applied: one default window each way (a
/// profile starts a little before the first window closes and stops after the last).
pub const MAX_EXTRAPOLATION_NS: i64 = 60_000_000_000;
/// Growth of the bound per ns of extrapolation (1 ppm: beyond any fitted rate error; the
/// failover's carried bound grows at the same rate).
pub const EXTRAPOLATION_RATE: f64 = distprof::estimate::failover::EXTRAPOLATION_BOUND_RATE;
/// An event whose correction is more uncertain than this (one sigma, ns) is placed, but
/// its node is flagged in the merge's summary: the estimator flags a window beyond the
/// same default (`max_uncertainty_ns`), and interpolation or extrapolation must not carry
/// an event past what a window itself would not be trusted with.
pub const MAX_MERGE_UNCERTAINTY_NS: f64 = distprof::config::Config::DEFAULT_MAX_UNCERTAINTY_NS as f64;
/// Clock offsets beyond a day are not a clock model but a broken file.
pub const MAX_ABS_OFFSET_NS: f64 = 86_400e9;
/// Rates beyond 1000 ppm are not a crystal (the network solve rejects them too).
pub const MAX_ABS_DRIFT_PPB: f64 = 1e6;

/// Where given models come from, for the checks and the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelOrigin {
    /// The `--models` file or the `--run-dir` directory.
    pub path: PathBuf,
    /// The session the models were estimated in, when the origin records it.
    pub session_id: Option<String>,
}

/// Refuses a model whose numbers cannot be a clock: non-finite, offsets beyond a day,
/// drifts beyond 1000 ppm, negative bounds, windows out of order.
pub fn check_sane(model: &NodeClockModel, origin: &Path) -> Result<(), MergeError> {
    for s in &model.segments {
        let problem = if !(s.offset_ns.is_finite() && s.drift_ppb.is_finite() && s.bound_ns.is_finite()) {
            Some("a non-finite offset, drift or bound".to_string())
        } else if s.offset_ns.abs() > MAX_ABS_OFFSET_NS {
            Some(format!("offset {} ns (beyond a day)", s.offset_ns))
        } else if s.drift_ppb.abs() > MAX_ABS_DRIFT_PPB {
            Some(format!("drift {} ppb (beyond 1000 ppm)", s.drift_ppb))
        } else if s.bound_ns < 0.0 {
            Some(format!("bound {} ns (negative)", s.bound_ns))
        } else if !(s.start_local_ns <= s.mid_local_ns && s.mid_local_ns <= s.end_local_ns) {
            Some("a midpoint outside its window".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(MergeError::AbsurdModel { origin: origin.to_path_buf(), node: model.node, window: s.window_id, problem });
        }
    }
    Ok(())
}

/// Every plane of one session; with `origin`'s session where it records one.
pub fn check_sessions(planes: &[(&Path, &DistprofPlaneData)], origin: Option<&ModelOrigin>) -> Result<(), MergeError> {
    let mut first: Option<(&Path, &str)> = None;
    for &(path, p) in planes.iter().filter(|(_, p)| !p.session_id.is_empty()) {
        match first {
            None => first = Some((path, &p.session_id)),
            Some((a, s)) if s != p.session_id => {
                return Err(MergeError::MixedSessions { a: a.to_path_buf(), a_session: s.to_string(), b: path.to_path_buf(), b_session: p.session_id.clone() })
            }
            _ => {}
        }
    }
    if let (Some((trace, trace_session)), Some(o)) = (first, origin) {
        if let Some(model_session) = o.session_id.as_deref().filter(|s| *s != trace_session) {
            return Err(MergeError::ForeignModels {
                trace: trace.to_path_buf(),
                trace_session: trace_session.to_string(),
                models: o.path.clone(),
                models_session: model_session.to_string(),
            });
        }
    }
    Ok(())
}

/// A given model (`--models`, `--run-dir`) against the model in the node's own plane: both
/// come from the node's probe windows of one run, so they share windows (same id, same
/// start on the node's clock). A model with none of the plane's windows was estimated in
/// another run (or another time of this one) and would shift the node silently; it is
/// refused, naming both files. Nothing to compare where the plane holds no windows.
pub fn check_given_windows(trace: &Path, plane: &DistprofPlaneData, given: &NodeClockModel, origin: &Path) -> Result<(), MergeError> {
    let own = &plane.model.segments;
    if own.is_empty() || given.segments.is_empty() {
        return Ok(());
    }
    let shared = given.segments.iter().any(|g| own.iter().any(|o| o.window_id == g.window_id && o.start_local_ns == g.start_local_ns));
    if shared {
        return Ok(());
    }
    let span = |s: &[distprof::model::ClockSegment]| (s.first().map_or(0, |w| w.start_local_ns), s.last().map_or(0, |w| w.end_local_ns));
    Err(MergeError::ForeignWindows { trace: trace.to_path_buf(), models: origin.to_path_buf(), node: given.node, given_ns: span(&given.segments), own_ns: span(own) })
}

/// The plane's host among the trace's own host names (when both name one).
pub fn check_host(path: &Path, plane: &DistprofPlaneData, trace_hosts: &[String]) -> Result<(), MergeError> {
    if plane.hostname.is_empty() || trace_hosts.is_empty() || trace_hosts.iter().any(|h| *h == plane.hostname) {
        return Ok(());
    }
    Err(MergeError::ForeignPlane { path: path.to_path_buf(), plane_host: plane.hostname.clone(), trace_hosts: trace_hosts.to_vec() })
}

/// How far the trace's span `[start, stop]` (host clock) lies outside the model's windows,
/// ns; an error naming both files beyond [`MAX_EXTRAPOLATION_NS`].
pub fn extrapolation_ns(
    trace: &Path,
    span: (Option<i64>, Option<i64>),
    model: &NodeClockModel,
    origin: &Path,
) -> Result<i64, MergeError> {
    let (Some(first), Some(last)) = (model.segments.first(), model.segments.last()) else { return Ok(0) };
    let (lo, hi) = (first.start_local_ns, last.end_local_ns);
    let worst = outside_windows_ns(span, model);
    if worst > MAX_EXTRAPOLATION_NS {
        return Err(MergeError::OutsideModel {
            trace: trace.to_path_buf(),
            models: origin.to_path_buf(),
            node: model.node,
            span_ns: span,
            windows_ns: (lo, hi),
            outside_s: worst as f64 / 1e9,
        });
    }
    Ok(worst)
}

/// How far `span` lies outside the model's windows, ns (0 inside, or without windows).
pub fn outside_windows_ns(span: (Option<i64>, Option<i64>), model: &NodeClockModel) -> i64 {
    let (Some(first), Some(last)) = (model.segments.first(), model.segments.last()) else { return 0 };
    let (lo, hi) = (first.start_local_ns, last.end_local_ns);
    let outside = |t: i64| if t < lo { lo.saturating_sub(t) } else { t.saturating_sub(hi).max(0) };
    [span.0, span.1].into_iter().flatten().map(outside).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use distprof::model::ClockSegment;

    fn plane(session: &str, node: u32) -> DistprofPlaneData {
        DistprofPlaneData {
            session_id: session.into(),
            node,
            reference_node: 0,
            hostname: format!("host{node}"),
            timestamp_mode: "kernel".into(),
            timestamps: None,
            tracer_clock: "host".into(),
            tracer_start: None,
            model: NodeClockModel { node, reachable: true, segments: vec![segment(0, 1_000.0)] },
            snapshots: Vec::new(),
            probe_stats: Vec::new(),
            edge_fits: Vec::new(),
        }
    }

    fn segment(k: i64, offset_ns: f64) -> ClockSegment {
        let w = 15_000_000_000;
        ClockSegment {
            window_id: k as u64,
            start_local_ns: k * w,
            end_local_ns: (k + 1) * w,
            mid_local_ns: k * w + w / 2,
            offset_ns,
            drift_ppb: 10.0,
            bound_ns: 500.0,
            uncertainty_ns: 50.0,
            drift_uncertainty_ppb: 5.0,
            flagged: false,
                break_at_start: false,
        }
    }

    #[test]
    fn traces_and_models_of_other_runs_are_named_with_both_files() {
        let (a, b) = (plane("s-run-a", 0), plane("s-run-b", 1));
        let err = check_sessions(&[(Path::new("a.xplane.pb"), &a), (Path::new("b.xplane.pb"), &b)], None).unwrap_err().to_string();
        assert!(err.contains("a.xplane.pb") && err.contains("s-run-a") && err.contains("b.xplane.pb") && err.contains("s-run-b"), "{err}");
        let origin = ModelOrigin { path: "/runs/other".into(), session_id: Some("s-run-b".into()) };
        let err = check_sessions(&[(Path::new("a.xplane.pb"), &a)], Some(&origin)).unwrap_err().to_string();
        assert!(err.contains("a.xplane.pb") && err.contains("/runs/other") && err.contains("another run"), "{err}");
        // The same run passes; planes without a session (older traces) are not compared.
        let same = ModelOrigin { session_id: Some("s-run-a".into()), ..origin };
        assert!(check_sessions(&[(Path::new("a.xplane.pb"), &a), (Path::new("c.xplane.pb"), &plane("", 2))], Some(&same)).is_ok());
    }

    #[test]
    fn a_given_model_without_the_planes_windows_is_of_another_run() {
        let p = plane("s", 1);
        let same = NodeClockModel { node: 1, reachable: true, segments: vec![segment(0, 2_000.0)] };
        assert!(check_given_windows(Path::new("t.xplane.pb"), &p, &same, Path::new("m.json")).is_ok());
        // The same windows 20 s earlier: another run's.
        let mut earlier = same.clone();
        for s in &mut earlier.segments {
            s.start_local_ns -= 20_000_000_000;
            s.mid_local_ns -= 20_000_000_000;
            s.end_local_ns -= 20_000_000_000;
        }
        let err = check_given_windows(Path::new("t.xplane.pb"), &p, &earlier, Path::new("m.json")).unwrap_err().to_string();
        assert!(err.contains("t.xplane.pb") && err.contains("m.json") && err.contains("node 1") && err.contains("another run"), "{err}");
    }

    #[test]
    fn a_plane_in_another_hosts_trace_is_refused() {
        let p = plane("s", 1);
        assert!(check_host(Path::new("t.xplane.pb"), &p, &["host1".into()]).is_ok());
        let err = check_host(Path::new("t.xplane.pb"), &p, &["host7".into()]).unwrap_err().to_string();
        assert!(err.contains("t.xplane.pb") && err.contains("host1") && err.contains("host7"), "{err}");
    }

    #[test]
    fn a_profile_far_outside_the_windows_is_refused_and_near_it_extrapolated() {
        let m = NodeClockModel { node: 1, reachable: true, segments: vec![segment(0, 0.0), segment(1, 0.0)] };
        assert_eq!(extrapolation_ns(Path::new("t"), (Some(1_000), Some(29_000_000_000)), &m, Path::new("m")).unwrap(), 0);
        assert_eq!(extrapolation_ns(Path::new("t"), (Some(-5_000_000_000), Some(31_000_000_000)), &m, Path::new("m")).unwrap(), 5_000_000_000);
        let err = extrapolation_ns(Path::new("t.xplane.pb"), (Some(4_000_000_000_000), None), &m, Path::new("m.json")).unwrap_err().to_string();
        assert!(err.contains("t.xplane.pb") && err.contains("m.json") && err.contains("outside the windows"), "{err}");
    }

    #[test]
    fn absurd_values_are_refused() {
        for (offset, what) in [(1e300, "beyond a day"), (f64::NAN, "non-finite"), (f64::INFINITY, "non-finite")] {
            let m = NodeClockModel { node: 3, reachable: true, segments: vec![segment(0, offset)] };
            let err = check_sane(&m, Path::new("m.json")).unwrap_err().to_string();
            assert!(err.contains("m.json") && err.contains("node 3") && err.contains(what), "{err}");
        }
        let mut s = segment(0, 0.0);
        s.drift_ppb = 2e6;
        assert!(check_sane(&NodeClockModel { node: 3, reachable: true, segments: vec![s] }, Path::new("m")).is_err());
        assert!(check_sane(&NodeClockModel { node: 3, reachable: true, segments: vec![segment(0, 5e6)] }, Path::new("m")).is_ok());
    }
}
