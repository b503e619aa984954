//! The rendezvous on a background thread, for the XLA plugin: PJRT client creation (hook 1)
//! must never wait for it. The caller polls the handle (e.g. at profiler start) without
//! blocking; a failure is logged once, precisely, and leaves profiling disabled.

use super::{rendezvous, RendezvousError};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::kv::KvStore;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

type Outcome = Option<Result<RunContext, RendezvousError>>;

/// The pending or finished result of [`spawn_rendezvous`]. Cheap to clone.
#[derive(Clone)]
pub struct RendezvousHandle {
    shared: Arc<(Mutex<Outcome>, Condvar)>,
}

impl RendezvousHandle {
    /// The result if the rendezvous has finished, without blocking.
    pub fn try_result(&self) -> Option<Result<RunContext, RendezvousError>> {
        self.shared
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `timeout` for the result.
    pub fn wait(&self, timeout: Duration) -> Option<Result<RunContext, RendezvousError>> {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.shared;
        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        while guard.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            guard = cv
                .wait_timeout(guard, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        guard.clone()
    }

    fn finish(&self, outcome: Result<RunContext, RendezvousError>) {
        let (lock, cv) = &*self.shared;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
        cv.notify_all();
    }
}

/// Starts the rendezvous on a thread named `distprof-rendezvous` and returns at once.
/// The store must stay valid while the thread runs (XLA's store lives as long as the
/// client; every wait is bounded by `config.rendezvous_timeout_ms`).
pub fn spawn_rendezvous(
    kv: Arc<dyn KvStore>,
    node: NodeId,
    num_nodes: u32,
    config: Config,
    probe_addr: SocketAddr,
    hostname: String,
) -> RendezvousHandle {
    let handle = RendezvousHandle {
        shared: Arc::new((Mutex::new(None), Condvar::new())),
    };
    let thread_handle = handle.clone();
    let body = move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rendezvous(kv.as_ref(), node, num_nodes, &config, probe_addr, &hostname)
        }))
        .unwrap_or_else(|_| {
            Err(RendezvousError::InvalidArgument(
                "internal error: the rendezvous thread panicked".into(),
            ))
        });
        if let Err(e) = &outcome {
            tracing::error!("distprof disabled for this run: {e}");
        }
        thread_handle.finish(outcome);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("distprof-rendezvous".into())
        .spawn(body)
    {
        let err =
            RendezvousError::InvalidArgument(format!("cannot start the rendezvous thread: {e}"));
        tracing::error!("distprof disabled for this run: {err}");
        handle.finish(Err(err));
    }
    handle
}
