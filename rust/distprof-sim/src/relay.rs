//! A user-space UDP relay that plays the network: per-direction delay distribution,
//! asymmetry, jitter, loss, reordering, duplication, delay spikes, and blackholed nodes
//! (this kernel has no netem). It also keeps a few genuine datagrams per node, which the
//! fault injector (`inject`) replays at the node.
//!
//! Routing: the relay holds one socket, a *face*, per node. Peers of node j are told that
//! j lives at j's face (`route_through` rewrites the run context each node gets). A
//! datagram arriving at j's face from node i's real address is delayed by the model of
//! path i -> j and then sent to j's real address *from i's face*, so that j sees it come
//! from where it would send its answer. Datagrams from unknown addresses are dropped and
//! counted.

mod lateness;
mod spin_margin;

pub use lateness::Lateness;
use spin_margin::SpinMargin;

use distprof::clock::realtime_ns;
use distprof::config::TimestampMode;
use distprof::context::{NodeId, RunContext};
use distprof::timestamp::StampedSocket;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Before a due datagram the relay watches only the clock for this long (see
/// `relay_loop`): longer than one pass of receiving takes, so that pass cannot make the
/// send late.
const FINAL_APPROACH_NS: i64 = 4_000;
/// Longest the relay thread sleeps at a time, even with nothing queued. In a virtual
/// machine a vCPU idle for longer is taken off the host's CPU and wakes 50-150 µs late
/// (timed wake-ups of the jitter run: p50 50-60 µs with 20 ms sleeps); waking this often
/// keeps them at ~5 µs (p90 7 µs) for ~10,000 wake-ups a second, about 4 % of a core.
const MAX_SLEEP_NS: i64 = 100_000;
/// How often the relay thread copies its counters out for `Relay::stats`.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);
/// Queued datagrams beyond which new ones are dropped (a bounded memory, like a router).
const MAX_QUEUED: usize = 100_000;

/// What one direction of a path does to datagrams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathModel {
    /// Fixed one-way delay.
    pub delay_us: f64,
    /// Mean of an exponentially distributed extra delay (queueing).
    pub jitter_us: f64,
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by `reorder_us` extra, so later ones pass it.
    pub reorder: f64,
    pub reorder_us: f64,
    /// Probability a datagram is delayed by `spike_us` extra (a congestion spike).
    pub spike: f64,
    pub spike_us: f64,
}

impl PathModel {
    /// A clean path: fixed delay only.
    pub const fn fixed(delay_us: f64) -> PathModel {
        PathModel {
            delay_us,
            jitter_us: 0.0,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_us: 0.0,
            spike: 0.0,
            spike_us: 0.0,
        }
    }

    fn check(&self) -> Result<(), String> {
        for (name, p) in [("loss", self.loss), ("duplicate", self.duplicate), ("reorder", self.reorder), ("spike", self.spike)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("relay path {name} = {p}; use a probability between 0 and 1"));
            }
        }
        for (name, v) in [
            ("delay_us", self.delay_us),
            ("jitter_us", self.jitter_us),
            ("reorder_us", self.reorder_us),
            ("spike_us", self.spike_us),
        ] {
            if !(v.is_finite() && (0.0..=10_000_000.0).contains(&v)) {
                return Err(format!("relay path {name} = {v}; use 0 to 10 s in microseconds"));
            }
        }
        Ok(())
    }
}

/// The whole network.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub seed: u64,
    pub default_path: PathModel,
    /// Overrides per direction (from, to), e.g. for asymmetry.
    pub paths: HashMap<(NodeId, NodeId), PathModel>,
    /// Nodes cut off for a time span: every datagram from or to them is dropped.
    pub blackholes: Vec<Blackhole>,
}

/// Node `node` is unreachable (a pulled cable, a hung switch port) from `from_real_ns`
/// until `until_real_ns` (CLOCK_REALTIME), and reachable again afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blackhole {
    pub node: NodeId,
    pub from_real_ns: i64,
    pub until_real_ns: i64,
}

impl Blackhole {
    fn hits(&self, from: usize, to: usize, now_real_ns: i64) -> bool {
        (self.node as usize == from || self.node as usize == to)
            && (self.from_real_ns..self.until_real_ns).contains(&now_real_ns)
    }
}

