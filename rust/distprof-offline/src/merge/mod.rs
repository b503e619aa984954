//! `distprof merge`: every node's trace onto one global timeline.
//!
//! Inputs are per-node `.xplane.pb` files or directories holding them (an XProf run dir
//! `plugins/profile/<run>/<host>.xplane.pb` or a whole logdir). Each node's clock model comes
//! from the distprof plane in its own XSpace. Every node is read once to learn its model and
//! profile start (a seek-only prescan; `plan` keeps what that decides over all nodes, so
//! that a shard can read only its own nodes) and once to stream it out; nodes are streamed out in
//! parallel, one per worker thread, so memory is about the inputs being merged at once.
//!
//! Outputs: an XProf run directory `<out>/plugins/profile/<run>/node<k>.<host>.xplane.pb`
//! (one file per node, distinct host names, globally unique plane ids, line timestamps
//! relative to the global origin recorded as every node's `profile_start_time`), and the
//! Perfetto output `<out>/merged.pftrace` in Perfetto's own protobuf format (`pftrace`), or
//! on request a Chrome Trace Event JSON `<out>/merged.trace.json` (`chrome`).

pub mod belong;
pub mod chrome;
pub mod chrome_args;
pub mod chrome_doc;
pub mod cursor;
pub mod flows;
pub mod pftrace;
pub mod direct_io;
mod line_map;
pub mod plan;
pub mod plane_network;
pub mod prescan;
pub mod rewrite;
mod run;
pub mod shard;
pub mod sink;
pub mod timemap;
pub mod trace_out;
pub mod protobuf;
pub mod xspace_fields;

use distprof::atomic_file::AtomicFile;
use distprof::distprof_plane::{DistprofPlaneData, PlaneError};
use distprof::model::NodeClockModel;
use prescan::SpaceInfo;
use rewrite::{NodeOutput, RewriteStats};
use std::path::{Path, PathBuf};
use timemap::{MapError, NodeTimeMap};

pub use plan::{load_checked, Plan};
pub use run::{merge, merge_planned, merge_with, RunOptions};

