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
