//! The rendezvous under attack and under lateness, for `distprof bench faults`: real
//! `distprof run --rendezvous-only` processes on the TCP store over loopback.
//!
//! - `store_flood`: rank 0 serves the store; this process holds thousands of connections
//!   to it that never say HELLO (reopening any the store closes) and runs a slow-loris
//!   client that trickles its HELLO a byte at a time; then the other ranks start. Goal:
//!   every rank agrees on one context within its rendezvous timeout.
//! - `late_rank`: every rank but rank 0 starts at once; rank 0, the store's host, starts
//!   `delay` later, under a timeout longer than the delay. Goal: it and every other rank
//!   agree. Rank 0 is the late one because it is the hard case: until it starts there is
//!   no store, and the others must keep retrying for their whole timeout.
//!
//! Each reports crashes (a rank ended by a signal), hangs (a rank still running past its
//! timeout plus a grace, then killed), failures (a rank that exited with an error) and
//! the time each rank took to agree.

use serde::Serialize;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A rank still running this long after its timeout is hung.
const HANG_GRACE: Duration = Duration::from_secs(10);
/// How often the flood looks for connections the store closed, to reopen them.
const FLOOD_RECHECK: Duration = Duration::from_millis(200);
/// The slow-loris client sends one byte of its HELLO this often.
const LORIS_BYTE_EVERY: Duration = Duration::from_millis(200);
/// Threads that open the flood's connections: one connect at a time each, so several keep
/// the store's accept queue full.
const FLOOD_THREADS: usize = 8;
/// Descriptors this process needs besides the flood's (pipes of the ranks, the binary).
const SPARE_FDS: u64 = 512;

/// Figures of one rendezvous scenario.
#[derive(Debug, Clone, Serialize)]
pub struct StoreScenario {
    pub name: &'static str,
    pub what: String,
    pub ranks: u32,
    pub rendezvous_timeout_ms: u64,
    pub crashes: u32,
    pub hangs: u32,
    /// Ranks that exited with an error (did not agree).
    pub failures: u32,
    /// Ranks that printed the agreed context, and how many distinct contexts they printed.
    pub agreed: u32,
    pub distinct_contexts: usize,
    /// From each rank's start to its agreement, ms: the slowest, and the median.
    pub time_to_agree_max_ms: Option<u64>,
    pub time_to_agree_p50_ms: Option<u64>,
    /// From the start of the last rank to start until every rank agreed, ms.
    pub all_agreed_after_last_start_ms: Option<u64>,
    /// The late rank's own time to agree, ms (`late_rank` only).
    pub late_rank_time_to_agree_ms: Option<u64>,
    /// Flood: connections the attacker held open when the ranks started (the store closes
    /// silent ones past its pending limit, so this stays near that limit however many are
    /// tried), connections opened in all (each one the store closed is reopened), and the
    /// slow-loris client's connections and bytes.
    pub flood_connections_held: Option<u64>,
    pub flood_connections_opened: Option<u64>,
    pub loris_connections: Option<u64>,
    pub loris_bytes_sent: Option<u64>,
    /// The first error line of each rank that failed (at most 3).
    pub errors: Vec<String>,
    pub wall_s: f64,
}

impl StoreScenario {
    /// The scenario's goal, as a violation message when missed.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.crashes + self.hangs + self.failures > 0 || self.agreed != self.ranks {
            v.push(format!(
                "{}: {} of {} ranks agreed ({} crashes, {} hangs, {} failures): {:?}",
                self.name, self.agreed, self.ranks, self.crashes, self.hangs, self.failures, self.errors
            ));
        }
        if self.distinct_contexts > 1 {
            v.push(format!("{}: ranks printed {} different contexts", self.name, self.distinct_contexts));
        }
        if self.time_to_agree_max_ms.is_some_and(|t| t > self.rendezvous_timeout_ms) {
            v.push(format!(
                "{}: a rank took {} ms to agree, over its timeout of {} ms",
                self.name,
                self.time_to_agree_max_ms.unwrap_or(0),
                self.rendezvous_timeout_ms
            ));
        }
        v
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

struct Rank {
    rank: u32,
    child: Child,
    started: Instant,
    /// When it exited (or was killed), and how.
    ended: Option<(Instant, Option<std::process::ExitStatus>)>,
}