/// Genuine datagrams kept per destination node, for replay.
pub const CAPTURE_PER_NODE: usize = 64;

impl RelayConfig {
    pub fn clean(delay_us: f64) -> RelayConfig {
        RelayConfig { seed: 1, default_path: PathModel::fixed(delay_us), paths: HashMap::new(), blackholes: Vec::new() }
    }
    pub fn path(&self, from: NodeId, to: NodeId) -> PathModel {
        self.paths.get(&(from, to)).copied().unwrap_or(self.default_path)
    }
}

/// One node as the relay sees it.
pub struct RelayEndpoint {
    pub node: NodeId,
    /// The relay's socket standing for `node`.
    pub face: UdpSocket,
    /// The node's real probe socket address.
    pub node_addr: SocketAddr,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    pub received: u64,
    pub forwarded: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub unknown_source: u64,
    pub overflow: u64,
    pub bytes_forwarded: u64,
    /// Datagrams given a delay spike.
    pub spiked: u64,
    /// Datagrams dropped because their sender or receiver was blackholed.
    pub blackholed: u64,
    /// Largest number of datagrams queued at once (bounded by `MAX_QUEUED`).
    pub peak_queued: u64,
    /// Datagrams that took a per-direction override of the default path (`paths`).
    pub override_path: u64,
    /// How long each datagram waited in the kernel before the relay read it (a datagram
    /// due sooner than this is sent late).
    pub pickup_lateness: Lateness,
    /// The part of `pickup_lateness` read by a pass that did not wait (the thread was
    /// already awake and polling): lateness here is not the relay's wake-up but the
    /// kernel's path from the arrival stamp to the socket, the relay's own work between
    /// passes (sends, reads on other faces), or the vCPU not running.
    pub pickup_while_awake: Lateness,
    /// How late each datagram's send started against its due time.
    pub send_lateness: Lateness,
    /// How late each datagram reached the loopback driver (kernel transmit stamp)
    /// against its due time: the send's lateness plus the system call's path.
    pub wire_lateness: Lateness,
    /// How late the thread woke from a timed sleep against the time it asked for.
    pub wake_lateness: Lateness,
    /// Time spent awake instead of sleeping: before due datagrams and after arrivals.
    pub spin_ns: u64,
    /// The last margin before a due datagram at which the relay stopped sleeping.
    pub spin_margin_ns: u64,
    /// CPU time of the relay thread.
    pub cpu_ns: u64,
}

/// A running relay; stops (and joins its thread) on `stop` or drop.
pub struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Mutex<RelayStats>>,
    captured: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    faces: Vec<SocketAddr>,
}

struct Queued {
    /// CLOCK_REALTIME, the clock of the kernel's arrival stamps.
    due_ns: i64,
    order: u64,
    from: usize,
    to: usize,
    data: Vec<u8>,
}
impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.due_ns, self.order) == (o.due_ns, o.order)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due_ns, self.order).cmp(&(o.due_ns, o.order))
    }
}

