//! The TCP store's client: one connection, re-established on failure, every call bounded.
//!
//! Nodes usually start before rank 0's server is listening, so connecting is retried with
//! backoff until the call's deadline (as torchrun's TCPStore clients do). A dropped
//! connection is re-established and the (idempotent) request repeated. A peer that
//! answers with bytes that are not our protocol is an immediate `Malformed` error naming
//! the peer and the key: retrying would not help. A server that is busy (full, or flooded
//! by connections that never say HELLO) is retried until the call's deadline too.

use super::frame::{self, FrameError, Request, Response};
use crate::kv::{check_value_size, KvError, KvStore};
use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Added to a GET's own timeout for the reply to travel back before the client gives up
/// on the connection.
const REPLY_SLACK: Duration = Duration::from_secs(2);
/// While a call keeps failing to reach the store, it logs where it stands this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// First and largest pause between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Time limits of a [`TcpStore`] client.
#[derive(Debug, Clone, Copy)]
pub struct TcpStoreOptions {
    /// Bound on `set` and `try_get`, including reconnecting. A `get` is bounded by its own
    /// timeout instead (plus [`REPLY_SLACK`]).
    pub op_timeout: Duration,
    /// Bound on one TCP connect attempt.
    pub connect_timeout: Duration,
    /// Once the client has reached the server, how long it keeps trying to get back after
    /// losing it. Short: in a standalone run the server is rank 0, and a server that went
    /// away usually means rank 0 died; waiting for the whole op timeout would only delay
    /// the error. Before the first connection the full timeouts apply, because nodes
    /// commonly start before rank 0.
    pub reconnect_timeout: Duration,
}

impl Default for TcpStoreOptions {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            reconnect_timeout: Duration::from_secs(2),
        }
    }
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

/// A client of a [`super::TcpStoreServer`]. Thread-safe; calls are serialized over one
/// connection.
pub struct TcpStore {
    addr: SocketAddr,
    options: TcpStoreOptions,
    /// Sent in the HELLO; empty when the cluster sets none.
    secret: String,
    conn: Mutex<Option<Conn>>,
    /// Set once the first handshake succeeded.
    ever_connected: AtomicBool,
}

enum Attempt {
    Done(Result<Response, KvError>),
    /// The connection failed; try again if time remains.
    Retry(String),
}

impl TcpStore {
    /// Creates a client; the connection is made lazily by the first call, so a client can
    /// be created before the server is up.
    pub fn new(addr: SocketAddr, options: TcpStoreOptions) -> Self {
        Self::with_secret(addr, options, String::new())
    }