fn spawn_rank(rank: u32, ranks: u32, port: u16, timeout_ms: u64) -> anyhow::Result<Rank> {
    let mut cmd = crate::self_command()?;
    cmd.args(["run", "--rank", &rank.to_string(), "--nodes", &ranks.to_string()])
        .args(["--rendezvous", &format!("127.0.0.1:{port}"), "--bind", "127.0.0.1", "--rendezvous-only"])
        .args(["--rendezvous-timeout-ms", &timeout_ms.to_string()])
        .env("XLA_DIST_PROF_LOG_FILTER", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The launcher's variables must not override the flags.
    for var in ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PJRT_COORDINATOR_ADDRESS", "PJRT_PROCESS_INDEX", "PJRT_NUM_PROCESSES"] {
        cmd.env_remove(var);
    }
    Ok(Rank { rank, child: cmd.spawn()?, started: Instant::now(), ended: None })
}

/// Waits for every rank (killing those past `limit` after their start) and judges them.
fn judge(name: &'static str, what: String, mut ranks: Vec<Rank>, timeout_ms: u64, late: Option<u32>, t0: Instant) -> StoreScenario {
    let limit = Duration::from_millis(timeout_ms) + HANG_GRACE;
    // Ranks write little, but drain anyway so that none blocks on a full pipe.
    while ranks.iter().any(|r| r.ended.is_none()) {
        for r in ranks.iter_mut().filter(|r| r.ended.is_none()) {
            match r.child.try_wait() {
                Ok(Some(status)) => r.ended = Some((Instant::now(), Some(status))),
                Ok(None) if r.started.elapsed() > limit => {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                    r.ended = Some((Instant::now(), None));
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (mut crashes, mut hangs, mut failures, mut agreed) = (0, 0, 0, 0);
    let mut contexts = BTreeSet::new();
    let mut took_ms = Vec::new();
    let mut late_ms = None;
    let mut errors = Vec::new();
    for r in &mut ranks {
        let (ended, status) = r.ended.expect("waited above");
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut s) = r.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(mut s) = r.child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        match status {
            None => hangs += 1,
            Some(s) if s.signal().is_some() => crashes += 1,
            Some(s) if !s.success() => {
                failures += 1;
                if errors.len() < 3 {
                    let line = err.lines().find(|l| l.contains("rror")).unwrap_or(err.lines().last().unwrap_or(""));
                    errors.push(format!("rank {}: {line}", r.rank));
                }
            }
            Some(_) => {
                // `node r/n: context DIGEST session ID`
                if let Some(ctx) = out.lines().next().and_then(|l| l.split_once(": context ")).map(|(_, c)| c.to_string()) {
                    agreed += 1;
                    contexts.insert(ctx);
                    let ms = (ended - r.started).as_millis() as u64;
                    took_ms.push(ms);
                    if Some(r.rank) == late {
                        late_ms = Some(ms);
                    }
                }
            }
        }
    }
    took_ms.sort_unstable();
    let last_start = ranks.iter().map(|r| r.started).max();
    let last_end = ranks.iter().filter_map(|r| r.ended.map(|e| e.0)).max();
    let all_agreed_after_last_start_ms = match (last_start, last_end) {
        (Some(s), Some(e)) if agreed == ranks.len() as u32 => Some((e - s).as_millis() as u64),
        _ => None,
    };
    StoreScenario {
        name,
        what,
        ranks: ranks.len() as u32,
        rendezvous_timeout_ms: timeout_ms,
        crashes,
        hangs,
        failures,
        agreed,
        distinct_contexts: contexts.len(),
        time_to_agree_max_ms: took_ms.last().copied(),
        time_to_agree_p50_ms: took_ms.get(took_ms.len() / 2).copied(),
        all_agreed_after_last_start_ms,
        late_rank_time_to_agree_ms: late_ms,
        flood_connections_held: None,
        flood_connections_opened: None,
        loris_connections: None,
        loris_bytes_sent: None,
        errors,
        wall_s: t0.elapsed().as_secs_f64(),
    }
}

/// Starts rank 0 on a free loopback port and waits until its store listens, as an attacker
/// would: returns the port, the store's address and the rank.
fn start_store_host(ranks: u32, timeout_ms: u64) -> anyhow::Result<(u16, SocketAddr, Rank)> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let rank0 = spawn_rank(0, ranks, port, timeout_ms)?;
    let listening = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
        if listening.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("rank 0's store did not listen on {addr} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((port, addr, rank0))
}

/// Raises the soft descriptor limit to what `needed` requires (up to the hard limit).
fn raise_fd_limit(needed: u64) -> anyhow::Result<()> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        anyhow::bail!("getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error());
    }
    if lim.rlim_cur as u64 >= needed {
        return Ok(());
    }
    if (lim.rlim_max as u64) < needed {
        anyhow::bail!(
            "the flood needs {needed} file descriptors but the hard limit is {}; lower --store-flood-connections or raise `ulimit -Hn`",
            lim.rlim_max
        );
    }
    lim.rlim_cur = needed as libc::rlim_t;
    // SAFETY: a valid rlimit within the hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        anyhow::bail!("setrlimit(RLIMIT_NOFILE, {needed}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Holds `target` idle connections to `addr` until `stop`, reopening those the store
/// closes. Returns (connections held at the moment `held` is read, opened in all).
fn flood(addr: SocketAddr, target: usize, stop: Arc<AtomicBool>, held: Arc<AtomicU64>, opened: Arc<AtomicU64>) {
    let mut conns: Vec<TcpStream> = Vec::with_capacity(target);
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        // Drop the connections the store closed (a read of 0 or an error; WouldBlock is alive).
        conns.retain(|c| matches!((&*c).read(&mut buf), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock));
        while conns.len() < target && !stop.load(Ordering::Relaxed) {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(c) => {
                    let _ = c.set_nonblocking(true);
                    conns.push(c);
                    opened.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => break,
            }
        }
        held.store(conns.len() as u64, Ordering::Relaxed);
        std::thread::sleep(FLOOD_RECHECK);
    }
}

/// Connects and trickles a HELLO one byte at a time, reconnecting whenever the store
/// closes the connection, until `stop`.
fn slow_loris(addr: SocketAddr, stop: Arc<AtomicBool>, connections: Arc<AtomicU64>, bytes: Arc<AtomicU64>) {
    // A HELLO frame whose length promises more than the loris will ever finish sending.
    let mut hello = vec![0u8; 4];
    hello[..4].copy_from_slice(&200u32.to_le_bytes());
    hello.push(0x01);
    hello.extend_from_slice(b"DPKV");
    hello.resize(4 + 200, b's');
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            std::thread::sleep(LORIS_BYTE_EVERY);
            continue;
        };
        connections.fetch_add(1, Ordering::Relaxed);
        for byte in &hello {
            if stop.load(Ordering::Relaxed) || c.write_all(&[*byte]).is_err() {
                break;
            }
            bytes.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(LORIS_BYTE_EVERY);
        }
    }
}

