//! `distprof merge`: every node's trace onto one global timeline.
//!
//! Inputs are per-node `.xplane.pb` files or directories holding them (an XProf run dir
//! `plugins/profile/<run>/<host>.xplane.pb` or a whole logdir). Each node's clock model comes
//! from the distprof plane in its own XSpace. Every node is read once to learn its model and
//! profile start (a seek-only prescan) and once to stream it out; nodes are streamed out in
//! parallel, one per worker thread, so memory is about the inputs being merged at once.
//!
//! Outputs: an XProf run directory `<out>/plugins/profile/<run>/node<k>.<host>.xplane.pb`
//! (one file per node, distinct host names, globally unique plane ids, line timestamps
//! relative to the global origin recorded as every node's `profile_start_time`), and a
//! Chrome Trace Event JSON `<out>/<run>.trace.json` for Perfetto.

pub mod belong;
pub mod chrome;
pub mod chrome_args;
pub mod chrome_doc;
pub mod direct_io;
pub mod plane_network;
pub mod prescan;
pub mod rewrite;
pub mod shard;
pub mod sink;
pub mod timemap;
pub mod protobuf;
pub mod xspace_fields;

use distprof::atomic_file::AtomicFile;
use distprof::distprof_plane::{DistprofPlaneData, PlaneError};
use distprof::model::NodeClockModel;
use prescan::SpaceInfo;
use rewrite::{NodeOutput, RewriteStats};
use std::path::{Path, PathBuf};
use timemap::{MapError, NodeTimeMap};

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
    #[error("{path}: the trace changed while merging (its planes differ from the first read); merge it again once the profiler has finished writing it")]
    Changed { path: PathBuf },
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

#[derive(Debug, Clone)]
pub struct MergeOptions {
    pub out_dir: PathBuf,
    /// Where to write the Chrome JSON; None disables it.
    pub chrome: Option<PathBuf>,
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
    pub timestamp_mode: String,
    /// The node's timestamping in detail from its plane (stamp error, NIC clock mapping),
    /// when the plane states it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamps: Option<distprof::timestamp::TimestampQuality>,
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

/// Every `.xplane.pb` named by `inputs` (files as given, directories searched), sorted.
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
    let with_paths: Vec<(&Path, &DistprofPlaneData)> =
        scanned.iter().filter(|s| !s.info.already_merged).filter_map(|s| Some((s.path.as_path(), s.plane.as_ref()?))).collect();
    let origin_path = opts.models_origin.as_ref().map_or(Path::new("--models"), |o| o.path.as_path());
    for m in &opts.models {
        belong::check_sane(m, origin_path)?;
    }
    if !opts.force {
        belong::check_sessions(&with_paths, opts.models_origin.as_ref())?;
        for s in scanned.iter().filter(|s| !s.info.already_merged) {
            if let Some(p) = &s.plane {
                belong::check_host(&s.path, p, &s.info.hostnames)?;
            }
        }
    }
    let planes: Vec<&DistprofPlaneData> = with_paths.iter().map(|(_, p)| *p).collect();
    let solved = plane_network::models_from_planes(&planes, &distprof::estimate::EstimatorSettings::default());
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
            if let Some(m) = models.iter().find(|m| m.node == s.node) {
                let origin = if opts.models.iter().any(|g| g.node == s.node) { origin_path } else { s.path.as_path() };
                belong::extrapolation_ns(&s.path, (s.info.profile_start_ns, s.info.profile_stop_ns), m, origin)?;
            }
        }
    }
    if from_planes > 0 {
        progress(&format!("clock models of {from_planes} node(s) solved network-wide from the edge fits in the traces' planes"));
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

/// How a merge runs: worker threads, which nodes (a shard), a progress meter.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Nodes merged at once, each on its own thread; 0 takes the available cores. The
    /// output is the same whatever the count.
    pub jobs: usize,
    /// Merge only these nodes, as one shard of a larger merge (`shard`); None merges all.
    pub nodes: Option<shard::NodeSet>,
    /// Report input MB done, rate and ETA through `progress` about every 2 s.
    pub meter: bool,
}

impl RunOptions {
    /// Worker threads for `nodes` nodes.
    pub fn workers(&self, nodes: usize) -> usize {
        let jobs = if self.jobs == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.jobs
        };
        jobs.min(nodes).max(1)
    }
}