impl Relay {
    /// Starts the relay thread. `endpoints[k].node` must be k.
    pub fn start(endpoints: Vec<RelayEndpoint>, config: RelayConfig) -> Result<Relay, String> {
        config.default_path.check()?;
        for p in config.paths.values() {
            p.check()?;
        }
        for (k, e) in endpoints.iter().enumerate() {
            if e.node as usize != k {
                return Err(format!("relay endpoint {k} is node {}; list the nodes in order", e.node));
            }
            e.face.set_nonblocking(true).map_err(|e| format!("relay face: {e}"))?;
        }
        let faces = endpoints
            .iter()
            .map(|e| e.face.local_addr())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("relay face address: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(RelayStats::default()));
        let captured = Arc::new(Mutex::new(vec![Vec::new(); endpoints.len()]));
        let (s, st, cap) = (stop.clone(), stats.clone(), captured.clone());
        let thread = std::thread::Builder::new()
            .name("distprof-relay".into())
            .spawn(move || relay_loop(endpoints, config, &s, &st, &cap))
            .map_err(|e| format!("cannot start relay thread: {e}"))?;
        Ok(Relay { stop, thread: Some(thread), stats, captured, faces })
    }

    /// Up to `CAPTURE_PER_NODE` genuine datagrams the relay delivered to `node` (the first
    /// ones), for a replay attack on that node.
    pub fn captured(&self, node: NodeId) -> Vec<Vec<u8>> {
        self.captured.lock().ok().and_then(|c| c.get(node as usize).cloned()).unwrap_or_default()
    }

    /// Address of each node's face, indexed by node.
    pub fn faces(&self) -> &[SocketAddr] {
        &self.faces
    }

    pub fn stats(&self) -> RelayStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn stop(mut self) -> RelayStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The run context of `ctx`'s node when every peer is reached through the relay.
pub fn route_through(ctx: &RunContext, faces: &[SocketAddr]) -> RunContext {
    let mut c = ctx.clone();
    for info in &mut c.nodes {
        if info.node != ctx.node {
            if let Some(f) = faces.get(info.node as usize) {
                info.probe_addr = *f;
            }
        }
    }
    c
}

/// The relay is the wire: behind a busy machine's other work its wake-ups come 50-150 us
/// late, which a real link never adds. Where allowed (root, or CAP_SYS_NICE), run it under
/// SCHED_FIFO.
fn realtime_priority() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::debug!("relay: SCHED_FIFO refused ({}); timing may be late on a busy machine", io::Error::last_os_error());
    }
}

/// What the relay thread owns while it runs.
struct Forwarder<'a> {
    endpoints: Vec<RelayEndpoint>,
    config: RelayConfig,
    captured: &'a Mutex<Vec<Vec<Vec<u8>>>>,
    rng: rand::rngs::StdRng,
    by_addr: HashMap<SocketAddr, usize>,
    /// Kernel-stamped clones of the faces (None where the kernel refuses stamps).
    stamped: Vec<Option<StampedSocket>>,
    queue: BinaryHeap<Reverse<Queued>>,
    /// Per face: (transmit stamp id, due time) of sends whose kernel stamp is not read yet.
    sent: Vec<VecDeque<(u32, i64)>>,
    stamps: Vec<(u32, i64)>,
    order: u64,
    stats: RelayStats,
    margin: SpinMargin,
    last_arrival_ns: i64,
    /// Whether the current receive pass found the thread polling without a wait.
    polling: bool,
}

