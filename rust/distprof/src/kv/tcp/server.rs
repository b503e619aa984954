//! The TCP store's server, run by rank 0 of a standalone run (the c10d TCPStore model).
//!
//! One thread accepts, one thread per connection serves requests against a
//! [`MemoryStore`]. A bad frame closes that connection with one log line naming the peer;
//! it never affects other clients.
//!
//! The store is reachable by anything that can reach rank 0, so it defends itself against
//! peers that connect and say nothing (a connection flood) or say it slowly (slow loris):
//! - a connection must complete its HELLO within [`HANDSHAKE_TIMEOUT`], and a request
//!   within [`IDLE_TIMEOUT`] of the previous reply, else it is closed;
//! - connections that have not said HELLO are few ([`MAX_PENDING`], [`MAX_PENDING_PER_ADDRESS`]):
//!   a new one evicts the oldest, so a flood cannot keep a genuine client out, only delay
//!   its connect, which the client retries until its own deadline;
//! - greeted connections are limited per peer address ([`MAX_GREETED_PER_ADDRESS`]), and
//!   when the server is full a connection from an address that holds fewer than the
//!   heaviest address (less one) evicts that address's oldest greeted connection (fair
//!   share): a flood of greeted connections, even from many addresses, cannot keep out the
//!   ranks of a host that opens a few;
//! - every refusal and eviction is counted ([`ServerStats`]) and logged as one summary line
//!   per [`super::REFUSAL_LOG_INTERVAL`], never one line per connection;
//! - with a secret (`ServerOptions::secret`), a HELLO without it is refused before the
//!   connection is counted as greeted; before the HELLO nothing but the socket is kept.

use super::refusals::Refusals;
use super::frame::{self, FrameError, Request, Response};
use crate::kv::{KvError, KvStore, MemoryStore};
use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, BufWriter, Read};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// More simultaneous clients than any run has nodes times a few; past it a connection is
/// refused with a BUSY reply (after evicting one that has not said HELLO, if any).
pub const MAX_CONNECTIONS: usize = 8192;
/// A genuine client sends its HELLO right after connecting; a second is ample on a loaded
/// host, and a peer that has not finished it by then is not a distprof client.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// A greeted connection that sends no complete request for this long is closed; the
/// client reconnects on its next call. Long enough that a rank between two calls of a
/// rendezvous is never cut (its waits are server-side GETs, which are not idle).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections that have not completed their HELLO, in all and per peer address. A new one
/// past either limit evicts the oldest: an attacker only displaces its own connections, or
/// a genuine client's that retries.
pub const MAX_PENDING: usize = 512;
pub const MAX_PENDING_PER_ADDRESS: usize = 256;
/// Greeted connections from one address: a host runs one client per rank (8 or 16 GPUs),
/// a one-machine test up to a few hundred.
pub const MAX_GREETED_PER_ADDRESS: usize = 1024;
/// Descriptors per connection: its socket and the clone that closes it at shutdown (one
/// more while it has not said HELLO), and those the hosting process needs besides.
const FDS_PER_CONNECTION: u64 = 2;
const SPARE_FDS: u64 = MAX_PENDING as u64 + 256;
/// Longest a reply may take to leave: a genuine client reads at once.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A server-side blocking GET wakes this often to notice a shutdown.
const SHUTDOWN_POLL: Duration = Duration::from_millis(200);
/// Connection threads only parse frames and wait on condition variables: a small stack.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;

/// How a [`TcpStoreServer`] admits clients.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// When set, a HELLO must carry exactly this secret (the cluster's
    /// `DISTPROF_STORE_SECRET`); others are refused before being counted.
    pub secret: Option<String>,
    /// Connections held at once, greeted or not ([`MAX_CONNECTIONS`]; lower in tests).
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self { secret: None, max_connections: MAX_CONNECTIONS }
    }
}

