//! How long this process's threads waited for a CPU while it ran: the run-queue delay
//! that Linux counts per thread (`/proc/self/task/TID/schedstat`, its second field, ns).
//!
//! On a machine that other jobs share, the wall-clock figures of a bench (the speed-up
//! above all) include the time the merge's threads were ready but another job held the
//! cores; the CPU time does not. This wait tells the two apart: a parallel merge whose
//! threads waited as long as they ran was held back by the load, not by its own work.
//!
//! A thread's counter goes when the thread exits, so a sampler thread reads every
//! thread's counter every [`EVERY`] and keeps the last value it saw of each: the wait of a
//! thread's last interval before it exits is missed (at most [`EVERY`] per thread).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the counters are read: each read costs a few µs per thread of CPU time,
/// which the bench counts as the merge's.
const EVERY: Duration = Duration::from_millis(10);

/// Samples the run-queue wait of every other thread of this process until [`Self::finish`].
pub struct RunQueueWait {
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<HashMap<String, u64>>,
}

impl RunQueueWait {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::gettid() }.to_string();
            let mut last: HashMap<String, u64> = HashMap::new();
            loop {
                let done = flag.load(Ordering::Relaxed);
                sample(&me, &mut last);
                if done {
                    return last;
                }
                std::thread::sleep(EVERY);
            }
        });
        Self { stop, sampler }
    }

    /// The waits summed over the threads, seconds (NaN where /proc has no schedstat).
    pub fn finish(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        match self.sampler.join() {
            Ok(last) if !last.is_empty() => last.values().sum::<u64>() as f64 * 1e-9,
            _ => f64::NAN,
        }
    }
}

/// Reads the wait of every thread but `me` into `last`.
fn sample(me: &str, last: &mut HashMap<String, u64>) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        if tid == me {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        if let Some(wait_ns) = text.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()) {
            last.insert(tid, wait_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_that_outnumber_the_cores_wait_for_them() {
        // Twice as many spinning threads as cores for 300 ms: together they are ready
        // for 2 x cores x 300 ms and run for at most cores x 300 ms, so they wait at least
        // about cores x 300 ms (less what the sampler misses at their ends).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let meter = RunQueueWait::start();
        let spin = Duration::from_millis(300);
        std::thread::scope(|s| {
            for _ in 0..2 * cores {
                s.spawn(move || {
                    let t = std::time::Instant::now();
                    while t.elapsed() < spin {
                        std::hint::spin_loop();
                    }
                });
            }
        });
        let waited = meter.finish();
        let floor = cores as f64 * 0.3 * 0.5;
        assert!(waited >= floor, "{waited:.3} s waited by {} threads on {cores} cores", 2 * cores);
    }
}
