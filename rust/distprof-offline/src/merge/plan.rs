//! The merge plan: everything a merge decides from all nodes at once, taken from the
//! traces' small planes before any event is read, so that a shard reads only its own
//! nodes' traces.
//!
//! Beyond a node's own trace, merging it needs three things that depend on every node: the
//! clock models (solved network-wide from every plane's edge fits, `plane_network`), the
//! global origin (the earliest profile start on G, which also names the run directory) and
//! the node's first plane id, device id and Chrome pid (the plane counts of the nodes
//! before it). The seek-only prescan of every input gives all three. A whole merge keeps
//! them in memory; `distprof merge --solve-only --out plan.json` writes them to a file, and
//! `distprof merge --plan plan.json --nodes A-B` merges a shard from it, reading the traces
//! of its nodes and no other file. The shard checks that each of its traces is still the
//! one the plan describes.

use super::*;

/// The format of the plan file; a plan of another format is refused by name.
const FORMAT: u32 = 1;

/// One input node as the solve step found it: where its trace is and the counts that fix
/// the ids of the nodes after it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanNode {
    pub node: u32,
    /// The trace, made absolute: a shard may run in another directory or on another host
    /// that mounts the same file system.
    pub path: PathBuf,
    /// Its size: a shard refuses a trace that changed since the plan was written.
    pub bytes: u64,
    pub hostname: String,
    pub planes: usize,
    pub device_planes: usize,
    pub event_planes: usize,
    /// The trace carries a distprof plane (merge adds an applied plane to one without).
    pub distprof_plane: bool,
}

impl PlanNode {
    fn of(path: &Path, node: u32, hostname: &str, info: &SpaceInfo, bytes: u64) -> Self {
        PlanNode {
            node,
            path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            bytes,
            hostname: hostname.to_string(),
            planes: info.planes,
            device_planes: info.device_planes,
            event_planes: info.event_planes,
            distprof_plane: info.distprof.is_some(),
        }
    }
}

/// A merge's decisions over all nodes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    distprof_merge_plan: u32,
    /// Nodes without a usable clock model are merged as they are (the solve step's
    /// `--allow-uncorrected`).
    pub allow_uncorrected: bool,
    /// The global origin, epoch ns on G.
    pub g0_ns: i64,
    /// Every input node, in node order.
    pub nodes: Vec<PlanNode>,
    /// The clock model applied to each node that has one (given by `--models`/`--run-dir`,
    /// solved from the planes, or the plane's own).
    pub models: Vec<NodeClockModel>,
}

/// What the solve step read.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SolveStats {
    /// The traces' total size.
    pub bytes_in: u64,
    /// Bytes read from them (the planes the prescan needs, not the events).
    pub bytes_read: u64,
}