/// What the defences did, for logs and `distprof bench faults`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerStats {
    /// Connections closed for not completing their HELLO in time.
    pub handshake_timeouts: u64,
    /// Connections without a HELLO evicted to make room for newer ones.
    pub evicted_pending: u64,
    /// Connections refused with BUSY (server or address full).
    pub refused_busy: u64,
    /// HELLOs with a wrong secret, version or frame.
    pub refused_hello: u64,
    /// Greeted connections closed for idleness.
    pub idle_closed: u64,
    /// Connections that completed the HELLO.
    pub greeted: u64,
    /// Greeted connections closed to make room for one from an address that held fewer
    /// (the fair share of a full server).
    pub evicted_greeted: u64,
    /// Greeted connections closed for a bad frame.
    pub bad_frames: u64,
    /// Summary lines logged about refusals and evictions.
    pub summary_lines: u64,
}

#[derive(Default)]
struct Counters {
    handshake_timeouts: AtomicU64,
    evicted_pending: AtomicU64,
    refused_busy: AtomicU64,
    refused_hello: AtomicU64,
    idle_closed: AtomicU64,
    greeted: AtomicU64,
    evicted_greeted: AtomicU64,
    bad_frames: AtomicU64,
    summary_lines: AtomicU64,
}

struct Shared {
    store: MemoryStore,
    stopping: AtomicBool,
    secret: Option<String>,
    max_connections: usize,
    /// Clones of live connections, so `shutdown` can close them and wake their readers.
    connections: Mutex<Vec<(u64, TcpStream)>>,
    /// Connections without a completed HELLO, oldest first (clones, for eviction).
    pending: Mutex<VecDeque<(u64, IpAddr, TcpStream)>>,
    /// Greeted connections by peer address, oldest first (for the fair share of a full server).
    greeted: Mutex<HashMap<IpAddr, VecDeque<u64>>>,
    counters: Counters,
    refusals: Mutex<Refusals>,
}