    /// Like [`Self::new`] for a server that requires `secret` in the HELLO.
    pub fn with_secret(addr: SocketAddr, options: TcpStoreOptions, secret: String) -> Self {
        Self {
            addr,
            options,
            secret,
            conn: Mutex::new(None),
            ever_connected: AtomicBool::new(false),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn connect(&self, key: &str, deadline: Instant) -> Result<Conn, Attempt> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = self
            .options
            .connect_timeout
            .min(remaining)
            .max(Duration::from_millis(1));
        let stream = TcpStream::connect_timeout(&self.addr, timeout)
            .map_err(|e| Attempt::Retry(format!("connect: {e}")))?;
        refuse_self_connection(&stream).map_err(Attempt::Retry)?;
        let _ = stream.set_nodelay(true);
        let read_half = stream
            .try_clone()
            .map_err(|e| Attempt::Retry(format!("clone socket: {e}")))?;
        let mut conn = Conn {
            reader: BufReader::new(read_half),
            writer: BufWriter::new(stream),
        };
        match self.exchange(
            &mut conn,
            key,
            &Request::Hello {
                version: frame::VERSION,
                secret: self.secret.clone(),
            },
            deadline,
        ) {
            Attempt::Done(Ok(Response::Ok)) => Ok(conn),
            Attempt::Done(Ok(Response::Busy(m))) => Err(Attempt::Retry(format!("store busy: {m}"))),
            Attempt::Done(Ok(Response::Error(m))) => Err(Attempt::Done(Err(KvError::Unavailable(
                format!("store at {} refused the handshake: {m}", self.addr),
            )))),
            Attempt::Done(Ok(other)) => Err(Attempt::Done(Err(
                self.malformed(key, format!("handshake answered with {other:?}"))
            ))),
            other => Err(other),
        }
    }

    fn malformed(&self, key: &str, reason: String) -> KvError {
        KvError::Malformed {
            key: key.to_string(),
            reason: format!("store at {} sent a bad reply: {reason}", self.addr),
        }
    }

    fn exchange(&self, conn: &mut Conn, key: &str, req: &Request, deadline: Instant) -> Attempt {
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let stream = conn.writer.get_ref();
        if let Err(e) = stream
            .set_write_timeout(Some(remaining))
            .and_then(|_| stream.set_read_timeout(Some(remaining)))
        {
            return Attempt::Retry(format!("socket options: {e}"));
        }
        if let Err(e) = frame::write_request(&mut conn.writer, req) {
            return Attempt::Retry(format!("send: {e}"));
        }
        match frame::read_response(&mut conn.reader) {
            Ok(resp) => Attempt::Done(Ok(resp)),
            Err(FrameError::Io(e)) => Attempt::Retry(format!("receive: {e}")),
            Err(FrameError::Malformed(m)) => Attempt::Done(Err(self.malformed(key, m))),
        }
    }

    /// Sends `make_req(remaining)` until it gets a reply or `deadline` passes.
    fn call(
        &self,
        key: &str,
        deadline: Instant,
        make_req: impl Fn(Instant) -> Request,
    ) -> Result<Response, KvError> {
        let started = Instant::now();
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut backoff = BACKOFF_MIN;
        let mut last_error = String::new();
        let mut attempts = 0u32;
        // Tightened at the first failure once the server has been reached before.
        let mut deadline = deadline;
        let mut lost = false;
        let mut next_progress = started + PROGRESS_EVERY;
        loop {
            if Instant::now() >= next_progress {
                next_progress += PROGRESS_EVERY;
                tracing::info!(
                    "key-value store at {} not reached for {} s ({attempts} attempts, last: {last_error}); \
                     retrying for {} s more",
                    self.addr,
                    started.elapsed().as_secs(),
                    deadline.saturating_duration_since(Instant::now()).as_secs()
                );
            }
            if attempts > 0 && !lost && self.ever_connected.load(Ordering::Relaxed) {
                lost = true;
                deadline = deadline.min(Instant::now() + self.options.reconnect_timeout);
            }
            if Instant::now() >= deadline && attempts > 0 {
                return Err(KvError::Unavailable(format!(
                    "store at {} unreachable for {} ms ({attempts} attempts) while accessing key `{key}`: {last_error}; \
                     rank 0 serves the store: check that it runs and that the rendezvous address is right",
                    self.addr,
                    started.elapsed().as_millis()
                )));
            }
            attempts += 1;
            if guard.is_none() {
                match self.connect(key, deadline) {
                    Ok(c) => {
                        self.ever_connected.store(true, Ordering::Relaxed);
                        *guard = Some(c)
                    }
                    Err(Attempt::Done(result)) => return result,
                    Err(Attempt::Retry(e)) => {
                        last_error = e;
                        sleep_until_or(deadline, &mut backoff);
                        continue;
                    }
                }
            }
            let conn = guard.as_mut().expect("connected above");
            match self.exchange(conn, key, &make_req(deadline), deadline) {
                Attempt::Done(result) => {
                    if result.is_err() {
                        // The stream is in an unknown state after a bad reply.
                        *guard = None;
                    }
                    return result;
                }
                Attempt::Retry(e) => {
                    tracing::debug!("key-value store at {}: {e}; reconnecting", self.addr);
                    last_error = e;
                    *guard = None;
                    sleep_until_or(deadline, &mut backoff);
                }
            }
        }
    }
}

fn sleep_until_or(deadline: Instant, backoff: &mut Duration) {
    let remaining = deadline.saturating_duration_since(Instant::now());
    std::thread::sleep((*backoff).min(remaining));
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
}

impl KvStore for TcpStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let get_deadline = Instant::now() + timeout;
        let timeout_err = || KvError::Timeout {
            key: key.to_string(),
            timeout_ms: timeout.as_millis() as u64,
        };
        let resp = self.call(key, get_deadline + REPLY_SLACK, |_| Request::Get {
            key: key.to_string(),
            timeout_ms: get_deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
        });
        match resp {
            Ok(Response::Value(v)) => Ok(v),
            Ok(Response::Timeout) => Err(timeout_err()),
            Ok(Response::Error(m)) => Err(KvError::Unavailable(format!(
                "store at {} failed GET `{key}`: {m}",
                self.addr
            ))),
            Ok(other) => Err(self.malformed(key, format!("GET answered with {other:?}"))),
            Err(e) => Err(e),
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        let deadline = Instant::now() + self.options.op_timeout;
        match self.call(key, deadline, |_| Request::TryGet {
            key: key.to_string(),
        })? {
            Response::Value(v) => Ok(Some(v)),
            Response::NotFound => Ok(None),
            Response::Error(m) => Err(KvError::Unavailable(format!(
                "store at {} failed TRY_GET `{key}`: {m}",
                self.addr
            ))),
            other => Err(self.malformed(key, format!("TRY_GET answered with {other:?}"))),
        }
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        check_value_size(key, value.len())?;
        let deadline = Instant::now() + self.options.op_timeout;
        match self.call(key, deadline, |_| Request::Set {
            key: key.to_string(),
            value: value.to_string(),
        })? {
            Response::Ok => Ok(()),
            Response::Error(m) => Err(KvError::Unavailable(format!(
                "store at {} failed SET `{key}`: {m}",
                self.addr
            ))),
            other => Err(self.malformed(key, format!("SET answered with {other:?}"))),
        }
    }
}

/// A connect to a local port nobody listens on yet can succeed against itself: Linux
/// may pick the target port as the ephemeral one, and the TCP simultaneous open then
/// connects the socket to itself. The client would read its own requests back, and the
/// port would stay taken, so rank 0 could no longer serve the store there. Such a
/// connection is dropped and the connect retried like a refused one.
pub(super) fn refuse_self_connection(stream: &TcpStream) -> Result<(), String> {
    match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(peer)) if local == peer => {
            Err(format!("connected to itself at {peer}: nothing listens there yet"))
        }
        _ => Ok(()),
    }
}
