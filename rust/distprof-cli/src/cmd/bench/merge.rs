//! `distprof bench merge`: merge throughput and peak memory next to a plain
//! decode-everything-and-re-encode baseline, on a synthetic multi-node input.
//!
//! Each side runs in a child process of its own so that its peak RSS (VmHWM) is its own:
//! the merge on one thread (`--jobs 1`), the merge on every core, and the baseline.
//! Per-core throughput is input MB over the serial child's CPU time (user + system), which
//! stays meaningful on a machine shared with other jobs; the all-cores figure is input MB
//! over the parallel child's wall time, and the speed-up is serial wall over parallel wall
//! (so it suffers when other jobs take the cores: the load average is printed with it).
//! The two merge sides run `--repeat` times, alternating, and the figures take each side's
//! best run: on a shared or virtual machine the same run's CPU time varies by half
//! (interference only ever adds time), so the best run is the closest to the merge's own
//! cost. Every run's figure is printed too.
//! The synthetic input (`distprof_testkit::synthetic_xspace::write_gpu_profile`) looks like a GPU profile: per node a `/host:CPU` plane with many
//! threads and a `/device:GPU:0` plane with streams of kernels (events with stats), a
//! `Task Environment` plane and a distprof plane (drifting model, tracer start, snapshots),
//! so both the S -> G and the R -> S -> G paths are exercised.

