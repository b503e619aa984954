//! `distprof bench merge`: merge throughput and peak memory next to a plain
//! decode-everything-and-re-encode baseline, on a synthetic multi-node input.
//!
//! Each side runs in a child process of its own so that its peak RSS (VmHWM) is its own.
//! Throughput is input MB over the child's CPU time (user + system): merge is single-threaded,
//! so that is MB/s per core, and it stays meaningful on a machine shared with other jobs,
//! where wall time is not. Wall-clock figures are printed next to it.
//! The synthetic input (`distprof_testkit::synthetic_xspace::write_gpu_profile`) looks like a GPU profile: per node a `/host:CPU` plane with many
//! threads and a `/device:GPU:0` plane with streams of kernels (events with stats), a
//! `Task Environment` plane and a distprof plane (drifting model, tracer start, snapshots),
//! so both the S -> G and the R -> S -> G paths are exercised.

use distprof::xplane::XSpace;
use distprof_offline::merge::{merge, MergeOptions};
use distprof_testkit::synthetic_xspace::write_gpu_profile;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Total synthetic input size in MB, split over the nodes.
    #[arg(long, default_value_t = 256)]
    size_mb: u64,
    #[arg(long, default_value_t = 2)]
    nodes: u32,
    /// Also write the Chrome JSON (bigger than the XSpace output; slower).
    #[arg(long)]
    chrome: bool,
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
        return child(side, &dir, args.chrome);
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
    let mut largest = 0u64;
    let mut total = 0u64;
    for k in 0..args.nodes {
        let p = inputs.join(format!("node{k}.xplane.pb"));
        let n = if p.exists() && std::fs::metadata(&p)?.len() >= per_node {
            std::fs::metadata(&p)?.len()
        } else {
            write_gpu_profile(&p, k, per_node)?
        };
        largest = largest.max(n);
        total += n;
        eprintln!("bench merge: input node {k}: {:.1} MB", n as f64 / 1e6);
    }
    let exe = std::env::current_exe()?;
    let side = |name: &str| -> anyhow::Result<(f64, f64, u64)> {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["bench", "merge", "--child", name, "--dir"])
            .arg(&dir);
        if args.chrome {
            cmd.arg("--chrome");
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
        ))
    };
    let (base_s, base_wall, base_rss) = if args.skip_baseline {
        (f64::NAN, f64::NAN, 0)
    } else {
        side("baseline")?
    };
    let (merge_s, merge_wall, merge_rss) = side("merge")?;
    let mb = total as f64 / 1e6;
    let merge_mbps = mb / merge_s;
    let base_mbps = mb / base_s;
    let ratio = merge_rss as f64 / largest as f64;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"side": "baseline", "cpu_secs": base_s, "wall_secs": base_wall, "mb_per_s": base_mbps, "wall_mb_per_s": mb / base_wall, "peak_rss_bytes": base_rss, "peak_rss_ratio": base_rss as f64 / largest as f64})
        );
        println!(
            "{}",
            serde_json::json!({"side": "merge", "cpu_secs": merge_s, "wall_secs": merge_wall, "mb_per_s": merge_mbps, "wall_mb_per_s": mb / merge_wall, "peak_rss_bytes": merge_rss, "input_bytes": total, "largest_input_bytes": largest, "chrome": args.chrome})
        );
        println!(
            "{}",
            serde_json::json!({"mb_per_s_per_core": round2(merge_mbps), "peak_rss_ratio": round2(ratio), "baseline_mb_per_s": round2(base_mbps)})
        );
    } else {
        println!(
            "input: {} nodes, {mb:.1} MB (largest {:.1} MB)",
            args.nodes,
            largest as f64 / 1e6
        );
        println!("merge:    {merge_mbps:>8.1} MB/s per core (CPU time; {:.1} MB/s wall), peak RSS {:.1} MB ({ratio:.2} x largest input)", mb / merge_wall, merge_rss as f64 / 1e6);
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

fn child(side: &str, dir: &Path, chrome: bool) -> anyhow::Result<ExitCode> {
    let inputs = dir.join("in");
    let out = dir.join(format!("out-{side}"));
    std::fs::create_dir_all(&out)?;
    let start = std::time::Instant::now();
    match side {
        "merge" => {
            let opts = MergeOptions {
                out_dir: out.clone(),
                chrome: chrome.then(|| out.join("merged.trace.json")),
                allow_uncorrected: false,
                models: vec![],
                models_origin: None,
                force: false,
            };
            merge(&[inputs], &opts, &mut |l| eprintln!("{l}"))?;
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
        serde_json::json!({"wall_secs": wall_secs, "cpu_secs": cpu_secs(), "peak_rss_bytes": peak_rss_bytes()})
    );
    Ok(ExitCode::SUCCESS)
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