/// Merge failures, each naming the input and the fix. The cause is part of the message (the
/// fields are not `source`, so error chains do not print it twice).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not a valid XSpace ({err}); pass the .xplane.pb files the profiler wrote")]
    Wire { path: PathBuf, err: protobuf::WireError },
    #[error("{path}: {err}")]
    Plane { path: PathBuf, err: PlaneError },
    #[error("{path}: {err}")]
    Map { path: PathBuf, err: MapError },
    #[error("{path}: no distprof plane (the trace was recorded without distprof); pass --allow-uncorrected to merge it with its clock as is")]
    NoModel { path: PathBuf },
    #[error("no .xplane.pb files found under {0}; pass per-node .xplane.pb files or the directories holding them")]
    NoInputs(String),
    #[error("node {node} appears twice: {a} and {b}; pass each node's trace once")]
    DuplicateNode { node: u32, a: PathBuf, b: PathBuf },
    #[error("{path}: the output of an earlier distprof merge (it carries the `/host:distprof-applied` plane); merging it again would show its hosts twice; pass the profiler's own per-node traces")]
    OwnOutput { path: PathBuf },
    #[error("--out {out} lies inside the input directory {input}: a later merge would read this merge's output as more nodes; choose an output directory outside {input}")]
    OutputInsideInput { out: PathBuf, input: PathBuf },
    #[error("{path}: lies in the run tree merge writes under --out {out}; pass the profiler's traces, not a merge output")]
    InputInsideOutput { path: PathBuf, out: PathBuf },
    #[error("{path}: an empty trace (0 bytes): the profiler wrote nothing; pass a trace the profiler finished")]
    EmptyTrace { path: PathBuf },
    #[error("{path}: a trace with no events (no plane besides Task Environment and distprof's); pass a trace that recorded something")]
    NoEvents { path: PathBuf },
    #[error("{a} is from session {a_session} but {b} from session {b_session}: the traces are of different runs; merge one run's traces together (or pass --force)")]
    MixedSessions { a: PathBuf, a_session: String, b: PathBuf, b_session: String },
    #[error("{trace} is from session {trace_session} but the models of {models} from session {models_session}: they belong to another run; give that run's models or none (or pass --force)")]
    ForeignModels { trace: PathBuf, trace_session: String, models: PathBuf, models_session: String },
    #[error("{path}: its distprof plane says host `{plane_host}` but the trace's planes name {trace_hosts:?}: the plane was copied into another host's trace (or pass --force)")]
    ForeignPlane { path: PathBuf, plane_host: String, trace_hosts: Vec<String> },
    #[error("{trace}: node {node}'s profile ({span_ns:?}, host ns) lies {outside_s:.1} s outside the windows of its clock model from {models} ({windows_ns:?}); the model is of another run or time; give the model of this trace's run (or pass --force)")]
    OutsideModel { trace: PathBuf, models: PathBuf, node: u32, span_ns: (Option<i64>, Option<i64>), windows_ns: (i64, i64), outside_s: f64 },
    #[error("{models}: node {node}'s clock model has none of the windows of the model in {trace}'s own distprof plane (its windows span {given_ns:?}, the trace's {own_ns:?}, host ns): it was estimated in another run or over another time; give the models of this trace's run (or pass --force)")]
    ForeignWindows { trace: PathBuf, models: PathBuf, node: u32, given_ns: (i64, i64), own_ns: (i64, i64) },
    #[error("{path}: the trace changed while merging (its planes differ from the first read); merge it again once the profiler has finished writing it")]
    Changed { path: PathBuf },
    #[error("{merged} is the output of a distprof merge but {raw} a profiler's own trace: give one or the other (the merge's run directory, or the traces it was merged from), not both")]
    MixedOutputs { merged: PathBuf, raw: PathBuf },
    #[error("{0}")]
    Shard(String),
    #[error("{origin}: node {node}'s clock model has {problem} in window {window}; the file is damaged or not a clock model")]
    AbsurdModel { origin: PathBuf, node: u32, window: u64, problem: String },
}