/// `store_flood`: `connections` idle connections and a slow loris against rank 0's store
/// while `ranks` ranks rendezvous under `timeout_ms`.
pub fn store_flood(ranks: u32, connections: usize, timeout_ms: u64) -> anyhow::Result<StoreScenario> {
    raise_fd_limit(connections as u64 + SPARE_FDS + 4 * ranks as u64)?;
    let t0 = Instant::now();
    let (port, addr, rank0) = start_store_host(ranks, timeout_ms)?;
    let mut procs = vec![rank0];
    let stop = Arc::new(AtomicBool::new(false));
    let (opened, loris_conns, loris_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let per_thread_held: Vec<Arc<AtomicU64>> = (0..FLOOD_THREADS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let flooders: Vec<_> = per_thread_held
        .iter()
        .enumerate()
        .map(|(i, held)| {
            let (stop, held, opened) = (stop.clone(), held.clone(), opened.clone());
            let share = connections / FLOOD_THREADS + usize::from(i < connections % FLOOD_THREADS);
            std::thread::spawn(move || flood(addr, share, stop, held, opened))
        })
        .collect();
    let loris = {
        let (stop, c, b) = (stop.clone(), loris_conns.clone(), loris_bytes.clone());
        std::thread::spawn(move || slow_loris(addr, stop, c, b))
    };
    // Let the flood reach its size (the store keeps closing the silent ones, so "reached"
    // means opened at least `connections`), bounded in time.
    let filling = Instant::now();
    while opened.load(Ordering::Relaxed) < connections as u64 && filling.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held_at_start: u64 = per_thread_held.iter().map(|h| h.load(Ordering::Relaxed)).sum();
    for rank in 1..ranks {
        procs.push(spawn_rank(rank, ranks, port, timeout_ms)?);
    }
    let what = format!(
        "{connections} idle connections (reopened when closed) and a slow-loris client against the store while {ranks} ranks rendezvous"
    );
    let mut result = judge("store_flood", what, procs, timeout_ms, None, t0);
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = f.join();
    }
    let _ = loris.join();
    result.flood_connections_held = Some(held_at_start);
    result.flood_connections_opened = Some(opened.load(Ordering::Relaxed));
    result.loris_connections = Some(loris_conns.load(Ordering::Relaxed));
    result.loris_bytes_sent = Some(loris_bytes.load(Ordering::Relaxed));
    result.wall_s = t0.elapsed().as_secs_f64();
    Ok(result)
}

/// `late_rank`: ranks 1.. start at once, rank 0 (the store's host) `delay` later.
pub fn late_rank(ranks: u32, delay: Duration, timeout_ms: u64) -> anyhow::Result<StoreScenario> {
    let t0 = Instant::now();
    let port = free_port()?;
    let mut procs = (1..ranks).map(|r| spawn_rank(r, ranks, port, timeout_ms)).collect::<anyhow::Result<Vec<_>>>()?;
    std::thread::sleep(delay);
    procs.push(spawn_rank(0, ranks, port, timeout_ms)?);
    let what = format!("rank 0 (the store's host) starts {} s after the other {} ranks", delay.as_secs_f64(), ranks - 1);
    Ok(judge("late_rank", what, procs, timeout_ms, Some(0), t0))
}

/// Loopback addresses of the greeted flood: 127.0.0.10 and up (any of 127.0.0.0/8 is this
/// host), apart from the ranks' 127.0.0.1.
const GREETED_FLOOD_FIRST_ADDRESS: u8 = 10;
/// The ranks of `store_greeted_flood` must agree within this of the unflooded run
/// (the figure of issue 28).
pub const GREETED_FLOOD_MAX_SLOWDOWN_MS: u64 = 2_000;
/// Rank 0's log during the greeted flood: at most this many lines per second.
pub const GREETED_FLOOD_MAX_LOG_LINES_PER_S: f64 = 1.0;

/// What `store_greeted_flood` measured besides the rank outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct GreetedFlood {
    pub connections: usize,
    pub addresses: u8,
    /// The same ranks without a flood: from the last rank's start until all agreed, ms.
    pub unflooded_all_agreed_ms: Option<u64>,
    pub flooded_all_agreed_ms: Option<u64>,
    /// Greeted flood connections open when the ranks started (the store holds at most its
    /// connection limit), opened in all, and refused with BUSY.
    pub held_at_start: u64,
    pub opened: u64,
    pub refused_busy: u64,
    /// Greeted connections the store closed for one from a lighter address (its summary lines'
    /// "evicted for a lighter address", summed).
    pub store_evicted_for_lighter: u64,
    /// The store's last summary line, as logged.
    pub rank0_last_log_line: Option<String>,
    /// Rank 0's (the store's) stderr: lines, over its lifetime, and the refusals its last
    /// summary line counted since start.
    pub rank0_log_lines: u64,
    pub rank0_lifetime_s: f64,
    pub rank0_log_lines_per_s: f64,
    pub store_refusals_logged: Option<u64>,
    pub scenario: StoreScenario,
}