/// A running store server; stops when dropped.
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
    reporter: Option<thread::JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving, admitting any client
    /// that speaks the protocol.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, ServerOptions::default())
    }

    /// Like [`Self::bind`], with admission options (a secret).
    pub fn bind_with(addr: SocketAddr, options: ServerOptions) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store: MemoryStore::new(),
            stopping: AtomicBool::new(false),
            secret: options.secret.filter(|s| !s.is_empty()),
            max_connections: connection_limit(options.max_connections.max(1)),
            connections: Mutex::new(Vec::new()),
            pending: Mutex::new(VecDeque::new()),
            greeted: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            refusals: Mutex::new(Refusals::default()),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("distprof-kv-accept".into())
                .spawn(move || accept_loop(listener, shared))?
        };
        let reporter = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("distprof-kv-log".into())
                .spawn(move || report_loop(&shared))?
        };
        tracing::debug!(%local_addr, "key-value store serving");
        Ok(Self {
            local_addr,
            shared,
            acceptor: Some(acceptor),
            reporter: Some(reporter),
        })
    }

    /// What the store's defences have done so far.
    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            handshake_timeouts: get(&c.handshake_timeouts),
            evicted_pending: get(&c.evicted_pending),
            refused_busy: get(&c.refused_busy),
            refused_hello: get(&c.refused_hello),
            idle_closed: get(&c.idle_closed),
            greeted: get(&c.greeted),
            evicted_greeted: get(&c.evicted_greeted),
            bad_frames: get(&c.bad_frames),
            summary_lines: get(&c.summary_lines),
        }
    }
    /// The bound address (with the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The served map, for the process that hosts the server (it need not talk TCP to itself).
    pub fn store(&self) -> &MemoryStore {
        &self.shared.store
    }

    /// Number of greeted client connections open now (those without a HELLO are not
    /// clients). A master that failed keeps serving until this drops to zero (every node
    /// has read the abort and gone) or a grace period ends.
    pub fn connection_count(&self) -> usize {
        lock(&self.shared.greeted).values().map(VecDeque::len).sum()
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
        lock(&self.shared.pending).clear();
        if let Some(reporter) = self.reporter.take() {
            reporter.thread().unpark();
            let _ = reporter.join();
        }
        // What the last interval refused, so no count is lost.
        summarize(&self.shared, true);
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The connections the descriptor limit allows, up to `wanted`: the soft limit is raised
/// toward the hard one first. A server that ran out of descriptors could accept nobody, not
/// even a rank; one that stays under the limit reaches "full" and its fair share instead.
fn connection_limit(wanted: usize) -> usize {
    let needed = wanted as u64 * FDS_PER_CONNECTION + SPARE_FDS;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return wanted;
    }
    if (lim.rlim_cur as u64) < needed {
        let raised = libc::rlimit { rlim_cur: (needed as libc::rlim_t).min(lim.rlim_max), rlim_max: lim.rlim_max };
        // SAFETY: a valid rlimit within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let allowed = ((lim.rlim_cur as u64).saturating_sub(SPARE_FDS) / FDS_PER_CONNECTION).max(1) as usize;
    if allowed < wanted {
        tracing::warn!(
            "key-value store: the descriptor limit ({} open files) allows {allowed} connections, not {wanted}; raise `ulimit -n` to {needed} on the store's host for runs of more ranks",
            lim.rlim_cur
        );
    }
    allowed.min(wanted)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Closes the oldest connection without a HELLO (from `addr` when given) to make room.
fn evict_oldest_pending(shared: &Shared, pending: &mut VecDeque<(u64, IpAddr, TcpStream)>, addr: Option<IpAddr>) -> bool {
    let at = match addr {
        Some(ip) => pending.iter().position(|(_, a, _)| *a == ip),
        None => (!pending.is_empty()).then_some(0),
    };
    let Some(at) = at else { return false };
    if let Some((_, _, conn)) = pending.remove(at) {
        // Its thread's read fails at once and the thread ends.
        let _ = conn.shutdown(Shutdown::Both);
        shared.counters.evicted_pending.fetch_add(1, Ordering::Relaxed);
    }
    true
}

fn refuse_busy(shared: &Shared, conn: &TcpStream, peer: SocketAddr, reason: &'static str, why: String) {
    shared.counters.refused_busy.fetch_add(1, Ordering::Relaxed);
    note_refusal(shared, reason, peer, &why);
    let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = frame::write_response(&mut &*conn, &Response::Busy(why));
}

/// Counts one refusal (or eviction) of `peer` for the next summary line; logs that line now
/// when none was logged for a whole interval, so a lone misconfigured rank is seen at once.
fn note_refusal(shared: &Shared, reason: &'static str, peer: SocketAddr, message: &str) {
    lock(&shared.refusals).note(reason, peer, message);
    summarize(shared, false);
}

/// Logs the summary line of the refusals noted since the last one, when it is due (or `now`).
fn summarize(shared: &Shared, now: bool) {
    if let Some(line) = lock(&shared.refusals).take_summary(now) {
        tracing::warn!("{line}");
        shared.counters.summary_lines.fetch_add(1, Ordering::Relaxed);
    }
}

/// Logs the pending summary when its interval is over, until the server stops.
fn report_loop(shared: &Shared) {
    while !shared.stopping.load(Ordering::SeqCst) {
        thread::park_timeout(Duration::from_millis(500));
        summarize(shared, false);
    }
}

/// On a full server, makes room for a connection from `ip` by closing the oldest greeted
/// connection of the address that holds the most, when `ip` holds fewer than that less one
/// (so two equal addresses never trade places). Returns whether it made room.
fn evict_for_fair_share(shared: &Shared, conns: &mut Vec<(u64, TcpStream)>, ip: IpAddr) -> bool {
    let mut greeted = lock(&shared.greeted);
    let mine = greeted.get(&ip).map_or(0, VecDeque::len);
    let Some((&heaviest, held)) = greeted.iter().max_by_key(|(_, q)| q.len()) else { return false };
    let held_len = held.len();
    if mine + 1 >= held_len {
        return false;
    }
    let Some(id) = greeted.get_mut(&heaviest).and_then(VecDeque::pop_front) else { return false };
    if greeted.get(&heaviest).is_some_and(VecDeque::is_empty) {
        greeted.remove(&heaviest);
    }
    // Its thread's read fails at once and the thread ends; its slot is free now.
    if let Some(at) = conns.iter().position(|(i, _)| *i == id) {
        let (_, conn) = conns.swap_remove(at);
        let _ = conn.shutdown(Shutdown::Both);
    }
    shared.counters.evicted_greeted.fetch_add(1, Ordering::Relaxed);
    note_refusal(shared, "evicted for a lighter address", SocketAddr::new(heaviest, 0), &format!("server full; closed the oldest of the {} connections from {heaviest} for one from {ip}", held_len));
    true
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    let unknown: SocketAddr = ([0, 0, 0, 0], 0).into();
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                note_refusal(&shared, "accept failures", unknown, &format!("accept failed: {e}"));
                // Out of descriptors or similar: do not spin.
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(peer_addr) = conn.peer_addr() else { continue };
        let peer = peer_addr.to_string();
        let ip = peer_addr.ip();
        let _ = conn.set_nodelay(true);
        let id = next_id;
        next_id += 1;
        {
            let mut conns = lock(&shared.connections);
            let mut pending = lock(&shared.pending);
            if conns.len() >= shared.max_connections
                && !evict_oldest_pending(&shared, &mut pending, None)
                && !evict_for_fair_share(&shared, &mut conns, ip)
            {
                drop((conns, pending));
                let why = format!("server full ({} connections, {ip} holds its share)", shared.max_connections);
                refuse_busy(&shared, &conn, peer_addr, "busy (server full)", why);
                continue;
            }
            if pending.iter().filter(|(_, a, _)| *a == ip).count() >= MAX_PENDING_PER_ADDRESS {
                evict_oldest_pending(&shared, &mut pending, Some(ip));
            }
            if pending.len() >= MAX_PENDING {
                evict_oldest_pending(&shared, &mut pending, None);
            }
            let (Ok(clone), Ok(pending_clone)) = (conn.try_clone(), conn.try_clone()) else {
                drop((conns, pending));
                note_refusal(&shared, "untracked", peer_addr, "cannot clone the connection's socket");
                continue;
            };
            conns.push((id, clone));
            pending.push_back((id, ip, pending_clone));
        }
        let shared2 = shared.clone();
        let spawned = thread::Builder::new()
            .name("distprof-kv-conn".into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                serve_connection(conn, &peer, peer_addr, id, &shared2);
                forget(&shared2, id, ip);
            });
        if let Err(e) = spawned {
            note_refusal(&shared, "no thread", peer_addr, &format!("cannot start a connection thread: {e}"));
            forget(&shared, id, ip);
        }
    }
}

