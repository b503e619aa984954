//! `distprof bench merge`: merge throughput and peak memory next to a plain
//! decode-everything-and-re-encode baseline, on a synthetic multi-node input.
//!
//! Each side runs in a child process of its own so that its peak RSS (VmHWM) is its own:
//! the merge on one thread (`--jobs 1`), the merge on every core, and the baseline.
//! Per-core throughput is input MB over the serial child's CPU time (user + system), which
//! stays meaningful on a machine shared with other jobs; the all-cores figure is input MB
//! over the parallel child's wall time, and the speed-up is serial wall over parallel wall
//! (so it suffers when other jobs take the cores: the load average is printed with it, and
//! what each side's threads waited for a CPU that another job held, `run_queue`).
//! The two merge sides run `--repeat` times, alternating, and the figures take each side's
//! best run: on a shared or virtual machine the same run's CPU time varies by half
//! (interference only ever adds time), so the best run is the closest to the merge's own
//! cost. Every run's figure is printed too.
//! The synthetic input (`distprof_testkit::synthetic_xspace::write_gpu_profile`) looks like a GPU profile: per node a `/host:CPU` plane with many
//! threads and a `/device:GPU:0` plane with streams of kernels (events with stats), a
//! `Task Environment` plane and a distprof plane (drifting model, tracer start, snapshots),
//! so both the S -> G and the R -> S -> G paths are exercised.

