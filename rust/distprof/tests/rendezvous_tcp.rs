//! The rendezvous over the real TCP store: many clients on one server, IPv4 and IPv6 loopback.

use distprof::config::Config;
use distprof::context::NodeId;
use distprof::kv::tcp::TcpStoreOptions;
use distprof::kv::{KvStore, TcpStore, TcpStoreServer};
use distprof::rendezvous::{rendezvous, wait_for_acks};
use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

fn agree_over_tcp(bind: &str, num_nodes: u32) {
    let server = TcpStoreServer::bind(bind.parse().unwrap()).unwrap();
    let store_addr = server.local_addr();
    let config = Config {
        rendezvous_timeout_ms: 20_000,
        ..Config::default()
    };
    let probe_ip = store_addr.ip();
    let ctxs = thread::scope(|s| {
        let handles: Vec<_> = (0..num_nodes)
            .map(|i: NodeId| {
                let (server, config) = (&server, &config);
                s.spawn(move || {
                    let probe = SocketAddr::new(probe_ip, 30_000 + i as u16);
                    if i == 0 {
                        // Rank 0 uses the served map directly, as `distprof run` does.
                        let ctx =
                            rendezvous(server.store(), 0, num_nodes, config, probe, "h0").unwrap();
                        assert!(
                            wait_for_acks(server.store(), &ctx, Duration::from_secs(10)).is_empty()
                        );
                        ctx
                    } else {
                        let client = TcpStore::new(store_addr, TcpStoreOptions::default());
                        let kv: &dyn KvStore = &client;
                        rendezvous(kv, i, num_nodes, config, probe, &format!("h{i}"))
                            .unwrap_or_else(|e| panic!("node {i}: {e}"))
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let digest = distprof::rendezvous::digest::context_digest(&ctxs[0]);
    for (i, c) in ctxs.iter().enumerate() {
        assert_eq!(distprof::rendezvous::digest::context_digest(c), digest, "node {i} disagrees");
        assert!(c.absent_peers.is_empty(), "node {i}: {:?}", c.absent_peers);
        for info in &c.nodes {
            assert_eq!(info.probe_addr, SocketAddr::new(probe_ip, 30_000 + info.node as u16));
        }
    }
}

#[test]
fn thirty_two_clients_agree_over_ipv4_loopback() {
    agree_over_tcp("127.0.0.1:0", 32);
}

#[test]
fn eight_clients_agree_over_ipv6_loopback() {
    agree_over_tcp("[::1]:0", 8);
}

/// Rank 0 (on the served map) and ranks 1 and 2 (TCP clients from 127.0.0.1) rendezvous on
/// `server`; returns the time until all three agreed.
fn three_ranks_agree(server: &TcpStoreServer) -> Duration {
    let config = Config { rendezvous_timeout_ms: 30_000, ..Config::default() };
    let start = std::time::Instant::now();
    thread::scope(|s| {
        let handles: Vec<_> = (0..3u32)
            .map(|i: NodeId| {
                let config = &config;
                s.spawn(move || {
                    let probe = SocketAddr::new([127, 0, 0, 1].into(), 31_000 + i as u16);
                    if i == 0 {
                        rendezvous(server.store(), 0, 3, config, probe, "h0").unwrap()
                    } else {
                        let client = TcpStore::new(server.local_addr(), TcpStoreOptions::default());
                        rendezvous(&client, i, 3, config, probe, &format!("h{i}")).unwrap_or_else(|e| panic!("node {i}: {e}"))
                    }
                })
            })
            .collect();
        let ctxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let digest = distprof::rendezvous::digest::context_digest(&ctxs[0]);
        assert!(ctxs.iter().all(|c| distprof::rendezvous::digest::context_digest(c) == digest));
    });
    start.elapsed()
}

/// Holds up to `target` greeted connections (the public HELLO) from 127.0.0.10.. (40
/// addresses in turn) until `stop`, reopening the ones the store closes; a BUSY ends a
/// round. Counts the connections it tried.
fn greeted_flood(addr: SocketAddr, target: usize, stop: &std::sync::atomic::AtomicBool, tried: &std::sync::atomic::AtomicUsize) {
    use distprof::kv::tcp::frame::{self, Request, Response};
    use std::io::Read;
    use std::sync::atomic::Ordering;
    let mut held: Vec<std::net::TcpStream> = Vec::new();
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        held.retain(|c| matches!((&*c).read(&mut [0u8; 8]), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock));
        while held.len() < target && !stop.load(Ordering::Relaxed) {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&SocketAddr::from(([127, 0, 0, 10 + (next % 40) as u8], 0)).into()).unwrap();
            next += 1;
            tried.fetch_add(1, Ordering::Relaxed);
            if sock.connect(&addr.into()).is_err() {
                break;
            }
            let mut c: std::net::TcpStream = sock.into();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            frame::write_request(&mut c, &Request::Hello { version: frame::VERSION, secret: String::new() }).unwrap();
            match frame::read_response(&mut c) {
                Ok(Response::Ok) => {
                    c.set_nonblocking(true).unwrap();
                    held.push(c);
                }
                _ => break,
            }
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 28's store flood at a smaller scale: a store of 400 connections (8,192 in
/// `distprof run`) held full by 1,000 greeted connections from 40 loopback addresses (10,000
/// against 8,192 in `distprof bench faults`' store_greeted_flood). Three ranks still agree
/// within 2 s of their unflooded time (the documented figure; the bench measured 0.37 to
/// 1.56 s flooded against 0.02 s, this test well under 1 s), the store counts what it refused and evicted, and logs it as at
/// most one summary line per 5 s interval (plus the one at shutdown), not one per refusal.
#[test]
fn a_greeted_flood_from_forty_addresses_does_not_lock_out_three_ranks() {
    use distprof::kv::tcp::ServerOptions;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let options = || ServerOptions { max_connections: 400, ..ServerOptions::default() };
    let clean = {
        let server = TcpStoreServer::bind_with("127.0.0.1:0".parse().unwrap(), options()).unwrap();
        three_ranks_agree(&server)
    };
    let mut server = TcpStoreServer::bind_with("127.0.0.1:0".parse().unwrap(), options()).unwrap();
    let flood_started = std::time::Instant::now();
    let (stop, tried) = (AtomicBool::new(false), AtomicUsize::new(0));
    let flooded = thread::scope(|s| {
        let addr = server.local_addr();
        let (stop, tried) = (&stop, &tried);
        let flood = s.spawn(move || greeted_flood(addr, 1_000, stop, tried));
        let full = std::time::Instant::now();
        // Full, and the flood's next connection refused.
        while (server.connection_count() < 400 || server.stats().refused_busy == 0) && full.elapsed() < Duration::from_secs(60) {
            thread::sleep(Duration::from_millis(20));
        }
        if server.connection_count() != 400 {
            stop.store(true, Ordering::Relaxed);
            panic!("the flood did not fill the store: {:?}", server.stats());
        }
        // Stops the flood however the ranks end: a failed rank must fail the test, not hang it.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let guard = StopOnDrop(stop);
        let took = three_ranks_agree(&server);
        drop(guard);
        flood.join().unwrap();
        took
    });
    server.shutdown();
    let flood_s = flood_started.elapsed().as_secs_f64();
    let stats = server.stats();
    assert!(tried.load(Ordering::Relaxed) > 400, "the flood tried past the store's limit");
    assert!(flooded <= clean + Duration::from_secs(2), "flooded {flooded:?}, unflooded {clean:?}: {stats:?}");
    // Ranks 1 and 2 each took the place of one of the flood's (at least), and the flood's
    // next connections were refused.
    assert!(stats.evicted_greeted >= 2 && stats.refused_busy >= 1, "{stats:?}");
    let allowed = 1 + (flood_s / distprof::kv::tcp::REFUSAL_LOG_INTERVAL.as_secs_f64()).floor() as u64 + 1;
    assert!(stats.summary_lines >= 1 && stats.summary_lines <= allowed, "{} lines in {flood_s:.1} s: {stats:?}", stats.summary_lines);
}