/// Drops every trace of connection `id`.
fn forget(shared: &Shared, id: u64, ip: IpAddr) {
    lock(&shared.connections).retain(|(i, _)| *i != id);
    lock(&shared.pending).retain(|(i, _, _)| *i != id);
    let mut greeted = lock(&shared.greeted);
    if let Some(q) = greeted.get_mut(&ip) {
        q.retain(|i| *i != id);
        if q.is_empty() {
            greeted.remove(&ip);
        }
    }
}

/// Reads from the socket until an absolute deadline: each read waits at most the time
/// left, so a peer sending one byte a second cannot stretch a frame past the deadline.
struct DeadlineReader<'a> {
    conn: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.read(buf)
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)
}

/// Constant-time comparison, so the time to refuse does not tell how much of a guess was right.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The HELLO: `Ok(())` when the peer is a client this server admits.
fn handshake(
    reader: &mut BufReader<DeadlineReader<'_>>,
    writer: &mut BufWriter<&TcpStream>,
    peer: SocketAddr,
    id: u64,
    shared: &Shared,
) -> Result<(), ()> {
    let counters = &shared.counters;
    let refuse = |writer: &mut BufWriter<&TcpStream>, reason: &'static str, why: String| {
        counters.refused_hello.fetch_add(1, Ordering::Relaxed);
        note_refusal(shared, reason, peer, &why);
        let _ = frame::write_response(writer, &Response::Error(why));
    };
    match frame::read_request_limited(reader, frame::MAX_HELLO_FRAME_BYTES) {
        Ok(Some(Request::Hello { version, secret })) => {
            if version != frame::VERSION {
                refuse(writer, "wrong version", format!("protocol version {version} unsupported; server speaks {}", frame::VERSION));
                return Err(());
            }
            if let Some(want) = &shared.secret {
                if !same_secret(want, &secret) {
                    refuse(writer, "wrong secret", "wrong store secret; give every rank the same DISTPROF_STORE_SECRET".into());
                    return Err(());
                }
            }
        }
        Ok(Some(_)) => {
            refuse(writer, "no hello", "request before handshake".into());
            return Err(());
        }
        Ok(None) => return Err(()),
        Err(FrameError::Io(e)) => {
            if timed_out(&e) {
                counters.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("key-value store: {peer} sent no HELLO within {HANDSHAKE_TIMEOUT:?}");
            }
            return Err(());
        }
        Err(FrameError::Malformed(m)) => {
            refuse(writer, "bad hello", format!("bad frame: {m}"));
            return Err(());
        }
    }
    lock(&shared.pending).retain(|(i, _, _)| *i != id);
    {
        let mut greeted = lock(&shared.greeted);
        let mine = greeted.entry(peer.ip()).or_default();
        if mine.len() >= MAX_GREETED_PER_ADDRESS {
            drop(greeted);
            let why = format!("{MAX_GREETED_PER_ADDRESS} connections from {} already", peer.ip());
            refuse_busy(shared, writer.get_ref(), peer, "busy (address full)", why);
            return Err(());
        }
        mine.push_back(id);
    }
    counters.greeted.fetch_add(1, Ordering::Relaxed);
    // A failed write shows on the next read; the caller's `forget` undoes the count.
    let _ = frame::write_response(writer, &Response::Ok);
    Ok(())
}