/// `path` made absolute and free of `..` and symlinks as far as it exists (the rest, not
/// yet created, appended as given), so that containment is judged on real locations.
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p: PathBuf, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Refuses an output directory inside an input directory (a later merge would read the
/// output as more nodes) and an input inside the run tree merge writes.
fn check_paths(inputs: &[PathBuf], out_dir: &Path) -> Result<(), MergeError> {
    let out = resolved(out_dir);
    let out_tree = out.join("plugins").join("profile");
    for input in inputs {
        let real = resolved(input);
        if real.is_dir() && out.starts_with(&real) {
            return Err(MergeError::OutputInsideInput { out: out_dir.to_path_buf(), input: input.clone() });
        }
        if real.starts_with(&out_tree) {
            return Err(MergeError::InputInsideOutput { path: input.clone(), out: out_dir.to_path_buf() });
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    pub out_dir: PathBuf,
    /// Where to write the Perfetto output (in `trace_format`); None disables it.
    pub chrome: Option<PathBuf>,
    /// The Perfetto output's format: Perfetto's protobuf trace, or Chrome JSON.
    pub trace_format: trace_out::TraceFormat,
    /// How Perfetto's protobuf trace stores its packets (deflated by default).
    pub pftrace_compression: pftrace::PftraceCompression,
    /// Merge nodes without a usable clock model with their clocks as they are.
    pub allow_uncorrected: bool,
    /// Clock models given outside the traces (e.g. from the estimator's output); for their
    /// nodes they take precedence over the model in the distprof plane.
    pub models: Vec<NodeClockModel>,
    /// Where `models` come from (file or run directory, and its session): named in errors.
    pub models_origin: Option<belong::ModelOrigin>,
    /// Skip the checks that a trace and its model belong together (`belong`); the values
    /// are still checked.
    pub force: bool,
    /// Link each collective's participants across nodes with flow arrows in the Perfetto
    /// output (`flows`); a whole merge only, not a shard.
    pub flows: bool,
}

/// One node as loaded by [`load_node`].
pub struct LoadedNode {
    pub path: PathBuf,
    pub node: u32,
    pub hostname: String,
    pub info: SpaceInfo,
    pub plane: Option<DistprofPlaneData>,
    pub map: NodeTimeMap,
    pub bytes: u64,
}

/// One node of a merge: where it came from, where it went, and how its clock was mapped.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MergedNode {
    pub node: u32,
    pub input: PathBuf,
    pub output: PathBuf,
    pub hostname: String,
    pub corrected: bool,
    pub events: u64,
    pub device_events_without_fit: u64,
    /// Largest error bound of the node's model, ns, grown by the extrapolation (NaN,
    /// written as null, without a model).
    #[serde(deserialize_with = "nan_from_null")]
    pub max_bound_ns: f64,
    /// How far the trace's profile lies outside the model's windows, ns: events there are
    /// mapped with the nearest window's line (extrapolated).
    pub extrapolated_ns: i64,
    /// The largest uncertainty (one sigma) of an event's correction over the profile, ns:
    /// the windows' own, grown by interpolation between midpoints and extrapolation beyond
    /// them (`GlobalMap::uncertainty_ns`). NaN (null) without a model; absent in summaries
    /// written before it existed.
    #[serde(default = "nan", deserialize_with = "nan_from_null")]
    pub max_uncertainty_ns: f64,
    /// True when that uncertainty exceeds [`belong::MAX_MERGE_UNCERTAINTY_NS`]: the node's
    /// events are placed, but not to the accuracy a model is trusted to (the merge says so).
    #[serde(default)]
    pub uncertainty_exceeded: bool,
    pub timestamp_mode: String,
    /// The node's timestamping in detail from its plane (stamp error, NIC clock mapping),
    /// when the plane states it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamps: Option<distprof::timestamp::TimestampQuality>,
}

fn nan() -> f64 {
    f64::NAN
}

/// A number, or NaN where JSON has null (serde_json writes NaN as null).
fn nan_from_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MergeReport {
    pub run_dir: PathBuf,
    pub chrome: Option<PathBuf>,
    /// Global origin, epoch ns on G.
    pub g0_ns: i64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub nodes: Vec<MergedNode>,
}

/// The hidden directory prefix under which `distprof.jax.trace` lets the profiler write
/// before it publishes the finished trace (rust/distprof-py/python/distprof/_xspace.py):
/// one left behind by a process that died mid-trace holds an unfinished trace without its
/// plane, never one to merge.
pub const STAGING_DIR_PREFIX: &str = ".distprof-staging-";

/// Every `.xplane.pb` named by `inputs` (files as given, directories searched, staging
/// directories skipped), sorted.
pub fn find_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, MergeError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), MergeError> {
        let rd = std::fs::read_dir(dir).map_err(|e| MergeError::Io {
            path: dir.to_path_buf(),
            err: e,
        })?;
        for e in rd {
            let p = e
                .map_err(|e| MergeError::Io {
                    path: dir.to_path_buf(),
                    err: e,
                })?
                .path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(STAGING_DIR_PREFIX)) {
                    continue;
                }
                walk(&p, out)?;
            } else if p.to_string_lossy().ends_with(".xplane.pb") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for i in inputs {
        if i.is_dir() {
            let before = out.len();
            walk(i, &mut out)?;
            out[before..].sort();
        } else if i.exists() {
            out.push(i.clone());
        } else {
            return Err(MergeError::Io {
                path: i.clone(),
                err: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
            });
        }
    }
    if out.is_empty() {
        return Err(MergeError::NoInputs(
            inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    Ok(out)
}

/// Reads one node's metadata and clock model. `index` is the node id used when the trace
/// has no distprof plane.
pub fn load_node(
    path: &Path,
    index: u32,
    allow_uncorrected: bool,
    models: &[NodeClockModel],
) -> Result<LoadedNode, MergeError> {
    scan_node(path, index)?.with_map(allow_uncorrected, models)
}

/// One node's trace read once: metadata and plane, no time map yet (merge first solves the
/// network from every plane).
pub struct ScannedNode {
    pub path: PathBuf,
    pub node: u32,
    pub hostname: String,
    pub info: SpaceInfo,
    pub plane: Option<DistprofPlaneData>,
    pub bytes: u64,
}

/// Reads one node's metadata and plane. `index` is the node id used when the trace has no
/// distprof plane.
pub fn scan_node(path: &Path, index: u32) -> Result<ScannedNode, MergeError> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| MergeError::Io {
            path: path.into(),
            err: e,
        })?
        .len();
    if bytes == 0 {
        return Err(MergeError::EmptyTrace { path: path.into() });
    }
    let info = prescan::prescan_file(path)
        .map_err(|e| MergeError::Io {
            path: path.into(),
            err: e,
        })?
        .map_err(|e| MergeError::Wire {
            path: path.into(),
            err: e,
        })?;
    if info.event_planes == 0 {
        return Err(MergeError::NoEvents { path: path.into() });
    }
    let plane = match &info.distprof {
        Some(p) => Some(
            DistprofPlaneData::from_xplane(p).map_err(|e| MergeError::Plane {
                path: path.into(),
                err: e,
            })?,
        ),
        None => None,
    };
    let node = plane.as_ref().map(|p| p.node).unwrap_or(index);
    let hostname = info
        .hostnames
        .first()
        .cloned()
        .or_else(|| {
            plane
                .as_ref()
                .map(|p| p.hostname.clone())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| {
            path.file_name()
                .map(|f| {
                    f.to_string_lossy()
                        .trim_end_matches(".xplane.pb")
                        .to_string()
                })
                .unwrap_or_default()
        });
    Ok(ScannedNode { path: path.into(), node, hostname, info, plane, bytes })
}

impl ScannedNode {
    /// The node with its time map: the model given in `models` for it, else its plane's.
    pub fn with_map(self, allow_uncorrected: bool, models: &[NodeClockModel]) -> Result<LoadedNode, MergeError> {
        let ScannedNode { path, node, hostname, info, plane, bytes } = self;
        let path = path.as_path();
        let given = models.iter().find(|m| m.node == node);
        let map = match &plane {
            // `validate` reads merge outputs through this too: their events are on G already.
            _ if info.already_merged => NodeTimeMap::identity(),
            _ if given.is_some() => {
                NodeTimeMap::from_parts(given.expect("checked"), plane.as_ref(), allow_uncorrected)
                    .map_err(|e| MergeError::Map {
                        path: path.into(),
                        err: e,
                    })?
            }
            Some(d) => NodeTimeMap::from_plane(d, allow_uncorrected).map_err(|e| MergeError::Map {
                path: path.into(),
                err: e,
            })?,
            None if allow_uncorrected => NodeTimeMap::identity(),
            None => return Err(MergeError::NoModel { path: path.into() }),
        };
        Ok(LoadedNode {
            path: path.into(),
            node,
            hostname,
            info,
            plane,
            map,
            bytes,
        })
    }
}

/// The models merge applies: those given (`--models`, `--run-dir`) for their nodes, else
/// the network solved from every input plane's edge fits where it covers a node at least
/// as well as the node's own plane (`plane_network`).
fn models_to_apply(
    scanned: &[ScannedNode],
    opts: &MergeOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<NodeClockModel>, MergeError> {
    let all_planes: Vec<(&Path, &DistprofPlaneData)> = scanned.iter().filter_map(|s| Some((s.path.as_path(), s.plane.as_ref()?))).collect();
    // A merge's outputs (validate reads them) are on G already: only their sessions count.
    let with_paths: Vec<(&Path, &DistprofPlaneData)> =
        scanned.iter().filter(|s| !s.info.already_merged).filter_map(|s| Some((s.path.as_path(), s.plane.as_ref()?))).collect();
    let origin_path = opts.models_origin.as_ref().map_or(Path::new("--models"), |o| o.path.as_path());
    for m in &opts.models {
        belong::check_sane(m, origin_path)?;
    }
    if !opts.force {
        belong::check_sessions(&all_planes, opts.models_origin.as_ref())?;
        for s in scanned.iter().filter(|s| !s.info.already_merged) {
            if let Some(p) = &s.plane {
                belong::check_host(&s.path, p, &s.info.hostnames)?;
            }
        }
    }
    let planes: Vec<&DistprofPlaneData> = with_paths.iter().map(|(_, p)| *p).collect();
    let solve = plane_network::models_from_planes(&planes, &distprof::estimate::EstimatorSettings::default());
    let solved = solve.models;
    let mut models = opts.models.clone();
    let mut from_planes = 0;
    for p in &planes {
        if models.iter().any(|m| m.node == p.node) {
            continue;
        }
        let m = plane_network::better_model(&solved, p);
        if !std::ptr::eq(m, &p.model) {
            from_planes += 1;
        }
        models.push(m.clone());
    }
    if !opts.force {
        for s in scanned.iter().filter(|s| !s.info.already_merged) {
            if let (Some(p), Some(g)) = (&s.plane, opts.models.iter().find(|g| g.node == s.node)) {
                belong::check_given_windows(&s.path, p, g, origin_path)?;
            }
            if let Some(m) = models.iter().find(|m| m.node == s.node) {
                let origin = if opts.models.iter().any(|g| g.node == s.node) { origin_path } else { s.path.as_path() };
                belong::extrapolation_ns(&s.path, (s.info.profile_start_ns, s.info.profile_stop_ns), m, origin)?;
            }
        }
    }
    if from_planes > 0 {
        progress(&format!("clock models of {from_planes} node(s) solved network-wide from the edge fits in the traces' planes"));
        for line in distprof::estimate::failover::describe(&solve.anchors, solve.reference) {
            progress(&format!("re-anchored {line}"));
        }
    }
    Ok(models)
}

/// The model merge applies to a node: the one given, else the plane's.
fn model_of<'a>(n: &'a LoadedNode, models: &'a [NodeClockModel]) -> Option<&'a NodeClockModel> {
    models
        .iter()
        .find(|m| m.node == n.node)
        .or(n.plane.as_ref().map(|p| &p.model))
}

/// `YYYY_MM_DD_HH_MM_SS` (UTC) of an epoch time, the run-directory name XProf uses.
pub fn run_name(epoch_ns: i64) -> String {
    let secs = epoch_ns.div_euclid(1_000_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}_{m:02}_{d:02}_{:02}_{:02}_{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_name_is_utc_calendar_time() {
        // 2026-11-22 03:42:48 UTC
        assert_eq!(
            super::run_name(1_795_318_968_000_000_000),
            "2026_11_22_03_42_48"
        );
        assert_eq!(super::run_name(0), "1970_01_01_00_00_00");
    }

    /// A staging directory left by a process that died mid-trace is not an input; the
    /// published traces beside it are.
    #[test]
    fn inputs_skip_staging_directories() {
        let dir = std::env::temp_dir().join(format!("distprof-find-inputs-{}", std::process::id()));
        let run = dir.join("plugins/profile/run");
        let staging = dir.join(format!("{}host-1-x/plugins/profile/run", super::STAGING_DIR_PREFIX));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(run.join("host.xplane.pb"), b"").unwrap();
        std::fs::write(staging.join("host.xplane.pb"), b"").unwrap();
        let found = super::find_inputs(&[dir.clone()]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, vec![run.join("host.xplane.pb")]);
    }
}