use distprof::xplane::XSpace;
use distprof_offline::merge::{merge_with, MergeOptions, RunOptions};
use distprof_testkit::synthetic_xspace::write_gpu_profile;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Total synthetic input size in MB, split over the nodes.
    #[arg(long, default_value_t = 256)]
    size_mb: u64,
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// Write the Chrome JSON, as `distprof merge` does by default (the default here too;
    /// kept for older scripts).
    #[arg(long, conflicts_with = "no_chrome")]
    chrome: bool,
    /// Do not write the Chrome JSON (the XSpace output alone).
    #[arg(long)]
    no_chrome: bool,
    /// Worker threads of the parallel run (default: the available cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Runs of each merge side (serial, parallel), alternating; the figures take each
    /// side's best run and list every run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Work directory (default: a fresh temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Do not run the baseline (it needs about 11x the input in memory; for inputs of
    /// several GiB); its figures are then null.
    #[arg(long)]
    skip_baseline: bool,
    /// Print the figures as JSON; the last line is the summary object.
    #[arg(long)]
    json: bool,
    /// Internal: run one side in this process (`merge` or `baseline`) on `--dir`.
    #[arg(long, hide = true)]
    child: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(side) = &args.child {
        let dir = args
            .dir
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--child needs --dir"))?;
        return child(side, &dir, !args.no_chrome, args.jobs.unwrap_or(1));
    }
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    let inputs = dir.join("in");
    std::fs::create_dir_all(&inputs)?;
    let per_node = args.size_mb * 1_000_000 / args.nodes.max(1) as u64;
    let mut sizes = Vec::new();
    for k in 0..args.nodes {
        let p = inputs.join(format!("node{k}.xplane.pb"));
        let n = if p.exists() && std::fs::metadata(&p)?.len() >= per_node {
            std::fs::metadata(&p)?.len()
        } else {
            write_gpu_profile(&p, k, per_node)?
        };
        sizes.push(n);
        eprintln!("bench merge: input node {k}: {:.1} MB", n as f64 / 1e6);
    }
    let total: u64 = sizes.iter().sum();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let cores = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let workers = cores.min(sizes.len()).max(1);
    // What the parallel run holds at once: the inputs of as many nodes as it has workers.
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let at_once: u64 = sizes.iter().take(workers).sum();
    let exe = std::env::current_exe()?;
    let side = |name: &str, jobs: usize| -> anyhow::Result<(f64, f64, u64, u64)> {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["bench", "merge", "--child", name, "--dir"])
            .arg(&dir)
            .args(["--jobs", &jobs.to_string()]);
        if args.no_chrome {
            cmd.arg("--no-chrome");
        }
        let out = cmd.output()?;
        if !out.status.success() {
            anyhow::bail!(
                "bench child `{name}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        Ok((
            v["cpu_secs"].as_f64().unwrap_or(f64::NAN),
            v["wall_secs"].as_f64().unwrap_or(f64::NAN),
            v["peak_rss_bytes"].as_u64().unwrap_or(0),
            v["bytes_out"].as_u64().unwrap_or(0),
        ))
    };
    let load_before = load_average();
    let (base_s, base_wall, base_rss, _) = if args.skip_baseline {
        (f64::NAN, f64::NAN, 0, 0)
    } else {
        side("baseline", 1)?
    };
    let (mut serial_runs, mut parallel_runs) = (Vec::new(), Vec::new());
    for k in 0..args.repeat {
        eprintln!("bench merge: run {} of {}: serial, then {cores} workers", k + 1, args.repeat);
        serial_runs.push(side("merge", 1)?);
        parallel_runs.push(side("merge", cores)?);
    }
    // Each side's best: the least CPU serial (the per-core figure), the least wall in
    // parallel; peak memory is the most any run took.
    let best = |runs: &[(f64, f64, u64, u64)], by: fn(&(f64, f64, u64, u64)) -> f64| {
        let mut b = *runs.iter().min_by(|x, y| by(x).total_cmp(&by(y))).expect("at least one run");
        b.2 = runs.iter().map(|r| r.2).max().unwrap_or(0);
        b
    };
    let (merge_s, _, merge_rss, bytes_out) = best(&serial_runs, |r| r.0);
    let merge_wall = best(&serial_runs, |r| r.1).1;
    let (par_s, par_wall, par_rss, _) = best(&parallel_runs, |r| r.1);
    let per_core_runs: Vec<f64> = serial_runs.iter().map(|r| round2(total as f64 / 1e6 / r.0)).collect();
    let all_cores_runs: Vec<f64> = parallel_runs.iter().map(|r| round2(total as f64 / 1e6 / r.1)).collect();
    // The merge returns once its outputs are on the disk: it cannot take less than the
    // disk needs for them, which bounds the speed-up however many cores render them.
    let disk_mb_per_s = disk_write_mb_per_s(&dir, bytes_out, workers)?;
    let disk_floor_s = bytes_out as f64 / 1e6 / disk_mb_per_s;
    let speedup_bound = (cores as f64).min(merge_wall / disk_floor_s);
    let load_after = load_average();
    let mb = total as f64 / 1e6;
    let merge_mbps = mb / merge_s;
    let base_mbps = mb / base_s;
    let ratio = merge_rss as f64 / largest as f64;
    let par_ratio = par_rss as f64 / at_once as f64;
    let speedup = merge_wall / par_wall;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"side": "baseline", "cpu_secs": base_s, "wall_secs": base_wall, "mb_per_s": base_mbps, "wall_mb_per_s": mb / base_wall, "peak_rss_bytes": base_rss, "peak_rss_ratio": base_rss as f64 / largest as f64})
        );
        println!(
            "{}",
            serde_json::json!({"side": "merge", "jobs": 1, "cpu_secs": merge_s, "wall_secs": merge_wall, "mb_per_s": merge_mbps, "wall_mb_per_s": mb / merge_wall, "peak_rss_bytes": merge_rss, "input_bytes": total, "largest_input_bytes": largest, "chrome": !args.no_chrome})
        );
        println!(
            "{}",
            serde_json::json!({"side": "merge", "jobs": cores, "cpu_secs": par_s, "wall_secs": par_wall, "mb_per_s": mb / par_s, "wall_mb_per_s": mb / par_wall, "peak_rss_bytes": par_rss, "inputs_at_once_bytes": at_once, "chrome": !args.no_chrome})
        );
        println!(
            "{}",
            serde_json::json!({
                "mb_per_s_per_core": round2(merge_mbps),
                "mb_per_s_all_cores": round2(mb / par_wall),
                "repeat": args.repeat,
                "mb_per_s_per_core_runs": per_core_runs,
                "mb_per_s_all_cores_runs": all_cores_runs,
                "cores": cores,
                "speedup": round2(speedup),
                "speedup_per_core": round2(speedup / cores as f64),
                // What the disk allows: the serial wall time over the time the disk takes
                // for the outputs (written as the merge writes them), at most `cores`.
                "speedup_bound": round2(speedup_bound),
                "disk_write_mb_per_s": round2(disk_mb_per_s),
                "output_mb": round2(bytes_out as f64 / 1e6),
                // Serial CPU over parallel CPU: what running on every core costs in extra
                // work (threads, the gaps cut out of the Chrome JSON), which the load of
                // other jobs does not change.
                "cpu_efficiency": round2(merge_s / par_s),
                "peak_rss_ratio": round2(ratio),
                "parallel_peak_rss_ratio": round2(par_ratio),
                "baseline_mb_per_s": round2(base_mbps),
                "chrome": !args.no_chrome,
                "load_average_1m": [load_before, load_after],
            })
        );
    } else {
        println!(
            "input: {} nodes, {mb:.1} MB (largest {:.1} MB)",
            args.nodes,
            largest as f64 / 1e6
        );
        println!("merge:    {merge_mbps:>8.1} MB/s per core (CPU time; {:.1} MB/s wall), peak RSS {:.1} MB ({ratio:.2} x largest input); best of {} runs: {per_core_runs:?}", mb / merge_wall, merge_rss as f64 / 1e6, args.repeat);
        println!("parallel: {:>8.1} MB/s on {cores} cores (wall), speed-up {speedup:.2} x ({:.2} x cores), peak RSS {:.1} MB ({par_ratio:.2} x the {workers} inputs at once)", mb / par_wall, speedup / cores as f64, par_rss as f64 / 1e6);
        println!("parallel CPU efficiency (serial CPU / parallel CPU): {:.2}", merge_s / par_s);
        println!(
            "disk: {disk_mb_per_s:.0} MB/s for the {:.0} MB of output ({workers} writers): at least {disk_floor_s:.2} s, a speed-up of at most {speedup_bound:.2}",
            bytes_out as f64 / 1e6
        );
        println!("load average (1 min) before and after: {load_before:.2}, {load_after:.2}");
        println!(
            "baseline: {base_mbps:>8.1} MB/s (decode all + re-encode), peak RSS {:.1} MB ({:.2} x)",
            base_rss as f64 / 1e6,
            base_rss as f64 / largest as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The 1-minute load average (NaN where /proc/loadavg cannot be read).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn child(side: &str, dir: &Path, chrome: bool, jobs: usize) -> anyhow::Result<ExitCode> {
    let inputs = dir.join("in");
    let out = dir.join(format!("out-{side}-{jobs}"));
    std::fs::create_dir_all(&out)?;
    let start = std::time::Instant::now();
    match side {
        "merge" => {
            let opts = MergeOptions {
                out_dir: out.clone(),
                chrome: chrome.then(|| out.join("merged.pftrace")),
                trace_format: distprof_offline::merge::trace_out::TraceFormat::Pftrace,
                allow_uncorrected: false,
                models: vec![],
                models_origin: None,
                force: false,
                flows: false,
            };
            let run = RunOptions { jobs, ..Default::default() };
            merge_with(&[inputs], &opts, &run, &mut |l| eprintln!("{l}"))?;
        }
        "baseline" => {
            let mut paths: Vec<_> = std::fs::read_dir(&inputs)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            paths.sort();
            for p in paths {
                let bytes = std::fs::read(&p)?;
                let space = XSpace::decode(bytes.as_slice())?;
                drop(bytes);
                std::fs::write(
                    out.join(p.file_name().unwrap_or_default()),
                    space.encode_to_vec(),
                )?;
            }
        }
        other => anyhow::bail!("unknown bench side `{other}`"),
    }
    let wall_secs = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"wall_secs": wall_secs, "cpu_secs": cpu_secs(), "peak_rss_bytes": peak_rss_bytes(), "bytes_out": tree_bytes(&out)})
    );
    // The outputs are big (the Chrome JSON several times the input): removed once measured,
    // so that repeated runs do not fill the disk of a reused --dir.
    let _ = std::fs::remove_dir_all(&out);
    Ok(ExitCode::SUCCESS)
}