impl GreetedFlood {
    pub fn violations(&self) -> Vec<String> {
        let mut v = self.scenario.violations();
        match (self.unflooded_all_agreed_ms, self.flooded_all_agreed_ms) {
            (Some(clean), Some(flooded)) if flooded > clean + GREETED_FLOOD_MAX_SLOWDOWN_MS => v.push(format!(
                "store_greeted_flood: the ranks agreed {flooded} ms after the last start, over the unflooded {clean} ms + {GREETED_FLOOD_MAX_SLOWDOWN_MS} ms"
            )),
            (Some(_), Some(_)) => {}
            _ => v.push("store_greeted_flood: the flooded or the unflooded ranks did not all agree".into()),
        }
        if self.rank0_log_lines_per_s > GREETED_FLOOD_MAX_LOG_LINES_PER_S {
            v.push(format!(
                "store_greeted_flood: rank 0 logged {} lines in {:.1} s ({:.2}/s, limit {GREETED_FLOOD_MAX_LOG_LINES_PER_S}/s)",
                self.rank0_log_lines, self.rank0_lifetime_s, self.rank0_log_lines_per_s
            ));
        }
        v
    }
}

/// Counters of the greeted flood's threads.
#[derive(Default)]
struct FloodCounts {
    held: AtomicU64,
    opened: AtomicU64,
    busy: AtomicU64,
}

