//! `distprof bench rendezvous`: time for many simulated nodes (threads) to agree over the
//! in-memory store, and what each node costs the store and the CPU. This measures the
//! protocol's own cost (key traffic, JSON, each node's edges), not a network.

use crate::stats::quantile;
use anyhow::{bail, Context as _};
use distprof::config::Config;
use distprof::context::RunContext;
use distprof::kv::{Counting, KvStore, MemoryStore, Traffic};
use distprof::rendezvous::{digest, rendezvous, RendezvousError};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Node threads only wait on condition variables and parse JSON: a small stack lets
/// thousands of them start quickly.
const NODE_STACK_BYTES: usize = 256 * 1024;

#[derive(clap::Args)]
pub struct Args {
    /// Number of simulated nodes (up to 16,384 and beyond: each is a bare thread).
    #[arg(long, default_value_t = 1024)]
    nodes: u32,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Print a JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// What one repetition measured.
pub(super) struct Agreement {
    pub wall_ms: f64,
    pub digest: String,
    /// Every node's context, in node order (each is its own slice: O(out-degree)).
    pub contexts: Vec<RunContext>,
    /// Per node: store traffic and CPU time of its rendezvous call, and when it returned
    /// (ms after the common start).
    pub traffic: Vec<Traffic>,
    pub cpu_ms: Vec<f64>,
    pub done_ms: Vec<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.nodes == 0 || args.repeat == 0 {
        bail!(
            "--nodes and --repeat must be at least 1 (got {} and {})",
            args.nodes,
            args.repeat
        );
    }
    let config = Config {
        rendezvous_timeout_ms: 120_000,
        ..Config::default()
    };
    let mut runs = Vec::new();
    for rep in 0..args.repeat {
        let a = agree_once(args.nodes, &config)?;
        println!(
            "run {}: {} nodes agreed on context {} in {:.1} ms",
            rep + 1,
            args.nodes,
            a.digest,
            a.wall_ms
        );
        runs.push(a);
    }
    runs.sort_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms));
    let median = &runs[runs.len() / 2];
    let per_node = |f: &dyn Fn(&Traffic) -> u64| -> (f64, f64) {
        let mut v: Vec<f64> = median.traffic.iter().map(|t| f(t) as f64).collect();
        (quantile(&mut v, 0.5).unwrap_or(0.0), quantile(&mut v, 1.0).unwrap_or(0.0))
    };
    let calls = per_node(&|t| t.calls);
    let read = per_node(&|t| t.bytes_read);
    let written = per_node(&|t| t.bytes_written);
    let mut cpu = median.cpu_ms.clone();
    let cpu = (quantile(&mut cpu, 0.5).unwrap_or(0.0), quantile(&mut cpu, 1.0).unwrap_or(0.0));
    let mut done = median.done_ms.clone();
    let done_p50 = quantile(&mut done, 0.5).unwrap_or(0.0);
    let largest = median.traffic.iter().map(|t| t.largest_value_bytes).max().unwrap_or(0);
    let total: u64 = median.traffic.iter().map(|t| t.bytes_read + t.bytes_written).sum();
    println!(
        "median over {} runs: {:.1} ms for {} nodes (half of them were done after {done_p50:.1} ms)",
        args.repeat, median.wall_ms, args.nodes
    );
    println!(
        "per node (p50 / max, the master included): {:.0} / {:.0} store calls, {:.0} / {:.0} bytes read, \
         {:.0} / {:.0} bytes written, {:.2} / {:.2} ms CPU; largest value {largest} bytes; \
         {total} bytes through the store in all",
        calls.0, calls.1, read.0, read.1, written.0, written.1, cpu.0, cpu.1
    );
    if args.json {
        let r1 = |x: f64| (x * 10.0).round() / 10.0;
        let r2 = |x: f64| (x * 100.0).round() / 100.0;
        println!(
            "{}",
            serde_json::json!({
                "nodes": args.nodes,
                "agree_ms": r1(median.wall_ms),
                "half_done_ms": r1(done_p50),
                "per_node": {
                    "calls_p50": calls.0, "calls_max": calls.1,
                    "bytes_read_p50": read.0, "bytes_read_max": read.1,
                    "bytes_written_p50": written.0, "bytes_written_max": written.1,
                    "cpu_ms_p50": r2(cpu.0), "cpu_ms_max": r2(cpu.1),
                },
                "largest_value_bytes": largest,
                "store_bytes_total": total,
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

type NodeResult = (Result<RunContext, RendezvousError>, Traffic, f64, Instant);

/// The key every node thread waits for before it starts (not counted as its traffic).
const START_KEY: &str = "bench/start";

/// Starts every node at once on a fresh store; returns the wall time until the last node
/// holds its context, the agreed digest, and each node's costs.
pub(super) fn agree_once(nodes: u32, config: &Config) -> anyhow::Result<Agreement> {
    let store = Arc::new(MemoryStore::new());
    // The start gate is a key of the store: waiters on a key wake without queueing for a
    // lock, where a `Barrier` of 16,384 threads would itself take seconds to release.
    let waiting = Arc::new(AtomicU32::new(0));
    let mut handles = Vec::with_capacity(nodes as usize);
    for i in 0..nodes {
        let (store, waiting, config) = (store.clone(), waiting.clone(), config.clone());
        let h = bare_thread::spawn(NODE_STACK_BYTES, move || -> NodeResult {
            let addr = SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 7000));
            waiting.fetch_add(1, Ordering::SeqCst);
            let gate = store.get(START_KEY, Duration::from_secs(600));
            let kv = Counting::new(store);
            if let Err(e) = gate {
                return (Err(RendezvousError::Kv(e)), kv.traffic(), 0.0, Instant::now());
            }
            let cpu0 = bare_thread::cpu_ns();
            let r = rendezvous(&kv, i, nodes, &config, addr, &format!("sim{i}"));
            let cpu_ms = (bare_thread::cpu_ns() - cpu0) as f64 / 1e6;
            (r, kv.traffic(), cpu_ms, Instant::now())
        })
        .with_context(|| format!("starting the thread of node {i}"))?;
        handles.push(h);
    }
    while waiting.load(Ordering::SeqCst) < nodes {
        std::thread::sleep(Duration::from_millis(10));
    }
    // The last threads to count themselves are about to block on the gate.
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    store.set(START_KEY, "go")?;
    let mut results = Vec::with_capacity(nodes as usize);
    for (i, h) in handles.into_iter().enumerate() {
        let (ctx, traffic, cpu_ms, done) = h.join().map_err(|_| anyhow::anyhow!("node {i} panicked"))?;
        let done_ms = done.saturating_duration_since(start).as_secs_f64() * 1e3;
        results.push((ctx.with_context(|| format!("node {i}"))?, traffic, cpu_ms, done_ms));
    }
    // Checked outside the timed region: the check is the benchmark's, not the protocol's.
    let elapsed: Duration = start.elapsed();
    let digest = digest::context_digest(&results[0].0);
    for (i, (ctx, ..)) in results.iter().enumerate() {
        let d = digest::context_digest(ctx);
        if d != digest {
            bail!("node {i} agreed on context {d} but node 0 on {digest}");
        }
        if !ctx.absent_peers.is_empty() {
            bail!("node {i} went on without peers {:?}: a benchmark run must lose none", ctx.absent_peers);
        }
    }
    Ok(Agreement {
        wall_ms: elapsed.as_secs_f64() * 1e3,
        digest,
        traffic: results.iter().map(|r| r.1).collect(),
        cpu_ms: results.iter().map(|r| r.2).collect(),
        done_ms: results.iter().map(|r| r.3).collect(),
        contexts: results.into_iter().map(|r| r.0).collect(),
    })
}

/// Threads for thousands of simulated nodes. A std thread costs four memory mappings (its
/// stack and guard page, and the signal stack std adds to report stack overflows, with
/// its own guard); at 16,384 threads that is over Linux's default limit of 65,530
/// mappings per process (`vm.max_map_count`), and thread creation fails. A bare pthread
/// costs two, its stack and guard page; an overflow then ends the process with SIGSEGV
/// instead of a message.
mod bare_thread {
    use std::any::Any;
    use std::ffi::c_void;
    use std::io;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{Arc, Mutex};

    type Job = Box<dyn FnOnce() + Send>;
    type Outcome<T> = Arc<Mutex<Option<Result<T, Box<dyn Any + Send>>>>>;

    pub struct Handle<T> {
        thread: libc::pthread_t,
        outcome: Outcome<T>,
    }

    extern "C" fn start(arg: *mut c_void) -> *mut c_void {
        // SAFETY: `arg` is the `Box<Job>` leaked by `spawn` for this thread alone.
        let job = unsafe { Box::from_raw(arg as *mut Job) };
        job();
        std::ptr::null_mut()
    }

    pub fn spawn<T: Send + 'static>(stack_bytes: usize, f: impl FnOnce() -> T + Send + 'static) -> io::Result<Handle<T>> {
        let outcome: Outcome<T> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&outcome);
        // A panic must not unwind into the C frame that started the thread.
        let job: Job = Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(f));
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        });
        let arg = Box::into_raw(Box::new(job)) as *mut c_void;
        // SAFETY: plain pthread calls on a zeroed, initialized attribute; on failure the
        // leaked job is taken back, on success the new thread owns it.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            libc::pthread_attr_setstacksize(&mut attr, stack_bytes.max(libc::PTHREAD_STACK_MIN));
            let mut thread: libc::pthread_t = std::mem::zeroed();
            let rc = libc::pthread_create(&mut thread, &attr, start, arg);
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(arg as *mut Job));
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(Handle { thread, outcome })
        }
    }

    impl<T> Handle<T> {
        /// Waits for the thread; `Err` carries its panic.
        pub fn join(self) -> Result<T, Box<dyn Any + Send>> {
            // SAFETY: the thread was created joinable and is joined once, here.
            unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
            let r = self.outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
            r.unwrap_or_else(|| Err(Box::new("the thread ended without a result")))
        }
    }

    /// CPU time of the calling thread, ns.
    pub fn cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec for the calling thread's CPU clock.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}