/// CPU time this thread has used.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; the calling thread's CPU clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn relay_loop(
    endpoints: Vec<RelayEndpoint>,
    config: RelayConfig,
    stop: &AtomicBool,
    stats: &Mutex<RelayStats>,
    captured: &Mutex<Vec<Vec<Vec<u8>>>>,
) {
    distprof::timestamp::precise_timer_slack();
    realtime_priority();
    let mut pfds: Vec<libc::pollfd> = endpoints
        .iter()
        .map(|e| libc::pollfd { fd: e.face.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    // Receive through kernel-stamped clones of the faces: a datagram's delay runs from its
    // arrival in the kernel, not from when this thread got to run. On a loaded machine the
    // thread wakes 50-150 us late; timing from the wake-up released both packets of a pair
    // together, which broke nearly every pair's purity and biased the one-way delays. Send
    // through them too: their transmit stamps say when each datagram really left.
    let stamped: Vec<Option<StampedSocket>> = endpoints
        .iter()
        .map(|e| e.face.try_clone().ok().and_then(|s| StampedSocket::new(s, TimestampMode::Kernel).ok()))
        .collect();
    let sent = vec![VecDeque::new(); stamped.len()];
    let mut f = Forwarder {
        rng: rand::rngs::StdRng::seed_from_u64(config.seed),
        by_addr: endpoints.iter().enumerate().map(|(k, e)| (e.node_addr, k)).collect(),
        endpoints,
        config,
        captured,
        stamped,
        queue: BinaryHeap::new(),
        sent,
        stamps: Vec::new(),
        order: 0,
        stats: RelayStats::default(),
        margin: SpinMargin::new(realtime_ns()),
        last_arrival_ns: 0,
        polling: false,
    };
    let mut buf = [0u8; 65536];
    let mut published = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        f.send_due();
        let now = realtime_ns();
        let margin_ns = f.margin.margin_ns();
        let until_due_ns = f.queue.peek().map(|q| q.0.due_ns - now);
        let lingering = now - f.last_arrival_ns < f.margin.linger_ns();
        if lingering && until_due_ns.is_none_or(|t| t > margin_ns) {
            // Awake for a while after an arrival (see `spin_margin`): datagrams come in
            // bursts (a node's tick), and one that finds the thread asleep waits for it to
            // wake (p90 30 µs in the jitter run), so one with little delay to go is sent late.
            poll_faces(&mut f, &mut pfds, 0, &mut buf);
            f.stats.spin_ns += (realtime_ns() - now).max(0) as u64;
        } else if let Some(until_due_ns) = until_due_ns.filter(|&t| t <= margin_ns) {
            // Awake before a due datagram (see `spin_margin`). Keep receiving until
            // `FINAL_APPROACH_NS` before it, then watch only the clock (a vDSO read, tens
            // of ns), so the send starts within a fraction of a µs of its due time.
            if until_due_ns > FINAL_APPROACH_NS {
                poll_faces(&mut f, &mut pfds, 0, &mut buf);
            } else {
                let mut t = now;
                while t < now + until_due_ns {
                    std::hint::spin_loop();
                    t = realtime_ns();
                }
            }
            f.stats.spin_ns += (realtime_ns() - now).max(0) as u64;
        } else {
            // Sleep until the margin before the next due datagram, or an arrival. A timed
            // wake-up comes late, by an amount that depends on what else the machine does
            // at that moment, and a late send is one-way delay no real link adds (the
            // probes' fixed cadences line up the same way at every tick, so it made some
            // directions' minimum delays µs longer than the reverse's: path asymmetry
            // that no two-way method can see).
            let sleep_ns = until_due_ns.map_or(MAX_SLEEP_NS, |t| (t - margin_ns).clamp(1, MAX_SLEEP_NS));
            if poll_faces(&mut f, &mut pfds, sleep_ns, &mut buf) == 0 {
                let late_ns = realtime_ns() - (now + sleep_ns);
                f.stats.wake_lateness.record(late_ns);
                f.margin.observe_wake(late_ns);
            }
        }
        if published.elapsed() >= PUBLISH_EVERY {
            published = Instant::now();
            f.publish(stats);
        }
    }
    for k in 0..f.stamped.len() {
        f.read_tx_stamps(k);
    }
    f.publish(stats);
}

/// Waits up to `timeout_ns` for an arrival and receives from every face that has one;
/// returns how many faces had something (0: the time ran out).
fn poll_faces(f: &mut Forwarder, pfds: &mut [libc::pollfd], timeout_ns: i64, buf: &mut [u8]) -> usize {
    f.polling = timeout_ns == 0;
    let ts = libc::timespec { tv_sec: timeout_ns / 1_000_000_000, tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long };
    // SAFETY: pfds is a live array of pollfd of the given length.
    let ready = unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    if ready <= 0 {
        return 0;
    }
    // Only the faces that have something: a receive call on each idle face costs about a
    // µs, which at 64 faces made every pass tens of µs long.
    // And on each, only the queue that has something (a transmit stamp is an error-queue
    // event): every needless read is a µs in which arrivals wait.
    for (to, p) in pfds.iter_mut().enumerate() {
        let revents = std::mem::take(&mut p.revents);
        if revents & libc::POLLERR != 0 {
            f.read_tx_stamps(to);
        }
        if revents & libc::POLLIN != 0 {
            f.receive(to, buf);
        }
    }
    ready as usize
}

impl Forwarder<'_> {
    fn publish(&mut self, stats: &Mutex<RelayStats>) {
        self.stats.spin_margin_ns = self.margin.margin_ns() as u64;
        self.stats.cpu_ns = thread_cpu_ns();
        if let Ok(mut s) = stats.lock() {
            *s = self.stats.clone();
        }
    }

    /// Sends every datagram that is due, in the order due.
    fn send_due(&mut self) {
        while self.queue.peek().is_some_and(|q| q.0.due_ns <= realtime_ns()) {
            let Reverse(q) = self.queue.pop().expect("peeked");
            let now = realtime_ns();
            // A blackhole also swallows what was already on its way when it began.
            if self.config.blackholes.iter().any(|b| b.hits(q.from, q.to, now)) {
                self.stats.blackholed += 1;
                continue;
            }
            self.stats.send_lateness.record(now - q.due_ns);
            match self.stamped[q.from].as_mut() {
                Some(s) => {
                    if let Ok(id) = s.send_to(&q.data, self.endpoints[q.to].node_addr) {
                        self.sent[q.from].push_back((id, q.due_ns));
                    }
                }
                None => {
                    let _ = self.endpoints[q.from].face.send_to(&q.data, self.endpoints[q.to].node_addr);
                }
            }
            if let Ok(mut c) = self.captured.lock() {
                if c[q.to].len() < CAPTURE_PER_NODE {
                    c[q.to].push(q.data.clone());
                }
            }
            self.margin.observe_send(now);
            self.stats.forwarded += 1;
            self.stats.bytes_forwarded += q.data.len() as u64;
        }
    }

    /// Reads the kernel's transmit stamps of face `k`'s sends: how late each datagram
    /// really left (the stamp is taken where the receiver's is, in the loopback driver).
    fn read_tx_stamps(&mut self, k: usize) {
        let Some(s) = self.stamped[k].as_mut() else { return };
        self.stamps.clear();
        s.drain_tx_stamps(&mut self.stamps);
        for &(id, ns) in &self.stamps {
            while let Some(&(sid, due)) = self.sent[k].front() {
                if sid.wrapping_sub(id) as i32 > 0 {
                    break;
                }
                self.sent[k].pop_front();
                if sid == id {
                    self.stats.wire_lateness.record(ns - due);
                    break;
                }
            }
        }
    }

    /// Queues everything waiting at node `to`'s face, each datagram delayed from its
    /// arrival in the kernel by the model of its path.
    fn receive(&mut self, to: usize, buf: &mut [u8]) {
        loop {
            let (n, src, arrived_ns) = match self.stamped[to].as_mut() {
                Some(s) => match s.try_recv(buf) {
                    Ok(Some(r)) => (r.len, r.from, r.rx_real_ns),
                    _ => break,
                },
                None => match self.endpoints[to].face.recv_from(buf) {
                    Ok((n, src)) => (n, src, realtime_ns()),
                    Err(_) => break,
                },
            };
            self.stats.received += 1;
            self.last_arrival_ns = realtime_ns();
            self.stats.pickup_lateness.record(self.last_arrival_ns - arrived_ns);
            if self.polling {
                self.stats.pickup_while_awake.record(self.last_arrival_ns - arrived_ns);
            }
            let Some(&from) = self.by_addr.get(&src) else {
                self.stats.unknown_source += 1;
                continue;
            };
            if self.config.blackholes.iter().any(|b| b.hits(from, to, realtime_ns())) {
                self.stats.blackholed += 1;
                continue;
            }
            let path = match self.config.paths.get(&(from as NodeId, to as NodeId)) {
                Some(p) => {
                    self.stats.override_path += 1;
                    *p
                }
                None => self.config.default_path,
            };
            if self.rng.gen::<f64>() < path.loss {
                self.stats.lost += 1;
                continue;
            }
            let copies = if self.rng.gen::<f64>() < path.duplicate {
                self.stats.duplicated += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                if self.queue.len() >= MAX_QUEUED {
                    self.stats.overflow += 1;
                    continue;
                }
                let mut delay_us = path.delay_us;
                if path.jitter_us > 0.0 {
                    delay_us += -path.jitter_us * (1.0 - self.rng.gen::<f64>()).ln();
                }
                if self.rng.gen::<f64>() < path.reorder {
                    self.stats.reordered += 1;
                    delay_us += path.reorder_us;
                }
                if path.spike > 0.0 && self.rng.gen::<f64>() < path.spike {
                    self.stats.spiked += 1;
                    delay_us += path.spike_us;
                }
                self.order += 1;
                self.queue.push(Reverse(Queued {
                    due_ns: arrived_ns + (delay_us * 1000.0) as i64,
                    order: self.order,
                    from,
                    to,
                    data: buf[..n].to_vec(),
                }));
                self.stats.peak_queued = self.stats.peak_queued.max(self.queue.len() as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests;