/// Merges `inputs` into `opts.out_dir`, one node at a time. `progress` receives one
/// human-readable line per step.
pub fn merge(
    inputs: &[PathBuf],
    opts: &MergeOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<MergeReport, MergeError> {
    merge_with(inputs, opts, &RunOptions { jobs: 1, ..Default::default() }, progress)
}

/// Where a node's first plane id, device id and Chrome pid start: they follow from the
/// plane counts of the nodes before it (prescan), so every node can be written on its own
/// and the result does not depend on which finishes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeBases {
    plane_id: i64,
    device_id: i64,
    pid: u64,
}

fn node_bases(nodes: &[LoadedNode]) -> Vec<NodeBases> {
    let mut b = NodeBases { plane_id: 10_000, device_id: 0, pid: 1 };
    nodes
        .iter()
        .map(|n| {
            let this = b;
            let i = &n.info;
            b.device_id += i.device_planes as i64;
            // Every other plane, and the applied plane merge adds to a node without a model.
            b.plane_id += (i.planes - i.device_planes) as i64 + i64::from(i.distprof.is_none() && !i.already_merged);
            b.pid += i.event_planes as u64;
            this
        })
        .collect()
}

/// What one worker did for one node.
struct NodeDone {
    summary: MergedNode,
    bytes_in: u64,
    bytes_out: u64,
    planes: u64,
}

