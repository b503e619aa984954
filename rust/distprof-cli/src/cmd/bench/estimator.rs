//! `distprof bench estimator`: fit time per edge-window and accuracy of the exact hull
//! method against linfa-svm at 1k, 5k and 10k points, on a synthetic window
//! (true line 1234.5 µs + 37 ppm x over a 4 s window, one-way delays of
//! 10 µs plus exponential queueing with mean 20 µs, half the points each way). linfa-svm
//! takes seconds to tens of seconds per fit and ~0.8 GB at 10k, so it runs once per size;
//! the hull runs many times. Hull timings include sorting the points by x from random
//! order (online the points arrive sorted, so this is the worst case). Times are the
//! thread's CPU time, so a busy machine does not inflate them.

use distprof::estimate::hull::{self, Line};
use distprof::estimate::points::Point;
use std::io::Write;
use std::process::ExitCode;
use distprof::clock::thread_cpu_s;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// Point counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000usize, 5000, 10000])]
    sizes: Vec<usize>,
    /// Skip linfa-svm (for a quick look at the hull alone).
    #[arg(long)]
    no_svm: bool,
    /// Seed of the synthetic windows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const TRUE_OFFSET_NS: f64 = 1_234_500.0;
const TRUE_SLOPE: f64 = 37e-6;
const HALF_WINDOW_NS: f64 = 2e9;
const BASE_DELAY_NS: f64 = 10_000.0;
const QUEUE_MEAN_NS: f64 = 20_000.0;
/// Hull accuracy is also reported over this many windows (its fit is microseconds).
const HULL_ACCURACY_WINDOWS: u64 = 50;
/// Hull fits are repeated until this much time has passed, for a stable time per fit.
const HULL_TIMING_S: f64 = 0.3;
const SVM_C: f64 = 100.0;

/// A small deterministic generator (xorshift*), enough for synthetic points.
struct Gen(u64);
impl Gen {
    fn new(seed: u64, n: u64) -> Self {
        Self((seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03)) | 1)
    }
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// Unsorted forward and reverse points of one synthetic window.
fn window(n: usize, seed: u64, index: u64) -> (Vec<Point>, Vec<Point>) {
    let mut g = Gen::new(seed, index);
    let mut side = |sign: f64| -> Vec<Point> {
        (0..n / 2)
            .map(|_| {
                let x_ns = (g.unit() * 2.0 - 1.0) * HALF_WINDOW_NS;
                let d = BASE_DELAY_NS - QUEUE_MEAN_NS * g.unit().ln();
                Point { x_ns, y_ns: TRUE_OFFSET_NS + TRUE_SLOPE * x_ns + sign * d }
            })
            .collect()
    };
    let fwd = side(1.0);
    let rev = side(-1.0);
    (fwd, rev)
}

fn sorted(v: &[Point]) -> Vec<Point> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
    v
}

fn errors(line: &Line) -> (f64, f64) {
    ((line.intercept_ns - TRUE_OFFSET_NS).abs(), (line.slope - TRUE_SLOPE).abs() * 1e9)
}