use distprof::xplane::XSpace;
use distprof_offline::merge::pftrace::PftraceCompression;
use distprof_offline::merge::trace_out::TraceFormat;
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
    /// Internal (children): write the Chrome JSON instead of merged.pftrace. The bench
    /// measures all three: the default outputs, then merged.pftrace with plain packets, then
    /// the Chrome JSON, beside them.
    #[arg(long, hide = true, conflicts_with = "no_perfetto")]
    chrome: bool,
    /// Internal (children): write merged.pftrace with plain packets
    /// (`--pftrace-compression none`).
    #[arg(long, hide = true, conflicts_with_all = ["no_perfetto", "chrome"])]
    plain_pftrace: bool,
    /// Write no Perfetto output (the XProf run directory alone).
    #[arg(long, alias = "no-chrome")]
    no_perfetto: bool,
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
        let output = match (args.no_perfetto, args.chrome, args.plain_pftrace) {
            (true, _, _) => Output::None,
            (false, true, _) => Output::ChromeJson,
            (false, false, true) => Output::PftracePlain,
            (false, false, false) => Output::Pftrace,
        };
        return child(side, &dir, output, args.jobs.unwrap_or(1));
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
    let side = |name: &str, jobs: usize, output: Output| -> anyhow::Result<Run> {
        let mut cmd = crate::self_command()?;
        cmd.args(["bench", "merge", "--child", name, "--dir"])
            .arg(&dir)
            .args(["--jobs", &jobs.to_string()]);
        match output {
            Output::None => cmd.arg("--no-perfetto"),
            Output::ChromeJson => cmd.arg("--chrome"),
            Output::PftracePlain => cmd.arg("--plain-pftrace"),
            Output::Pftrace => &mut cmd,
        };
        let out = cmd.output()?;
        if !out.status.success() {
            anyhow::bail!(
                "bench child `{name}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        Ok(Run {
            cpu_s: v["cpu_secs"].as_f64().unwrap_or(f64::NAN),
            wall_s: v["wall_secs"].as_f64().unwrap_or(f64::NAN),
            wait_s: v["run_queue_wait_secs"].as_f64().unwrap_or(f64::NAN),
            rss: v["peak_rss_bytes"].as_u64().unwrap_or(0),
            bytes_out: v["bytes_out"].as_u64().unwrap_or(0),
            perfetto_bytes: v["perfetto_bytes"].as_u64().unwrap_or(0),
        })
    };
    let load_before = load_average();
    let base = if args.skip_baseline {
        Run { cpu_s: f64::NAN, wall_s: f64::NAN, wait_s: f64::NAN, rss: 0, bytes_out: 0, perfetto_bytes: 0 }
    } else {
        side("baseline", 1, Output::None)?
    };
    // The default outputs, then (unless --no-perfetto) the same with merged.pftrace's
    // packets plain, and with the Chrome JSON instead of merged.pftrace, beside them.
    let mut outputs = vec![if args.no_perfetto { Output::None } else { Output::Pftrace }];
    if !args.no_perfetto {
        outputs.extend([Output::PftracePlain, Output::ChromeJson]);
    }
    let mut figures = Vec::new();
    for &output in &outputs {
        let (mut serial_runs, mut parallel_runs) = (Vec::new(), Vec::new());
        for k in 0..args.repeat {
            eprintln!("bench merge ({}): run {} of {}: serial, then {cores} workers", output.name(), k + 1, args.repeat);
            serial_runs.push(side("merge", 1, output)?);
            parallel_runs.push(side("merge", cores, output)?);
        }
        figures.push(Figures::of(output, &serial_runs, &parallel_runs, total, largest, at_once, cores, workers, &dir)?);
    }
    let load_after = load_average();
    let mb = total as f64 / 1e6;
    let base_mbps = mb / base.cpu_s;
    let f = &figures[0];
    if args.json {
        println!(
            "{}",
            serde_json::json!({"side": "baseline", "cpu_secs": base.cpu_s, "wall_secs": base.wall_s, "mb_per_s": base_mbps, "wall_mb_per_s": mb / base.wall_s, "peak_rss_bytes": base.rss, "peak_rss_ratio": base.rss as f64 / largest as f64})
        );
        for g in &figures {
            for row in g.rows(mb, total, largest, at_once, cores) {
                println!("{row}");
            }
        }
        let mut summary = f.summary(args.repeat, cores);
        summary["baseline_mb_per_s"] = serde_json::json!(round2(base_mbps));
        summary["load_average_1m"] = serde_json::json!([load_before, load_after]);
        if let [_, plain, json] = &figures[..] {
            // Beside the default's: what deflating the packets costs and gains, and the
            // gain of the protobuf trace over the Chrome JSON.
            summary["pftrace_plain"] = plain.summary(args.repeat, cores);
            summary["chrome_json"] = json.summary(args.repeat, cores);
        }
        println!("{summary}");
    } else {
        println!(
            "input: {} nodes, {mb:.1} MB (largest {:.1} MB)",
            args.nodes,
            largest as f64 / 1e6
        );
        for g in &figures {
            println!("-- outputs: XProf run directory + {}", g.output.name());
            println!("merge:    {:>8.1} MB/s per core (CPU time; {:.1} MB/s wall), peak RSS {:.1} MB ({:.2} x largest input); best of {} runs: {:?}", g.mbps, mb / g.serial.wall_s, g.serial.rss as f64 / 1e6, g.rss_ratio, args.repeat, g.per_core_runs);
            println!("parallel: {:>8.1} MB/s on {cores} cores (wall), speed-up {:.2} x ({:.2} x cores), peak RSS {:.1} MB ({:.2} x the {workers} inputs at once)", mb / g.parallel.wall_s, g.speedup, g.speedup / cores as f64, g.parallel.rss as f64 / 1e6, g.par_rss_ratio);
            println!("parallel CPU efficiency (serial CPU / parallel CPU): {:.2}", g.serial.cpu_s / g.parallel.cpu_s);
            println!("waited for a CPU held by other jobs (all threads): {:.2} s serial, {:.2} s parallel", g.serial.wait_s, g.parallel.wait_s);
            println!(
                "output: {:.1} MB, {:.2} x the input (the Perfetto output {:.1} MB, {:.2} x)",
                g.serial.bytes_out as f64 / 1e6,
                g.serial.bytes_out as f64 / total as f64,
                g.serial.perfetto_bytes as f64 / 1e6,
                g.serial.perfetto_bytes as f64 / total as f64
            );
            println!(
                "disk: {:.0} MB/s for the {:.0} MB of output ({workers} writers): at least {:.2} s, a speed-up of at most {:.2}",
                g.disk_mb_per_s,
                g.serial.bytes_out as f64 / 1e6,
                g.serial.bytes_out as f64 / 1e6 / g.disk_mb_per_s,
                g.speedup_bound
            );
        }
        println!("load average (1 min) before and after: {load_before:.2}, {load_after:.2}");
        println!(
            "baseline: {base_mbps:>8.1} MB/s (decode all + re-encode), peak RSS {:.1} MB ({:.2} x)",
            base.rss as f64 / 1e6,
            base.rss as f64 / largest as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The Perfetto output a merge side writes beside the XProf run directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    /// merged.pftrace, its packets deflated (the default).
    Pftrace,
    /// merged.pftrace with plain packets (`--pftrace-compression none`).
    PftracePlain,
    ChromeJson,
    None,
}

impl Output {
    fn name(self) -> &'static str {
        match self {
            Output::Pftrace => "merged.pftrace",
            Output::PftracePlain => "merged.pftrace, plain packets",
            Output::ChromeJson => "merged.trace.json",
            Output::None => "no Perfetto output",
        }
    }

    fn file_name(self) -> &'static str {
        match self {
            Output::Pftrace | Output::PftracePlain => "merged.pftrace",
            other => other.name(),
        }
    }
}