/// Serves one connection until it ends.
fn serve_connection(conn: TcpStream, peer: &str, peer_addr: SocketAddr, id: u64, shared: &Shared) {
    // A peer that never reads its replies must not hold this thread in a write forever.
    let _ = conn.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut reader = BufReader::new(DeadlineReader {
        conn: &conn,
        deadline: Instant::now() + HANDSHAKE_TIMEOUT,
    });
    let mut writer = BufWriter::new(&conn);
    if handshake(&mut reader, &mut writer, peer_addr, id, shared).is_err() {
        return;
    }
    loop {
        reader.get_mut().deadline = Instant::now() + IDLE_TIMEOUT;
        let req = match frame::read_request(&mut reader) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(FrameError::Io(e)) => {
                if timed_out(&e) {
                    shared.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("key-value store: closing {peer}: no request for {IDLE_TIMEOUT:?}");
                } else if !shared.stopping.load(Ordering::SeqCst) {
                    tracing::debug!("key-value store: connection from {peer} ended: {e}");
                }
                return;
            }
            Err(FrameError::Malformed(m)) => {
                shared.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                let why = format!("bad frame: {m}");
                note_refusal(shared, "bad frames", peer_addr, &why);
                let _ = frame::write_response(&mut writer, &Response::Error(why));
                return;
            }
        };
        let resp = match req {
            Request::Hello { .. } => Response::Ok,
            Request::Get { key, timeout_ms } => blocking_get(shared, &key, timeout_ms),
            Request::TryGet { key } => match shared.store.try_get(&key) {
                Ok(Some(v)) => Response::Value(v),
                Ok(None) => Response::NotFound,
                Err(e) => Response::Error(e.to_string()),
            },
            Request::Set { key, value } => match shared.store.set(&key, &value) {
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

#[cfg(test)]
mod tests;
