//! A hostile sender at a node's probe port: packets of another run (foreign session
//! token), malformed datagrams (truncated, garbage, unsupported version) and replays of
//! genuine packets the relay captured (right token, old sequence numbers).
//!
//! It sends straight to the node's real address, not through the relay: the engine does
//! not trust the source address (anyone on the network can reach the port), so every
//! datagram sent here must be dropped and counted by the node, each kind under its own
//! reason (`docs/jsonl.md`).

use distprof::context::NodeId;
use distprof::wire::{Packet, PacketKind, PACKET_LEN, PROTOCOL_VERSION};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to send, where, how fast.
#[derive(Debug, Clone)]
pub struct FloodPlan {
    /// The node under attack and its real probe address.
    pub node: NodeId,
    pub target: SocketAddr,
    /// The run's token; foreign packets carry any other.
    pub session_token: u64,
    /// Datagrams per second, all kinds together.
    pub rate_per_s: f64,
    /// Genuine datagrams once delivered to `node` (see `Relay::captured`); none: no replays.
    pub replays: Vec<Vec<u8>>,
    pub seed: u64,
}

/// Datagrams sent, per kind, and the drop reason the node must count each under.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FloodCounts {
    /// Well-formed packets with another session's token: `wrong_token`.
    pub foreign_token: u64,
    /// A valid packet cut short (1-47 bytes): `wrong_length`.
    pub truncated: u64,
    /// 48 random bytes not starting with the magic: `bad_magic`.
    pub garbage: u64,
    /// A valid packet claiming another protocol version: `unsupported_version`.
    pub bad_version: u64,
    /// Genuine packets of this run sent again: `stale_seq`, `duplicate` or `unexpected`.
    pub replayed: u64,
    /// Sends the kernel refused (counted by no node).
    pub send_failed: u64,
}

impl FloodCounts {
    pub fn total(&self) -> u64 {
        self.foreign_token + self.truncated + self.garbage + self.bad_version + self.replayed
    }
}

/// A running flood; stops (and joins its thread) on `stop` or drop.
pub struct Flood {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    counts: Arc<Mutex<FloodCounts>>,
}

impl Flood {
    pub fn start(plan: FloodPlan) -> Result<Flood, String> {
        if !(plan.rate_per_s.is_finite() && (1.0..=100_000.0).contains(&plan.rate_per_s)) {
            return Err(format!("flood rate_per_s = {}; use 1 to 100000 datagrams per second", plan.rate_per_s));
        }
        let bind: SocketAddr = if plan.target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("literal");
        let sock = UdpSocket::bind(bind).map_err(|e| format!("flood socket: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(FloodCounts::default()));
        let (s, c) = (stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("distprof-flood".into())
            .spawn(move || flood_loop(&sock, &plan, &s, &c))
            .map_err(|e| format!("cannot start flood thread: {e}"))?;
        Ok(Flood { stop, thread: Some(thread), counts })
    }

    pub fn counts(&self) -> FloodCounts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn stop(mut self) -> FloodCounts {
        self.shutdown();
        self.counts()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn flood_loop(sock: &UdpSocket, plan: &FloodPlan, stop: &AtomicBool, counts: &Mutex<FloodCounts>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(plan.seed);
    let interval = Duration::from_secs_f64(1.0 / plan.rate_per_s);
    let mut next = Instant::now();
    let kinds = if plan.replays.is_empty() { 4 } else { 5 };
    let mut k = 0usize;
    let mut local = FloodCounts::default();
    while !stop.load(Ordering::Relaxed) {
        let valid = Packet {
            kind: PacketKind::Fwd1,
            session_token: plan.session_token,
            src: rng.gen_range(0..64),
            dst: plan.node,
            seq: rng.gen(),
            stamps_ns: [rng.gen(), rng.gen()],
        };
        let (bytes, slot): (Vec<u8>, &mut u64) = match k % kinds {
            0 => {
                let mut token = rng.gen::<u64>();
                if token == plan.session_token {
                    token ^= 1;
                }
                (Packet { session_token: token, ..valid }.encode().to_vec(), &mut local.foreign_token)
            }
            1 => (valid.encode()[..rng.gen_range(1..PACKET_LEN)].to_vec(), &mut local.truncated),
            2 => {
                let mut b: Vec<u8> = (0..PACKET_LEN).map(|_| rng.gen()).collect();
                if b[0] == b'D' {
                    b[0] = b'X';
                }
                (b, &mut local.garbage)
            }
            3 => {
                let mut b = valid.encode();
                b[4] = PROTOCOL_VERSION.wrapping_add(rng.gen_range(1..=255));
                (b.to_vec(), &mut local.bad_version)
            }
            _ => (plan.replays[(k / kinds) % plan.replays.len()].clone(), &mut local.replayed),
        };
        match sock.send_to(&bytes, plan.target) {
            Ok(_) => *slot += 1,
            Err(_) => local.send_failed += 1,
        }
        k += 1;
        if let Ok(mut c) = counts.lock() {
            *c = local.clone();
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > Duration::from_millis(100) {
            // Descheduled for long: resume the rate instead of bursting the backlog.
            next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every datagram of each kind decodes (or fails to) the way its counter says.
    #[test]
    fn each_kind_is_rejected_for_its_own_reason() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let genuine = Packet {
            kind: PacketKind::Rev1,
            session_token: 42,
            src: 1,
            dst: 0,
            seq: 7,
            stamps_ns: [1, 2],
        }
        .encode()
        .to_vec();
        let flood = Flood::start(FloodPlan {
            node: 0,
            target: rx.local_addr().unwrap(),
            session_token: 42,
            rate_per_s: 2000.0,
            replays: vec![genuine.clone()],
            seed: 5,
        })
        .unwrap();
        let mut seen = FloodCounts::default();
        let mut buf = [0u8; 128];
        while seen.total() < 500 {
            let (n, _) = rx.recv_from(&mut buf).unwrap();
            let b = &buf[..n];
            match Packet::decode(b) {
                Ok(p) if p.session_token != 42 => seen.foreign_token += 1,
                Ok(_) => {
                    assert_eq!(b, &genuine[..]);
                    seen.replayed += 1
                }
                Err(distprof::wire::Reject::WrongLength) => seen.truncated += 1,
                Err(distprof::wire::Reject::BadMagic) => seen.garbage += 1,
                Err(distprof::wire::Reject::UnsupportedVersion) => seen.bad_version += 1,
                Err(r) => panic!("unplanned reject {r:?}"),
            }
        }
        let sent = flood.stop();
        // Round robin: each kind a fifth of what was received.
        for v in [seen.foreign_token, seen.truncated, seen.garbage, seen.bad_version, seen.replayed] {
            assert_eq!(v, 100, "{seen:?}");
        }
        assert!(sent.total() >= 500 && sent.send_failed == 0, "{sent:?}");
    }
}
