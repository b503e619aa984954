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
//!   [`EXTRAPOLATION_RATE`] (the estimator's own allowance beyond its points).
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
/// Growth of the bound per ns of extrapolation (1 ppm: beyond any fitted rate error).
pub const EXTRAPOLATION_RATE: f64 = 1e-6;
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