#[derive(serde::Serialize)]
struct Row {
    points: usize,
    method: &'static str,
    fits: u64,
    time_per_fit_us: f64,
    /// On the window(s) linfa-svm also fitted: the like-for-like comparison.
    offset_err_ns: f64,
    slope_err_ppb: f64,
    /// Hull only: over `HULL_ACCURACY_WINDOWS` windows.
    offset_err_ns_p50: Option<f64>,
    offset_err_ns_max: Option<f64>,
    slope_err_ppb_max: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.sizes.iter().any(|n| !(8..=200_000).contains(n)) {
        anyhow::bail!("--sizes {:?}: every size must be in 8..=200000", args.sizes);
    }
    let mut rows = Vec::new();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:>7} {:>5} {:>6} {:>14} {:>13} {:>13}", "points", "method", "fits", "time/fit_us", "offset_err_ns", "slope_err_ppb")?;
    for &n in &args.sizes {
        let (fwd, rev) = window(n, args.seed, 0);
        let fit_sorted = |f: &[Point], r: &[Point]| hull::fit(&sorted(f), &sorted(r)).map(|h| h.line);
        let line = fit_sorted(&fwd, &rev).map_err(|e| anyhow::anyhow!("hull fit failed at {n} points: {e:?}"))?;
        let started = thread_cpu_s();
        let mut fits = 0u64;
        while thread_cpu_s() - started < HULL_TIMING_S || fits < 10 {
            std::hint::black_box(fit_sorted(std::hint::black_box(&fwd), &rev).ok());
            fits += 1;
        }
        let hull_us = (thread_cpu_s() - started) * 1e6 / fits as f64;
        let mut offs = Vec::new();
        let mut slope_max: f64 = 0.0;
        for w in 0..HULL_ACCURACY_WINDOWS {
            let (f, r) = window(n, args.seed, w);
            if let Ok(l) = fit_sorted(&f, &r) {
                let (o, s) = errors(&l);
                offs.push(o);
                slope_max = slope_max.max(s);
            }
        }
        offs.sort_by(f64::total_cmp);
        let (o, s) = errors(&line);
        rows.push(Row {
            points: n,
            method: "hull",
            fits,
            time_per_fit_us: hull_us,
            offset_err_ns: o,
            slope_err_ppb: s,
            offset_err_ns_p50: offs.get(offs.len() / 2).copied(),
            offset_err_ns_max: offs.last().copied(),
            slope_err_ppb_max: Some(slope_max),
        });
        print_row(&mut out, rows.last())?;
        if !args.no_svm {
            if let Some(row) = svm_row(n, &fwd, &rev)? {
                rows.push(row);
                print_row(&mut out, rows.last())?;
            }
        }
    }
    let find = |method: &str, n: usize| rows.iter().find(|r| r.method == method && r.points == n);
    let speedup_5k = match (find("hull", 5000), find("svm", 5000)) {
        (Some(h), Some(s)) => Some(s.time_per_fit_us / h.time_per_fit_us),
        _ => None,
    };
    let summary = serde_json::json!({
        "rows": rows,
        "speedup_5k": speedup_5k,
        "hull_offset_err_ns_5k": find("hull", 5000).map(|r| r.offset_err_ns),
        "svm_offset_err_ns_5k": find("svm", 5000).map(|r| r.offset_err_ns),
        "svm_c": SVM_C,
        "note": "times are thread CPU time; svm: one fit per size (seconds each, ~0.8 GB at 10k); hull: repeated, time includes sorting",
    });
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&summary)?)?;
    } else {
        writeln!(out, "speedup at 5k: {}", speedup_5k.map_or("-".into(), |s| format!("{s:.0}x")))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(out: &mut impl Write, r: Option<&Row>) -> std::io::Result<()> {
    if let Some(r) = r {
        writeln!(
            out,
            "{:>7} {:>5} {:>6} {:>14.1} {:>13.1} {:>13.2}",
            r.points, r.method, r.fits, r.time_per_fit_us, r.offset_err_ns, r.slope_err_ppb
        )?;
    }
    Ok(())
}

fn svm_row(n: usize, fwd: &[Point], rev: &[Point]) -> anyhow::Result<Option<Row>> {
    let started = thread_cpu_s();
    let line = distprof::estimate::svm::fit(fwd, rev, SVM_C)
        .map_err(|e| anyhow::anyhow!("linfa-svm fit failed at {n} points: {e:?}"))?;
    let us = (thread_cpu_s() - started) * 1e6;
    let (o, s) = errors(&line);
    Ok(Some(Row {
        points: n,
        method: "svm",
        fits: 1,
        time_per_fit_us: us,
        offset_err_ns: o,
        slope_err_ppb: s,
        offset_err_ns_p50: None,
        offset_err_ns_max: None,
        slope_err_ppb_max: None,
    }))
}