/// Scans every input (the prescan only), checks that traces and models belong together
/// ([`load_checked`]), and fixes the origin: the plan, and the nodes as loaded (a whole
/// merge goes on to write them).
pub fn solve(
    inputs: &[PathBuf],
    opts: &MergeOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(Plan, Vec<LoadedNode>, SolveStats), MergeError> {
    let (nodes, models, stats) = load_checked(inputs, opts, false, progress)?;
    // The earliest profile start mapped onto G, over all nodes: every shard has the same.
    let g0_ns = nodes
        .iter()
        .filter_map(|n| n.info.profile_start_ns.map(|s| n.map.host_to_g_ps(s as i128 * 1000).div_euclid(1000) as i64))
        .min()
        .unwrap_or(0);
    let plan = Plan {
        distprof_merge_plan: FORMAT,
        allow_uncorrected: opts.allow_uncorrected,
        g0_ns,
        nodes: nodes.iter().map(|n| PlanNode::of(&n.path, n.node, &n.hostname, &n.info, n.bytes)).collect(),
        models,
    };
    Ok((plan, nodes, stats))
}

/// Every input scanned (the prescan only), checked as one run's traces that belong with
/// their models, each with its time map, in node order; and what was read. The checks of a
/// merge, shared with `validate`: the traces of one session, each node once, every plane
/// in its own host's trace, every profile inside its model's windows (not with
/// `opts.force`), sane model values. A merge's own outputs are refused unless
/// `merge_outputs` (validate reads them), and then raw traces and merge outputs are never
/// mixed. With the models applied.
pub fn load_checked(
    inputs: &[PathBuf],
    opts: &MergeOptions,
    merge_outputs: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<LoadedNode>, Vec<NodeClockModel>, SolveStats), MergeError> {
    let paths = find_inputs(inputs)?;
    let mut scanned: Vec<ScannedNode> = Vec::new();
    let mut stats = SolveStats::default();
    for (i, p) in paths.iter().enumerate() {
        let s = scan_node(p, i as u32)?;
        if s.info.already_merged && !merge_outputs {
            return Err(MergeError::OwnOutput { path: s.path });
        }
        if let Some(other) = scanned.iter().find(|o| o.info.already_merged != s.info.already_merged) {
            let (merged, raw) = if s.info.already_merged { (&s.path, &other.path) } else { (&other.path, &s.path) };
            return Err(MergeError::MixedOutputs { merged: merged.clone(), raw: raw.clone() });
        }
        stats.bytes_in += s.bytes;
        stats.bytes_read += s.info.read_bytes;
        scanned.push(s);
    }
    let models = models_to_apply(&scanned, opts, progress)?;
    let mut nodes: Vec<LoadedNode> = Vec::new();
    for s in scanned {
        let n = s.with_map(opts.allow_uncorrected, &models)?;
        if let Some(prev) = nodes.iter().find(|m| m.node == n.node) {
            return Err(MergeError::DuplicateNode { node: n.node, a: prev.path.clone(), b: n.path.clone() });
        }
        nodes.push(n);
    }
    nodes.sort_by_key(|n| n.node);
    Ok((nodes, models, stats))
}

impl Plan {
    /// The first plane id, device id and Chrome pid of every node, in `nodes` order.
    pub(super) fn bases(&self) -> Vec<run::NodeBases> {
        let mut b = run::NodeBases { plane_id: 10_000, device_id: 0, pid: 1 };
        self.nodes
            .iter()
            .map(|n| {
                let this = b;
                b.device_id += n.device_planes as i64;
                // Every other plane, and the applied plane merge adds to a node without one.
                b.plane_id += (n.planes - n.device_planes) as i64 + i64::from(!n.distprof_plane);
                b.pid += n.event_planes as u64;
                this
            })
            .collect()
    }

    /// Writes the plan as JSON, whole or not at all. A model JSON cannot carry (a value
    /// that is not finite) is refused by node.
    pub fn write(&self, path: &Path) -> Result<(), MergeError> {
        for m in &self.models {
            if let Some(s) = m.segments.iter().find(|s| ![s.offset_ns, s.drift_ppb, s.bound_ns, s.uncertainty_ns].iter().all(|v| v.is_finite())) {
                return Err(MergeError::Shard(format!(
                    "node {}'s clock model has a value that is not a number in window {}; a plan cannot carry it: merge on one machine, or give a sane model with --models",
                    m.node, s.window_id
                )));
            }
        }
        let text = serde_json::to_vec(self).expect("a plan serializes");
        distprof::atomic_file::write(path, &text).map_err(|err| MergeError::Io { path: path.to_path_buf(), err })
    }

    /// Reads a plan written by [`Plan::write`].
    pub fn read(path: &Path) -> Result<Plan, MergeError> {
        let text = std::fs::read(path).map_err(|err| MergeError::Io { path: path.to_path_buf(), err })?;
        let plan: Plan = serde_json::from_slice(&text).map_err(|e| {
            MergeError::Shard(format!("--plan {}: not a merge plan ({e}); write one with `distprof merge --solve-only --out {} <traces>`", path.display(), path.display()))
        })?;
        if plan.distprof_merge_plan != FORMAT {
            return Err(MergeError::Shard(format!(
                "--plan {}: plan format {} (this distprof reads format {FORMAT}); write it again with this version's `distprof merge --solve-only`",
                path.display(),
                plan.distprof_merge_plan
            )));
        }
        Ok(plan)
    }

    /// Loads the nodes of `set` (all without one) from their traces, each checked against
    /// what the plan recorded of it; `plan_path` is named in errors.
    pub fn load(&self, set: Option<&shard::NodeSet>, plan_path: &Path) -> Result<Vec<LoadedNode>, MergeError> {
        let mut nodes = Vec::new();
        for want in self.nodes.iter().filter(|n| set.is_none_or(|s| s.contains(n.node))) {
            let s = scan_node(&want.path, want.node)?;
            if s.info.already_merged {
                return Err(MergeError::OwnOutput { path: s.path });
            }
            let found = PlanNode::of(&s.path, s.node, &s.hostname, &s.info, s.bytes);
            if found != *want {
                return Err(MergeError::Shard(format!(
                    "{}: the trace is not the one the plan {} describes (node {}, {} bytes, {} planes then; node {}, {} bytes, {} planes now); write the plan again with `distprof merge --solve-only`",
                    want.path.display(),
                    plan_path.display(),
                    want.node,
                    want.bytes,
                    want.planes,
                    found.node,
                    found.bytes,
                    found.planes
                )));
            }
            nodes.push(s.with_map(self.allow_uncorrected, &self.models)?);
        }
        Ok(nodes)
    }
}