/// Bytes of the files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// MB/s that the disk under `dir` takes for `bytes` written as merge writes its outputs:
/// past the page cache in 2 MB chunks by `writers` threads at once, each its share, then
/// fsynced. The files are removed afterwards.
fn disk_write_mb_per_s(dir: &Path, bytes: u64, writers: usize) -> anyhow::Result<f64> {
    use distprof_offline::merge::direct_io::{DirectWriter, CHUNK};
    let writers = writers.max(1);
    let share = bytes.div_ceil(writers as u64);
    // Bytes that change from chunk to chunk, so no layer can skip or compress them.
    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3]).collect();
    let start = std::time::Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..writers)
            .map(|k| {
                let (path, chunk) = (dir.join(format!("disk-probe-{k}")), &chunk);
                s.spawn(move || -> std::io::Result<()> {
                    let mut w = DirectWriter::new(std::fs::File::create(&path)?);
                    let mut left = share;
                    while left > 0 {
                        let n = (left as usize).min(CHUNK);
                        w.buf().extend_from_slice(&chunk[..n]);
                        w.maybe_flush()?;
                        left -= n as u64;
                    }
                    let (file, _) = w.finish()?;
                    file.sync_all()?;
                    drop(file);
                    std::fs::remove_file(&path)
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a disk probe thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(bytes as f64 / 1e6 / start.elapsed().as_secs_f64())
}

/// User + system CPU time of this process.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills one struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// VmHWM of this process.
fn peak_rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

struct TempDir(PathBuf);
impl TempDir {
    fn new() -> std::io::Result<Self> {
        let p = std::env::temp_dir().join(format!("distprof-bench-merge-{}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(Self(p))
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