/// One flood connection from `from`: connects, says the public HELLO (no secret) and
/// returns the connection when the store admitted it.
fn greet(addr: SocketAddr, from: [u8; 4], counts: &FloodCounts) -> Option<TcpStream> {
    use distprof::kv::tcp::frame::{self, Request, Response};
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    sock.bind(&SocketAddr::from((from, 0)).into()).ok()?;
    sock.connect_timeout(&addr.into(), Duration::from_millis(500)).ok()?;
    let mut c: TcpStream = sock.into();
    counts.opened.fetch_add(1, Ordering::Relaxed);
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    frame::write_request(&mut c, &Request::Hello { version: frame::VERSION, secret: String::new() }).ok()?;
    match frame::read_response(&mut c) {
        Ok(Response::Ok) => {
            c.set_nonblocking(true).ok()?;
            Some(c)
        }
        Ok(Response::Busy(_)) => {
            counts.busy.fetch_add(1, Ordering::Relaxed);
            None
        }
        _ => None,
    }
}

/// Holds `target` greeted connections from the addresses `first..first + addresses` (in
/// turn) until `stop`, reopening those the store closes; a refusal ends the round (the
/// next starts after [`FLOOD_RECHECK`]), so a full store is asked a few times per second.
fn greeted_flood(addr: SocketAddr, target: usize, first: usize, addresses: u8, stop: Arc<AtomicBool>, counts: Arc<FloodCounts>) {
    let mut conns: Vec<TcpStream> = Vec::with_capacity(target);
    let mut buf = [0u8; 64];
    let mut next = first;
    while !stop.load(Ordering::Relaxed) {
        let before = conns.len();
        conns.retain(|c| matches!((&*c).read(&mut buf), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock));
        while conns.len() < target && !stop.load(Ordering::Relaxed) {
            let from = [127, 0, 0, GREETED_FLOOD_FIRST_ADDRESS + (next % addresses as usize) as u8];
            next += 1;
            match greet(addr, from, &counts) {
                Some(c) => {
                    conns.push(c);
                    counts.held.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        counts.held.fetch_sub((before.max(conns.len()) - conns.len()) as u64, Ordering::Relaxed);
        std::thread::sleep(FLOOD_RECHECK);
    }
    counts.held.fetch_sub(conns.len() as u64, Ordering::Relaxed);
}

/// Rank 0 and the other ranks started after `flood` (if any) filled; returns the judged
/// scenario and rank 0's stderr lines, its lifetime and the refusals its last line counted.
fn ranks_under(ranks: u32, timeout_ms: u64, flood: Option<(usize, u8, &Arc<FloodCounts>)>) -> anyhow::Result<(StoreScenario, String, f64, u64)> {
    let t0 = Instant::now();
    let (port, addr, rank0) = start_store_host(ranks, timeout_ms)?;
    let mut procs = vec![rank0];
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut held_at_start = 0;
    if let Some((connections, addresses, counts)) = flood {
        threads = (0..FLOOD_THREADS)
            .map(|i| {
                let (stop, counts) = (stop.clone(), counts.clone());
                let share = connections / FLOOD_THREADS + usize::from(i < connections % FLOOD_THREADS);
                std::thread::spawn(move || greeted_flood(addr, share, i, addresses, stop, counts))
            })
            .collect();
        // Until the flood has tried every connection (the store refuses those past its
        // limit) and held the store full for a moment, bounded in time.
        let filling = Instant::now();
        while counts.opened.load(Ordering::Relaxed) < connections as u64 && filling.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(1));
        held_at_start = counts.held.load(Ordering::Relaxed);
    }
    for rank in 1..ranks {
        procs.push(spawn_rank(rank, ranks, port, timeout_ms)?);
    }
    let what = match flood {
        Some((c, a, _)) => format!("{c} connections that say the public HELLO, from {a} loopback addresses, while {ranks} ranks rendezvous"),
        None => format!("{ranks} ranks rendezvous without a flood (the baseline of store_greeted_flood)"),
    };
    let rank0_started = procs[0].started;
    let mut stderr0 = procs[0].child.stderr.take();
    // Rank 0 may log a lot in the failure this scenario guards against: read its stderr
    // on a thread so that it never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr0.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        (text, Instant::now())
    });
    let result = judge("store_greeted_flood", what, procs, timeout_ms, None, t0);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let (text, eof) = reader.join().map_err(|_| anyhow::anyhow!("rank 0's stderr reader panicked"))?;
    Ok((result, text, (eof - rank0_started).as_secs_f64(), held_at_start))
}