/// One child's measurements.
#[derive(Clone, Copy)]
struct Run {
    cpu_s: f64,
    wall_s: f64,
    /// What its threads waited for a CPU, summed (`run_queue`).
    wait_s: f64,
    rss: u64,
    /// Every output file.
    bytes_out: u64,
    /// The Perfetto output alone.
    perfetto_bytes: u64,
}

/// The figures of one kind of output, from its serial and parallel runs.
struct Figures {
    output: Output,
    /// The serial side's best: least CPU (and its least wall time, most memory).
    serial: Run,
    /// The parallel side's best: least wall time (and its most memory).
    parallel: Run,
    mbps: f64,
    per_core_runs: Vec<f64>,
    all_cores_runs: Vec<f64>,
    speedup: f64,
    speedup_bound: f64,
    disk_mb_per_s: f64,
    rss_ratio: f64,
    par_rss_ratio: f64,
}

impl Figures {
    #[allow(clippy::too_many_arguments)]
    fn of(output: Output, serial_runs: &[Run], parallel_runs: &[Run], total: u64, largest: u64, at_once: u64, cores: usize, workers: usize, dir: &Path) -> anyhow::Result<Self> {
        let least = |runs: &[Run], by: fn(&Run) -> f64| *runs.iter().min_by(|x, y| by(x).total_cmp(&by(y))).expect("at least one run");
        let most_rss = |runs: &[Run]| runs.iter().map(|r| r.rss).max().unwrap_or(0);
        let mut serial = least(serial_runs, |r| r.cpu_s);
        let fastest = least(serial_runs, |r| r.wall_s);
        (serial.wall_s, serial.wait_s) = (fastest.wall_s, fastest.wait_s);
        serial.rss = most_rss(serial_runs);
        let mut parallel = least(parallel_runs, |r| r.wall_s);
        parallel.rss = most_rss(parallel_runs);
        let mb = total as f64 / 1e6;
        // The merge returns once its outputs are on the disk: it cannot take less than the
        // disk needs for them, which bounds the speed-up however many cores render them.
        let disk_mb_per_s = disk_write_mb_per_s(dir, serial.bytes_out, workers)?;
        let disk_floor_s = serial.bytes_out as f64 / 1e6 / disk_mb_per_s;
        Ok(Self {
            output,
            mbps: mb / serial.cpu_s,
            per_core_runs: serial_runs.iter().map(|r| round2(mb / r.cpu_s)).collect(),
            all_cores_runs: parallel_runs.iter().map(|r| round2(mb / r.wall_s)).collect(),
            speedup: serial.wall_s / parallel.wall_s,
            speedup_bound: (cores as f64).min(serial.wall_s / disk_floor_s),
            disk_mb_per_s,
            rss_ratio: serial.rss as f64 / largest as f64,
            par_rss_ratio: parallel.rss as f64 / at_once as f64,
            serial,
            parallel,
        })
    }

