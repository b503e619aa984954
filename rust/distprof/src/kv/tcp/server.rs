//! The TCP store's server, run by rank 0 of a standalone run (the c10d TCPStore model).
//!
//! One thread accepts, one thread per connection serves requests against a
//! [`MemoryStore`]. A bad frame closes that connection with one log line naming the peer;
//! it never affects other clients.

use super::frame::{self, FrameError, Request, Response};
use crate::kv::{KvError, KvStore, MemoryStore};
use std::io::{self, BufReader, BufWriter};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// More simultaneous clients than any run has nodes times a few; past it a connection is
/// refused with an error reply instead of exhausting threads.
const MAX_CONNECTIONS: usize = 8192;
/// A server-side blocking GET wakes this often to notice a shutdown.
const SHUTDOWN_POLL: Duration = Duration::from_millis(200);
/// Connection threads only parse frames and wait on condition variables: a small stack.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;

struct Shared {
    store: MemoryStore,
    stopping: AtomicBool,
    /// Clones of live connections, so `shutdown` can close them and wake their readers.
    connections: Mutex<Vec<(u64, TcpStream)>>,
}

/// A running store server; stops when dropped.
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: MemoryStore::new(),
            stopping: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("distprof-kv-accept".into())
                .spawn(move || accept_loop(listener, shared))?
        };
        tracing::debug!(%local_addr, "key-value store serving");
        Ok(Self {
            local_addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The bound address (with the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The served map, for the process that hosts the server (it need not talk TCP to itself).
    pub fn store(&self) -> &MemoryStore {
        &self.shared.store
    }

    /// Number of client connections open now. A master that failed keeps serving until
    /// this drops to zero (every node has read the abort and gone) or a grace period ends.
    pub fn connection_count(&self) -> usize {
        lock(&self.shared.connections).len()
    }

    /// Stops accepting and closes every connection; clients see the store go away.
    pub fn shutdown(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the blocking accept with a connection of our own.
        let wake = match self.local_addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], a.port()))
            }
            SocketAddr::V6(a) if a.ip().is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
            }
            a => a,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (_, conn) in lock(&self.shared.connections).drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("key-value store: accept failed: {e}");
                // Out of descriptors or similar: do not spin.
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let peer = conn
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let _ = conn.set_nodelay(true);
        let id = next_id;
        next_id += 1;
        {
            let mut conns = lock(&shared.connections);
            if conns.len() >= MAX_CONNECTIONS {
                drop(conns);
                tracing::warn!(
                    "key-value store: refusing {peer}: {MAX_CONNECTIONS} connections open"
                );
                let _ = frame::write_response(
                    &mut &conn,
                    &Response::Error(format!("server full ({MAX_CONNECTIONS} connections)")),
                );
                continue;
            }
            match conn.try_clone() {
                Ok(clone) => conns.push((id, clone)),
                Err(e) => {
                    tracing::warn!("key-value store: cannot track connection from {peer}: {e}");
                    continue;
                }
            }
        }
        let shared2 = shared.clone();
        let spawned = thread::Builder::new()
            .name("distprof-kv-conn".into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                serve_connection(conn, &peer, &shared2);
                lock(&shared2.connections).retain(|(i, _)| *i != id);
            });
        if let Err(e) = spawned {
            tracing::warn!("key-value store: cannot start a connection thread: {e}");
            lock(&shared.connections).retain(|(i, _)| *i != id);
        }
    }
}

fn serve_connection(conn: TcpStream, peer: &str, shared: &Shared) {
    let mut reader = BufReader::new(&conn);
    let mut writer = BufWriter::new(&conn);
    let mut greeted = false;
    loop {
        let req = match frame::read_request(&mut reader) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(FrameError::Io(e)) => {
                if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::debug!("key-value store: connection from {peer} ended: {e}");
                }
                return;
            }
            Err(FrameError::Malformed(m)) => {
                tracing::warn!("key-value store: closing connection from {peer}: bad frame: {m}");
                let _ =
                    frame::write_response(&mut writer, &Response::Error(format!("bad frame: {m}")));
                return;
            }
        };
        let resp = match (greeted, req) {
            (false, Request::Hello { version }) if version == frame::VERSION => {
                greeted = true;
                Response::Ok
            }
            (false, Request::Hello { version }) => {
                tracing::warn!(
                    "key-value store: {peer} speaks protocol version {version}, this server {}",
                    frame::VERSION
                );
                let _ = frame::write_response(
                    &mut writer,
                    &Response::Error(format!(
                        "protocol version {version} unsupported; server speaks {}",
                        frame::VERSION
                    )),
                );
                return;
            }
            (false, _) => {
                tracing::warn!(
                    "key-value store: closing connection from {peer}: request before handshake"
                );
                let _ = frame::write_response(
                    &mut writer,
                    &Response::Error("request before handshake".into()),
                );
                return;
            }
            (true, Request::Hello { .. }) => Response::Ok,
            (true, Request::Get { key, timeout_ms }) => blocking_get(shared, &key, timeout_ms),
            (true, Request::TryGet { key }) => match shared.store.try_get(&key) {
                Ok(Some(v)) => Response::Value(v),
                Ok(None) => Response::NotFound,
                Err(e) => Response::Error(e.to_string()),
            },
            (true, Request::Set { key, value }) => match shared.store.set(&key, &value) {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error(e.to_string()),
            },
        };
        if frame::write_response(&mut writer, &resp).is_err() {
            return;
        }
    }
}

/// Waits in slices so that a shutdown is noticed within [`SHUTDOWN_POLL`].
fn blocking_get(shared: &Shared, key: &str, timeout_ms: u64) -> Response {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let now = Instant::now();
        let slice = deadline.saturating_duration_since(now).min(SHUTDOWN_POLL);
        match shared.store.get(key, slice) {
            Ok(v) => return Response::Value(v),
            Err(KvError::Timeout { .. }) => {
                if Instant::now() >= deadline {
                    return Response::Timeout;
                }
                if shared.stopping.load(Ordering::SeqCst) {
                    return Response::Error("store shutting down".into());
                }
            }
            Err(e) => return Response::Error(e.to_string()),
        }
    }
}