/// The number just before `marker` in `line` ("… 1234 since start").
fn number_before(line: &str, marker: &str) -> Option<u64> {
    let (head, _) = line.split_once(marker)?;
    head.rsplit([' ', '(']).next()?.parse().ok()
}

/// `store_greeted_flood`: `ranks` ranks rendezvous unflooded, then again while this process
/// holds `connections` greeted connections (the public HELLO) from `addresses` loopback
/// addresses against rank 0's store. Goal: the flooded ranks agree within
/// [`GREETED_FLOOD_MAX_SLOWDOWN_MS`] of the unflooded, and rank 0 logs at most
/// [`GREETED_FLOOD_MAX_LOG_LINES_PER_S`] lines a second.
pub fn store_greeted_flood(ranks: u32, connections: usize, addresses: u8, timeout_ms: u64) -> anyhow::Result<GreetedFlood> {
    if !(1..=200).contains(&addresses) {
        anyhow::bail!("--store-greeted-flood-addresses {addresses}: use 1 to 200 (127.0.0.10 and up)");
    }
    raise_fd_limit(connections as u64 + SPARE_FDS + 4 * ranks as u64)?;
    let t0 = Instant::now();
    let (clean, ..) = ranks_under(ranks, timeout_ms, None)?;
    let counts = Arc::new(FloodCounts::default());
    let (mut flooded, log, lifetime_s, held) = ranks_under(ranks, timeout_ms, Some((connections, addresses, &counts)))?;
    let lines = log.lines().count() as u64;
    let summaries: Vec<&str> = log.lines().filter(|l| l.contains("key-value store: refused or closed")).collect();
    let refusals = summaries.last().and_then(|l| number_before(l, " since start"));
    let evicted = summaries.iter().filter_map(|l| number_before(l, " evicted for a lighter address")).sum();
    flooded.flood_connections_held = Some(held);
    flooded.flood_connections_opened = Some(counts.opened.load(Ordering::Relaxed));
    flooded.wall_s = t0.elapsed().as_secs_f64();
    Ok(GreetedFlood {
        connections,
        addresses,
        unflooded_all_agreed_ms: clean.all_agreed_after_last_start_ms,
        flooded_all_agreed_ms: flooded.all_agreed_after_last_start_ms,
        held_at_start: held,
        opened: counts.opened.load(Ordering::Relaxed),
        refused_busy: counts.busy.load(Ordering::Relaxed),
        store_evicted_for_lighter: evicted,
        rank0_last_log_line: summaries.last().map(|l| l.to_string()),
        rank0_log_lines: lines,
        rank0_lifetime_s: lifetime_s,
        rank0_log_lines_per_s: if lifetime_s > 0.0 { lines as f64 / lifetime_s } else { lines as f64 },
        store_refusals_logged: refusals,
        scenario: flooded,
    })
}