    /// The JSON rows of its two sides.
    fn rows(&self, mb: f64, total: u64, largest: u64, at_once: u64, cores: usize) -> [serde_json::Value; 2] {
        let (s, p, output) = (&self.serial, &self.parallel, self.output.name());
        [
            serde_json::json!({"side": "merge", "output": output, "jobs": 1, "cpu_secs": s.cpu_s, "wall_secs": s.wall_s, "run_queue_wait_secs": s.wait_s, "mb_per_s": mb / s.cpu_s, "wall_mb_per_s": mb / s.wall_s, "peak_rss_bytes": s.rss, "input_bytes": total, "largest_input_bytes": largest, "output_bytes": s.bytes_out, "perfetto_bytes": s.perfetto_bytes}),
            serde_json::json!({"side": "merge", "output": output, "jobs": cores, "cpu_secs": p.cpu_s, "wall_secs": p.wall_s, "run_queue_wait_secs": p.wait_s, "mb_per_s": mb / p.cpu_s, "wall_mb_per_s": mb / p.wall_s, "peak_rss_bytes": p.rss, "inputs_at_once_bytes": at_once}),
        ]
    }

    fn summary(&self, repeat: u32, cores: usize) -> serde_json::Value {
        let mb = |b: u64| b as f64 / 1e6;
        let input_mb = self.mbps * self.serial.cpu_s;
        serde_json::json!({
            "output": self.output.name(),
            "mb_per_s_per_core": round2(self.mbps),
            "mb_per_s_all_cores": round2(input_mb / self.parallel.wall_s),
            "repeat": repeat,
            "mb_per_s_per_core_runs": self.per_core_runs,
            "mb_per_s_all_cores_runs": self.all_cores_runs,
            "cores": cores,
            "speedup": round2(self.speedup),
            "speedup_per_core": round2(self.speedup / cores as f64),
            // What the disk allows: the serial wall time over the time the disk takes
            // for the outputs (written as the merge writes them), at most `cores`.
            "speedup_bound": round2(self.speedup_bound),
            "disk_write_mb_per_s": round2(self.disk_mb_per_s),
            // What the threads of the runs behind the speed-up waited for a CPU that
            // another job held, summed over the threads (`run_queue`): wall time that the
            // merge's own work does not explain.
            "serial_run_queue_wait_secs": round2(self.serial.wait_s),
            "parallel_run_queue_wait_secs": round2(self.parallel.wait_s),
            "output_mb": round2(mb(self.serial.bytes_out)),
            // Every output (XProf run directory and Perfetto output) over the input, and
            // the Perfetto output alone over the input.
            "output_input_ratio": round2(mb(self.serial.bytes_out) / input_mb),
            "perfetto_input_ratio": round2(mb(self.serial.perfetto_bytes) / input_mb),
            // Serial CPU over parallel CPU: what running on every core costs in extra
            // work (threads, the gaps cut out of the Perfetto output), which the load of
            // other jobs does not change.
            "cpu_efficiency": round2(self.serial.cpu_s / self.parallel.cpu_s),
            "peak_rss_ratio": round2(self.rss_ratio),
            "parallel_peak_rss_ratio": round2(self.par_rss_ratio),
        })
    }
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

fn child(side: &str, dir: &Path, output: Output, jobs: usize) -> anyhow::Result<ExitCode> {
    let inputs = dir.join("in");
    let out = dir.join(format!("out-{side}-{jobs}"));
    std::fs::create_dir_all(&out)?;
    let start = std::time::Instant::now();
    let waits = super::run_queue::RunQueueWait::start();
    let perfetto = out.join(output.file_name());
    match side {
        "merge" => {
            let opts = MergeOptions {
                out_dir: out.clone(),
                chrome: (output != Output::None).then(|| perfetto.clone()),
                trace_format: if output == Output::ChromeJson { TraceFormat::ChromeJson } else { TraceFormat::Pftrace },
                allow_uncorrected: false,
                models: vec![],
                models_origin: None,
                force: false,
                flows: false,
                pftrace_compression: if output == Output::PftracePlain { PftraceCompression::None } else { PftraceCompression::Deflate },
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
    let wait_secs = waits.finish();
    println!(
        "{}",
        serde_json::json!({"wall_secs": wall_secs, "run_queue_wait_secs": wait_secs, "cpu_secs": cpu_secs(), "peak_rss_bytes": peak_rss_bytes(), "bytes_out": tree_bytes(&out), "perfetto_bytes": std::fs::metadata(&perfetto).map_or(0, |m| m.len())})
    );
    // The outputs are big (the Chrome JSON five times the input): removed once measured,
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
