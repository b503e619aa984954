//! Running a merge: the nodes on a pool of worker threads, each node streamed from its
//! input into its XSpace output and its region of the Chrome JSON, progress in node order
//! whatever the thread count, and the first error (in node order) reported.

use super::*;
use trace_out::{TraceFormat, TraceWriter};

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
/// plane counts of the nodes before it (prescan, [`Plan::bases`]), so every node can be
/// written on its own and the result does not depend on which finishes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NodeBases {
    pub(super) plane_id: i64,
    pub(super) device_id: i64,
    pub(super) pid: u64,
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
    let (plan, nodes, _) = plan::solve(inputs, opts, progress)?;
    let nodes = nodes.into_iter().filter(|n| run.nodes.as_ref().is_none_or(|set| set.contains(n.node))).collect();
    write_nodes(&plan, nodes, opts, run, progress)
}

/// Merges from a plan (`plan::solve`, written by `--solve-only`) into `opts.out_dir`: the
/// nodes of `run.nodes` (all without), reading their traces and no other. The same bytes
/// as [`merge_with`] of the plan's inputs. `plan_path` is named in errors.
pub fn merge_planned(
    plan: &Plan,
    plan_path: &Path,
    opts: &MergeOptions,
    run: &RunOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<MergeReport, MergeError> {
    let inputs: Vec<PathBuf> = plan.nodes.iter().map(|n| n.path.clone()).collect();
    check_paths(&inputs, &opts.out_dir)?;
    let nodes = plan.load(run.nodes.as_ref(), plan_path)?;
    write_nodes(plan, nodes, opts, run, progress)
}

/// Writes `nodes` (those of `run.nodes` among the plan's, loaded, in node order) into
/// `opts.out_dir`; with `run.nodes`, as a shard.
fn write_nodes(
    plan: &Plan,
    nodes: Vec<LoadedNode>,
    opts: &MergeOptions,
    run: &RunOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<MergeReport, MergeError> {
    let g0_ns = plan.g0_ns;
    let models = &plan.models;
    let all_bases = plan.bases();
    let bases: Vec<NodeBases> = nodes
        .iter()
        .map(|n| all_bases[plan.nodes.binary_search_by_key(&n.node, |p| p.node).expect("a plan holds the nodes it loads")])
        .collect();
    let all_nodes: Vec<u32> = plan.nodes.iter().map(|n| n.node).collect();
    for n in &nodes {
        progress(&format!("loaded node {} from {} ({} MB)", n.node, n.path.display(), n.bytes / 1_000_000));
    }
    if let Some(set) = &run.nodes {
        progress(&format!("shard {set}: {} of the {} input nodes", nodes.len(), all_nodes.len()));
    }
    let run_name = run_name(g0_ns);
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| MergeError::Io { path, err }
    };
    // The output directory is written whole or not at all: into a staging directory beside
    // it, moved into place once every node succeeded (`AtomicDir`); a merge that fails or
    // is killed leaves no part of a run for XProf to load, not even an empty directory.
    // Every file in it, and a Chrome JSON elsewhere, is a temporary file renamed at the
    // end. A shard writes a fragment of the Chrome JSON (no header, no footer) for the join.
    let staged = distprof::atomic_file::AtomicDir::create(&opts.out_dir).map_err(io_err(&opts.out_dir))?;
    let run_dir = staged.path().join("plugins").join("profile").join(&run_name);
    distprof::atomic_file::create_dir_all(&run_dir).map_err(io_err(&run_dir))?;
    let chrome_path = match (&run.nodes, &opts.chrome) {
        (Some(_), Some(_)) => Some(staged.path().join(shard::FRAGMENT_FILE)),
        (None, c) => c.as_deref().map(|c| staged.staged_path(c)),
        (Some(_), None) => None,
    };
    let chrome = match &chrome_path {
        Some(p) => {
            let base_ns = run.nodes.is_none().then_some(g0_ns);
            Some(chrome_doc::ChromeDoc::create(p, base_ns, opts.trace_format).map_err(io_err(p))?.with_pftrace_compression(opts.pftrace_compression))
        }
        None => None,
    };
    let total_bytes: u64 = nodes.iter().map(|n| n.bytes).sum();
    let done_bytes = std::sync::atomic::AtomicU64::new(0);
    let next_job = std::sync::atomic::AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let workers = run.workers(nodes.len());
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<NodeDone, MergeError>)>();
    let mut results: Vec<Option<NodeDone>> = (0..nodes.len()).map(|_| None).collect();
    let mut first_err: Option<(usize, MergeError)> = None;
    let started = std::time::Instant::now();
    // merged.pftrace puts the flow ids on the begins of the slices, found per node before
    // its rewrite; the Chrome JSON gets its flows after every node (below).
    let node_flows = opts.flows && run.nodes.is_none() && opts.trace_format == TraceFormat::Pftrace;
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (nodes, bases, chrome, run_dir) = (&nodes, &bases, &chrome, &run_dir);
            let (next_job, stop, done_bytes) = (&next_job, &stop, &done_bytes);
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
                        Some(doc) => doc.next_job(nodes.len(), |k| nodes[k].bytes).map(|r| (r.order, Some((r, doc)))),
                        None => {
                            let k = next_job.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            (k < nodes.len()).then_some((k, None))
                        }
                    };
                    let Some((k, fragment)) = job else { break };
                    let r = merge_node(&nodes[k], bases[k], g0_ns, run_dir, fragment, node_flows, models, done_bytes, &mut input);
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
                            staged.final_path(&d.summary.output).display()
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
        if opts.flows && run.nodes.is_none() && opts.trace_format == TraceFormat::ChromeJson {
            let outputs: Vec<(u32, PathBuf)> = results.iter().flatten().map(|d| (d.summary.node, d.summary.output.clone())).collect();
            let first_pid = plan.nodes.iter().zip(&all_bases).map(|(n, b)| (n.node, b.pid)).collect();
            progress("linking the collectives across nodes (--flows): reading the merged outputs again");
            let flows = super::flows::append(&doc, nodes.len(), &outputs, &first_pid)?;
            progress(&format!("{flows} collective occurrences linked across nodes by flow arrows"));
        }
        let p = doc.path().to_path_buf();
        doc.commit().map_err(io_err(&p))?;
    }
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    let mut summaries = Vec::new();
    for d in results.into_iter().flatten() {
        bytes_in += d.bytes_in;
        bytes_out += d.bytes_out;
        summaries.push(MergedNode { output: staged.final_path(&d.summary.output), ..d.summary });
    }
    let report = MergeReport {
        run_dir: staged.final_path(&run_dir),
        chrome: if run.nodes.is_some() { None } else { opts.chrome.clone() },
        g0_ns,
        bytes_in,
        bytes_out,
        nodes: summaries,
    };
    if let Some(set) = &run.nodes {
        shard::write_manifest(staged.path(), &run_name, set, &all_nodes, &report, chrome_path.is_some(), opts.trace_format)?;
    }
    staged.commit().map_err(io_err(&opts.out_dir))?;
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
    flows: bool,
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
    // The Chrome writer, and where its finished fragment goes back to.
    let (writer, done_to) = match fragment {
        Some((r, doc)) => {
            let w = match doc.format() {
                TraceFormat::ChromeJson => TraceWriter::Json(chrome::ChromeWriter::new(r.writer, bases.pid)),
                TraceFormat::Pftrace => TraceWriter::Proto(pftrace::ProtoWriter::new(r.writer, bases.pid, g0_ns).with_compression(doc.pftrace_compression())),
            };
            (Some(w), Some((doc, r.order)))
        }
        None => (None, None),
    };
    super::direct_io::read_whole(&n.path, buf).map_err(|e| MergeError::Io { path: n.path.clone(), err: e })?;
    let mut writer = match writer {
        Some(TraceWriter::Proto(w)) if flows => {
            let start_ns = n.info.profile_start_ns.unwrap_or(0);
            let found = super::flows::NodeFlows::scan(buf, n.node, start_ns, &n.map).map_err(|err| MergeError::Wire { path: n.path.clone(), err })?;
            Some(TraceWriter::Proto(w.with_flows(found)))
        }
        w => w,
    };
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
    let next_pid = match (writer, done_to) {
        (Some(cw), Some((doc, order))) => {
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
    // Every event's correction is as uncertain as the map says where it lies; the worst
    // of the profile is stated, and flagged beyond what a model is trusted to.
    let max_uncertainty_ns = match (model, n.info.profile_start_ns, n.info.profile_stop_ns) {
        (Some(m), Some(lo), Some(hi)) if m.reachable && !m.segments.is_empty() => n.map.global.max_uncertainty_ns(lo, hi),
        (Some(m), _, _) if m.reachable && !m.segments.is_empty() => m.segments.iter().map(|s| s.uncertainty_ns).fold(0.0, f64::max),
        _ => f64::NAN,
    };
    let summary = MergedNode {
        node: n.node,
        extrapolated_ns,
        max_uncertainty_ns,
        uncertainty_exceeded: max_uncertainty_ns > belong::MAX_MERGE_UNCERTAINTY_NS,
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