/// Merges `inputs` into `opts.out_dir` as `run` says: nodes in parallel, or only a shard.
/// The outputs are byte-identical whatever the worker count, and a join of shards
/// (`shard::join`) gives the outputs of one whole merge.
pub fn merge_with(
    inputs: &[PathBuf],
    opts: &MergeOptions,
    run: &RunOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<MergeReport, MergeError> {
    check_paths(inputs, &opts.out_dir)?;
    let paths = find_inputs(inputs)?;
    let mut scanned = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let s = scan_node(p, i as u32)?;
        if s.info.already_merged {
            return Err(MergeError::OwnOutput { path: s.path });
        }
        scanned.push(s);
    }
    let models = models_to_apply(&scanned, opts, progress)?;
    let mut nodes = Vec::new();
    for s in scanned {
        let n = s.with_map(opts.allow_uncorrected, &models)?;
        if let Some(prev) = nodes.iter().find(|m: &&LoadedNode| m.node == n.node) {
            return Err(MergeError::DuplicateNode {
                node: n.node,
                a: prev.path.clone(),
                b: n.path.clone(),
            });
        }
        nodes.push(n);
    }
    nodes.sort_by_key(|n| n.node);
    // The global origin: the earliest profile start, mapped onto G (over all nodes, also
    // in a shard, so every shard has the same origin).
    let g0_ns = nodes
        .iter()
        .filter_map(|n| {
            n.info
                .profile_start_ns
                .map(|s| n.map.host_to_g_ps(s as i128 * 1000).div_euclid(1000) as i64)
        })
        .min()
        .unwrap_or(0);
    let bases = node_bases(&nodes);
    let all_nodes: Vec<u32> = nodes.iter().map(|n| n.node).collect();
    let todo: Vec<usize> = (0..nodes.len())
        .filter(|&i| run.nodes.as_ref().is_none_or(|set| set.contains(nodes[i].node)))
        .collect();
    for &i in &todo {
        let n = &nodes[i];
        progress(&format!("loaded node {} from {} ({} MB)", n.node, n.path.display(), n.bytes / 1_000_000));
    }
    if let Some(set) = &run.nodes {
        progress(&format!("shard {set}: {} of the {} input nodes", todo.len(), nodes.len()));
    }
    let run_name = run_name(g0_ns);
    let run_dir = opts.out_dir.join("plugins").join("profile").join(&run_name);
    distprof::atomic_file::create_dir_all(&run_dir).map_err(|e| MergeError::Io {
        path: run_dir.clone(),
        err: e,
    })?;
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| MergeError::Io { path, err }
    };
    // Every output is written whole or not at all (a temporary file renamed at the end):
    // a merge that fails or is killed leaves no truncated trace for XProf to load. A shard
    // writes a fragment of the Chrome JSON (no header, no footer) for the join.
    let chrome_path = match (&run.nodes, &opts.chrome) {
        (Some(_), Some(_)) => Some(opts.out_dir.join(shard::FRAGMENT_FILE)),
        (None, c) => c.clone(),
        (Some(_), None) => None,
    };
    let chrome = match &chrome_path {
        Some(p) => {
            let base_ns = run.nodes.is_none().then_some(g0_ns);
            Some(chrome_doc::ChromeDoc::create(p, base_ns).map_err(io_err(p))?)
        }
        None => None,
    };
    let total_bytes: u64 = todo.iter().map(|&i| nodes[i].bytes).sum();
    let done_bytes = std::sync::atomic::AtomicU64::new(0);
    let next_job = std::sync::atomic::AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let workers = run.workers(todo.len());
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<NodeDone, MergeError>)>();
    let mut results: Vec<Option<NodeDone>> = (0..todo.len()).map(|_| None).collect();
    let mut first_err: Option<(usize, MergeError)> = None;
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (nodes, bases, todo, chrome, run_dir) = (&nodes, &bases, &todo, &chrome, &run_dir);
            let (next_job, stop, done_bytes, models) = (&next_job, &stop, &done_bytes, &models);
            scope.spawn(move || {
                // The input buffer, reused from node to node: fresh memory costs a page
                // fault per page on first touch.
                let mut input = Vec::new();
                loop {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // With the Chrome JSON, the document hands out the jobs with their
                    // fragments' places.
                    let job = match chrome {
                        Some(doc) => doc.next_job(todo.len(), |k| nodes[todo[k]].bytes).map(|r| (r.order, Some((r, doc)))),
                        None => {
                            let k = next_job.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            (k < todo.len()).then_some((k, None))
                        }
                    };
                    let Some((k, fragment)) = job else { break };
                    let i = todo[k];
                    let r = merge_node(&nodes[i], bases[i], g0_ns, run_dir, fragment, models, done_bytes, &mut input);
                    if r.is_err() {
                        stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    if tx.send((k, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut last_meter = started;
        // Nodes are reported in node order, as they complete in it: the same lines
        // whatever the thread count.
        let mut reported = 0;
        loop {
            match rx.recv_timeout(std::time::Duration::from_millis(250)) {
                Ok((k, Ok(d))) => {
                    results[k] = Some(d);
                    while let Some(Some(d)) = results.get(reported) {
                        progress(&format!(
                            "node {}: {} events on {} planes -> {}",
                            d.summary.node,
                            d.summary.events,
                            d.planes,
                            d.summary.output.display()
                        ));
                        reported += 1;
                    }
                }
                Ok((k, Err(e))) => {
                    // The error of the earliest node in order, whichever thread hit first.
                    if first_err.as_ref().is_none_or(|(j, _)| k < *j) {
                        first_err = Some((k, e));
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if run.meter && last_meter.elapsed().as_secs_f64() >= 2.0 {
                last_meter = std::time::Instant::now();
                let done = done_bytes.load(std::sync::atomic::Ordering::Relaxed);
                progress(&meter_line(done, total_bytes, started.elapsed().as_secs_f64()));
            }
        }
    });
    if let Some((_, e)) = first_err {
        return Err(e);
    }
    if run.meter {
        progress(&meter_line(total_bytes, total_bytes, started.elapsed().as_secs_f64()));
    }
    if let Some(doc) = chrome {
        let p = doc.path().to_path_buf();
        doc.commit().map_err(io_err(&p))?;
    }
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    let mut summaries = Vec::new();
    for d in results.into_iter().flatten() {
        bytes_in += d.bytes_in;
        bytes_out += d.bytes_out;
        summaries.push(d.summary);
    }
    let report = MergeReport {
        run_dir,
        chrome: if run.nodes.is_some() { None } else { opts.chrome.clone() },
        g0_ns,
        bytes_in,
        bytes_out,
        nodes: summaries,
    };
    if let Some(set) = &run.nodes {
        shard::write_manifest(&opts.out_dir, &run_name, set, &all_nodes, &report, chrome_path.is_some())?;
    }
    Ok(report)
}

/// `12.3 of 45.6 GB (27%), 210 MB/s, ETA 2:41`.
fn meter_line(done: u64, total: u64, secs: f64) -> String {
    let rate = done as f64 / secs.max(1e-9);
    let eta = if rate > 0.0 { (total.saturating_sub(done)) as f64 / rate } else { f64::NAN };
    let eta = if eta.is_finite() { format!("{}:{:02}", eta as u64 / 60, eta as u64 % 60) } else { "?".into() };
    format!(
        "{:.1} of {:.1} MB ({:.0}%), {:.0} MB/s, ETA {eta}",
        done as f64 / 1e6,
        total as f64 / 1e6,
        100.0 * done as f64 / total.max(1) as f64,
        rate / 1e6
    )
}

/// Merges one node: its XSpace into the run directory, its Chrome records into their
/// region of the document.
#[allow(clippy::too_many_arguments)]
fn merge_node(
    n: &LoadedNode,
    bases: NodeBases,
    g0_ns: i64,
    run_dir: &Path,
    fragment: Option<(chrome_doc::Region, &chrome_doc::ChromeDoc)>,
    models: &[NodeClockModel],
    done_bytes: &std::sync::atomic::AtomicU64,
    buf: &mut Vec<u8>,
) -> Result<NodeDone, MergeError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| MergeError::Io { path, err }
    };
    // The host name comes from the input trace: one sanitized path component, so a
    // name like `../../etc` cannot place the output outside the run directory.
    let hostname = format!("node{}.{}", n.node, distprof::file_name::component(&n.hostname));
    let out_path = run_dir.join(format!("{hostname}.xplane.pb"));
    let (order, doc) = match &fragment {
        Some((r, doc)) => (r.order, Some(*doc)),
        None => (0, None),
    };
    let mut writer = fragment.map(|(r, _)| chrome::ChromeWriter::new(r.writer, bases.pid));
    buf.clear();
    std::fs::File::open(&n.path)
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, buf))
        .map_err(|e| MergeError::Io { path: n.path.clone(), err: e })?;
    let atomic = AtomicFile::create(&out_path).map_err(io_err(&out_path))?;
    let mut w = sink::PatchWriter::new(atomic.handle().map_err(io_err(&out_path))?);
    let (mut next_plane_id, mut next_device_id) = (bases.plane_id, bases.device_id);
    let mut reported = 0usize;
    let mut plane_progress = |done: usize| {
        done_bytes.fetch_add((done - reported) as u64, std::sync::atomic::Ordering::Relaxed);
        reported = done;
    };
    let o = NodeOutput {
        node: n.node,
        hostname: &hostname,
        g0_ns,
        next_plane_id: &mut next_plane_id,
        next_device_id: &mut next_device_id,
        chrome: writer.as_mut(),
        progress: &mut plane_progress,
    };
    let st: RewriteStats = rewrite::rewrite_space(buf, &n.info, &n.map, &mut w, o).map_err(|e| match e {
        rewrite::RewriteError::Wire(err) => MergeError::Wire {
            path: n.path.clone(),
            err,
        },
        rewrite::RewriteError::Io(err) => MergeError::Io {
            path: out_path.clone(),
            err,
        },
    })?;
    done_bytes.fetch_add((buf.len() - reported.min(buf.len())) as u64, std::sync::atomic::Ordering::Relaxed);
    let next_pid = match (writer, doc) {
        (Some(cw), Some(doc)) => {
            let next_pid = cw.next_pid();
            doc.fragment_done(order, cw.finish().map_err(io_err(doc.path()))?);
            Some(next_pid)
        }
        _ => None,
    };
    // The counts of the prescan fixed this node's ids; the rewrite must have used as many.
    let used = NodeBases { plane_id: next_plane_id, device_id: next_device_id, pid: next_pid.unwrap_or(0) };
    let i = &n.info;
    let expected = NodeBases {
        plane_id: bases.plane_id + (i.planes - i.device_planes) as i64 + i64::from(i.distprof.is_none() && !i.already_merged),
        device_id: bases.device_id + i.device_planes as i64,
        pid: next_pid.map_or(0, |_| bases.pid + i.event_planes as u64),
    };
    if used != expected {
        return Err(MergeError::Changed { path: n.path.clone() });
    }
    let bytes_out = w.finish().map_err(io_err(&out_path))?;
    atomic.commit().map_err(io_err(&out_path))?;
    let model = model_of(n, models).filter(|_| !n.info.already_merged);
    // Stated and grown into the bound: how far the profile lies outside the windows
    // (within the limit `belong` allows unless --force).
    let extrapolated_ns = model.map_or(0, |m| belong::outside_windows_ns((n.info.profile_start_ns, n.info.profile_stop_ns), m));
    let summary = MergedNode {
        node: n.node,
        extrapolated_ns,
        input: n.path.clone(),
        output: out_path,
        hostname,
        corrected: !n.info.already_merged && model_of(n, models).is_some_and(|m| m.reachable && !m.segments.is_empty()),
        events: st.events,
        device_events_without_fit: st.device_events_without_fit,
        max_bound_ns: model_of(n, models)
            .map(|m| m.segments.iter().map(|s| s.bound_ns).fold(0.0, f64::max))
            .map_or(f64::NAN, |b| b + belong::EXTRAPOLATION_RATE * extrapolated_ns as f64),
        timestamp_mode: n.plane.as_ref().map(|p| p.timestamp_mode.clone()).unwrap_or_default(),
        timestamps: n.plane.as_ref().and_then(|p| p.timestamps.clone()),
    };
    Ok(NodeDone { summary, bytes_in: buf.len() as u64, bytes_out, planes: st.planes })
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
}
