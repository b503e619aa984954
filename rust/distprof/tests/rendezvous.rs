//! Rendezvous with threads as nodes on the in-memory store: agreement at several sizes,
//! what one node costs the store, and every failure ending within its timeout with the
//! named error, or costing the others only its edges.

use distprof::config::Config;
use distprof::context::{NodeId, RunContext};
use distprof::kv::{Counting, KvError, KvStore, MemoryStore, Traffic};
use distprof::rendezvous::session::{echo_key, join_key, round_key};
use distprof::rendezvous::values::{encode, Announcement, Echo, PROTOCOL_VERSION};
use distprof::rendezvous::{
    digest, rendezvous, rendezvous_local, wait_for_acks, RendezvousError,
};
use distprof::topology::ProbeGraph;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

type Outcome = (NodeId, Result<RunContext, RendezvousError>, Duration);

fn addr_of(node: NodeId) -> SocketAddr {
    SocketAddr::from(([127, 0, (node >> 8) as u8, node as u8], 20_000 + (node % 1000) as u16))
}

fn config_with_timeout(ms: u64) -> Config {
    Config {
        rendezvous_timeout_ms: ms,
        ..Config::default()
    }
}

/// Runs `nodes` of a `num_nodes` run as threads, node `i` starting after `delay(i)`.
fn run_nodes(
    store: &Arc<MemoryStore>,
    num_nodes: u32,
    nodes: &[NodeId],
    config_of: impl Fn(NodeId) -> Config,
    delay: impl Fn(NodeId) -> Duration,
) -> Vec<Outcome> {
    run_counted(store, num_nodes, nodes, config_of, delay).into_iter().map(|(o, _)| o).collect()
}

/// As `run_nodes`, each node on its own counting view of the store.
fn run_counted(
    store: &Arc<MemoryStore>,
    num_nodes: u32,
    nodes: &[NodeId],
    config_of: impl Fn(NodeId) -> Config,
    delay: impl Fn(NodeId) -> Duration,
) -> Vec<(Outcome, Traffic)> {
    let handles: Vec<_> = nodes
        .iter()
        .map(|&i| {
            let store = Counting::new(store.clone());
            let config = config_of(i);
            let wait = delay(i);
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    thread::sleep(wait);
                    let start = Instant::now();
                    let r = rendezvous(&store, i, num_nodes, &config, addr_of(i), &format!("host{}", i / 4));
                    ((i, r, start.elapsed()), store.traffic())
                })
                .unwrap()
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Every node succeeded, they agree on the session, and each one's edges, probers and
/// addresses are its own in the graph, less `absent`.
fn assert_agree(outcomes: &[Outcome], num_nodes: u32, config: &Config, absent: &[NodeId]) -> RunContext {
    let first = outcomes[0].1.as_ref().unwrap_or_else(|e| panic!("node {}: {e}", outcomes[0].0)).clone();
    let graph = ProbeGraph::new(num_nodes, config.probe_out_degree, config.graph_seed);
    for (i, r, _) in outcomes {
        let ctx = r.as_ref().unwrap_or_else(|e| panic!("node {i}: {e}"));
        assert_eq!(ctx.shared_json(), first.shared_json(), "node {i} disagrees");
        assert_eq!(digest::context_digest(ctx), digest::context_digest(&first));
        assert_eq!(ctx.node, *i);
        let present = |p: &NodeId| !absent.contains(p);
        assert_eq!(ctx.out_edges, graph.out_edges(*i).into_iter().filter(present).collect::<Vec<_>>(), "node {i}");
        assert_eq!(ctx.in_edges, graph.in_edges(*i).into_iter().filter(present).collect::<Vec<_>>(), "node {i}");
        let mut ids: Vec<NodeId> = ctx.out_edges.iter().chain(&ctx.in_edges).copied().chain([*i]).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ctx.nodes.iter().map(|n| n.node).collect::<Vec<_>>(), ids, "node {i}");
        for info in &ctx.nodes {
            assert_eq!(info.probe_addr, addr_of(info.node));
            assert_eq!(info.hostname, format!("host{}", info.node / 4));
        }
        let mut expected_absent: Vec<NodeId> =
            graph.out_edges(*i).into_iter().chain(graph.in_edges(*i)).filter(|p| absent.contains(p)).collect();
        expected_absent.sort_unstable();
        expected_absent.dedup();
        assert_eq!(ctx.absent_peers, expected_absent, "node {i}");
    }
    assert_eq!(first.num_nodes, num_nodes);
    assert_ne!(first.session_token, 0);
    assert_eq!(first.config_digest, digest::config_digest(config));
    first
}

#[test]
fn nodes_agree_at_2_3_8_64_and_100() {
    // 64 nodes at out-degree 8 is the largest dense graph, 100 a sparse one.
    for n in [2u32, 3, 8, 64, 100] {
        let store = Arc::new(MemoryStore::new());
        let config = config_with_timeout(20_000);
        let all: Vec<NodeId> = (0..n).collect();
        // Reverse start order: workers wait for a master that arrives last.
        let out = run_nodes(&store, n, &all, |_| config.clone(), |i| Duration::from_millis(((n - i) % 5) as u64 * 3));
        let ctx = assert_agree(&out, n, &config, &[]);
        assert!(wait_for_acks(store.as_ref(), &ctx, Duration::from_secs(5)).is_empty());
    }
}

#[test]
fn what_a_node_costs_the_store_does_not_grow_with_the_node_count() {
    // Calls, bytes and the largest value per node, the master included, at 100 and 400
    // nodes: the same bounds hold for both (the old protocol's master read every join and
    // every node read one value listing all nodes).
    let config = config_with_timeout(60_000);
    let mut worst = Vec::new();
    for n in [100u32, 400] {
        let store = Arc::new(MemoryStore::new());
        let all: Vec<NodeId> = (0..n).collect();
        let out = run_counted(&store, n, &all, |_| config.clone(), |_| Duration::ZERO);
        let outcomes: Vec<Outcome> = out.iter().map(|(o, _)| o.clone()).collect();
        assert_agree(&outcomes, n, &config, &[]);
        let max = |f: fn(&Traffic) -> u64| out.iter().map(|(_, t)| f(t)).max().unwrap();
        let (read, written, largest) = (max(|t| t.bytes_read), max(|t| t.bytes_written), max(|t| t.largest_value_bytes));
        // About 20 peers at out-degree 8: a 300-byte join and a 100-byte echo from each,
        // and the 0.5 kB announcement.
        assert!(read < 16_000, "n={n}: a node read {read} bytes");
        assert!(written < 6_000, "n={n}: a node wrote {written} bytes");
        assert!(largest < 2_000, "n={n}: a value of {largest} bytes");
        worst.push((read, out.iter().map(|(_, t)| t.calls).max().unwrap()));
    }
    let ((read_100, _), (read_400, calls_400)) = (worst[0], worst[1]);
    assert!(read_400 < read_100 * 3 / 2, "bytes read per node grew from {read_100} to {read_400}");
    assert!(calls_400 < 400, "a node made {calls_400} store calls");
}

#[test]
fn one_node_needs_no_peers() {
    let store = MemoryStore::new();
    let ctx = rendezvous(&store, 0, 1, &Config::default(), addr_of(0), "solo").unwrap();
    assert_eq!(ctx.num_nodes, 1);
    assert!(ctx.out_edges.is_empty() && ctx.in_edges.is_empty());
    assert_eq!(ctx.me().unwrap().hostname, "solo");
}

#[test]
fn reference_node_and_node_id_are_checked() {
    let store = MemoryStore::new();
    let config = Config {
        reference_node: 4,
        ..Config::default()
    };
    let err = rendezvous(&store, 0, 4, &config, addr_of(0), "h").unwrap_err();
    assert!(
        matches!(&err, RendezvousError::InvalidArgument(m) if m.contains("`reference_node` = 4") && m.contains("below 4")),
        "{err}"
    );
    let err = rendezvous(&store, 5, 4, &Config::default(), addr_of(0), "h").unwrap_err();
    assert!(
        matches!(&err, RendezvousError::InvalidArgument(m) if m.contains("node id 5")),
        "{err}"
    );
    assert!(store.is_empty(), "nothing written on bad arguments");
}

const T_MS: u64 = 1_200;
/// What a failure may take beyond its timeout (thread start, the last poll slice).
const SLACK: Duration = Duration::from_millis(1_500);

fn within_timeout(d: Duration) -> bool {
    d < Duration::from_millis(T_MS) + SLACK
}

#[test]
fn a_node_that_never_arrives_costs_the_others_only_its_edges() {
    // 40 nodes at out-degree 3 (sparse); node 7 never starts. Its peers go on without it
    // at the deadline, the other nodes at once.
    let config = Config { probe_out_degree: 3, ..config_with_timeout(T_MS * 2) };
    let graph = ProbeGraph::new(40, 3, config.graph_seed);
    let peers_of_7: Vec<NodeId> = graph.out_edges(7).into_iter().chain(graph.in_edges(7)).collect();
    let store = Arc::new(MemoryStore::new());
    let nodes: Vec<NodeId> = (0..40).filter(|&i| i != 7).collect();
    let out = run_nodes(&store, 40, &nodes, |_| config.clone(), |_| Duration::ZERO);
    assert_agree(&out, 40, &config, &[7]);
    for (i, _, took) in &out {
        if peers_of_7.contains(i) {
            assert!(*took >= Duration::from_millis(T_MS * 2) && *took < Duration::from_millis(T_MS * 2) + SLACK, "node {i} took {took:?}");
        } else {
            assert!(*took < Duration::from_millis(T_MS), "node {i}, no peer of node 7, took {took:?}");
        }
    }
}

#[test]
fn a_node_whose_peers_all_stay_away_fails_naming_them() {
    // Of three nodes only node 1 starts (the master died after opening the round): its
    // peers are 0 and 2.
    let config = config_with_timeout(T_MS);
    let (store, sid) = round_of_a_dead_master(&config);
    let out = run_nodes(&store, 3, &[1], |_| config.clone(), |_| Duration::ZERO);
    let (_, r, took) = &out[0];
    assert!(within_timeout(*took) && *took >= Duration::from_millis(T_MS), "took {took:?}");
    match r {
        Err(e @ RendezvousError::NoPeers { node: 1, session_id, missing, .. }) => {
            assert_eq!((session_id.as_str(), missing), (sid, &vec![0, 2]));
            assert!(e.to_string().contains("rendezvous_timeout_ms"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_master_that_never_starts_times_out_every_node() {
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(&store, 3, &[1, 2], |_| config_with_timeout(T_MS), |_| Duration::ZERO);
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        assert!(*took >= Duration::from_millis(T_MS), "node {i} gave up early: {took:?}");
        assert!(matches!(r, Err(RendezvousError::NoSession { node, .. }) if node == i), "node {i}: {r:?}");
    }
}

/// A store holding round 0 of a 3-node session whose master died right after opening it.
fn round_of_a_dead_master(config: &Config) -> (Arc<MemoryStore>, &'static str) {
    let store = Arc::new(MemoryStore::new());
    let sid = "0123456789abcdef0123456789abcdef";
    store.set(&round_key(0), &announcement(sid, 3, config)).unwrap();
    (store, sid)
}

fn announcement(session_id: &str, num_nodes: u32, config: &Config) -> String {
    encode(&Announcement {
        version: PROTOCOL_VERSION,
        session_id: session_id.into(),
        session_token: 99,
        num_nodes,
        reference_node: 0,
        config_digest: digest::config_digest(config),
        config: digest::shared_config_value(config),
        graph: distprof::context::GraphParams { out_degree: config.probe_out_degree, seed: config.graph_seed },
    })
}

#[test]
fn nodes_go_on_without_a_master_that_died_after_opening_the_session() {
    // Once the round is open the master is a peer like any other.
    let config = config_with_timeout(T_MS);
    let (store, sid) = round_of_a_dead_master(&config);
    let out = run_nodes(&store, 3, &[1, 2], |_| config.clone(), |_| Duration::ZERO);
    let ctx = assert_agree(&out, 3, &config, &[0]);
    assert_eq!((ctx.session_id.as_str(), ctx.session_token), (sid, 99));
    assert!(out.iter().all(|(_, _, took)| within_timeout(*took)));
}

fn malformed_key(r: &Result<RunContext, RendezvousError>) -> String {
    match r {
        Err(RendezvousError::Kv(KvError::Malformed { key, .. })) => key.clone(),
        other => panic!("expected a malformed value, got {other:?}"),
    }
}

#[test]
fn garbage_announcement_is_an_error_naming_its_key() {
    let store = Arc::new(MemoryStore::new());
    store.set(&round_key(0), "{not json").unwrap();
    let out = run_nodes(&store, 2, &[1], |_| config_with_timeout(T_MS), |_| Duration::ZERO);
    assert_eq!(malformed_key(&out[0].1), "distprof/round/0");
    assert!(out[0].2 < Duration::from_millis(500), "garbage is reported at once, took {:?}", out[0].2);
    let text = out[0].1.as_ref().unwrap_err().to_string();
    assert!(text.contains("`distprof/round/0`") && text.contains("{not json"), "{text}");
}

/// Writes `value(session id)` to `key(session id)` as soon as the master opened round 0.
fn forge(store: &Arc<MemoryStore>, key: fn(&str) -> String, value: fn(&str) -> String) -> thread::JoinHandle<String> {
    let store = store.clone();
    thread::spawn(move || {
        let ann = store.get(&round_key(0), Duration::from_secs(5)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&ann).unwrap();
        let sid = v["session_id"].as_str().unwrap().to_string();
        store.set(&key(&sid), &value(&sid)).unwrap();
        sid
    })
}

#[test]
fn a_garbage_join_drops_only_that_peer_at_once() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(T_MS * 4);
    let faker = forge(&store, |sid| join_key(sid, 1), |_| "\u{0}\u{1}garbage".into());
    let out = run_nodes(&store, 3, &[0, 2], |_| config.clone(), |_| Duration::ZERO);
    faker.join().unwrap();
    assert_agree(&out, 3, &config, &[1]);
    assert!(out.iter().all(|(_, _, took)| *took < Duration::from_millis(T_MS)), "{out:?}");
}

#[test]
fn a_peer_echoing_another_nonce_means_two_processes_share_a_rank() {
    // Node 0's echo to node 1 carries a nonce node 1 never drew: another process joined
    // as node 1 and node 0 read that one's join.
    let config = config_with_timeout(T_MS);
    let (store, sid) = round_of_a_dead_master(&config);
    let echo = Echo { session_id: sid.into(), from: 0, to: 1, nonce: 1 };
    store.set(&echo_key(sid, 0, 1), &encode(&echo)).unwrap();
    let out = run_nodes(&store, 3, &[1, 2], |_| config.clone(), |_| Duration::ZERO);
    let (_, r, took) = &out[0];
    assert!(*took < Duration::from_millis(T_MS), "took {took:?}");
    match r {
        Err(e @ RendezvousError::DuplicateNode { node: 1, peer: 0, .. }) => {
            assert!(e.to_string().contains("its own rank"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restarted_job_on_a_reused_store_gets_a_new_session() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let all = [0, 1, 2];
    let first = assert_agree(&run_nodes(&store, 3, &all, |_| config.clone(), |_| Duration::ZERO), 3, &config, &[]);
    // Second run: workers start well before the master, with the old session in the store.
    let delay = |i| if i == 0 { Duration::from_millis(300) } else { Duration::ZERO };
    let second = assert_agree(&run_nodes(&store, 3, &all, |_| config.clone(), delay), 3, &config, &[]);
    assert_ne!(first.session_id, second.session_id);
    assert_ne!(first.session_token, second.session_token);
    assert!(store.try_get(&round_key(1)).unwrap().is_some() && store.try_get(&round_key(2)).unwrap().is_none());
}

#[test]
fn workers_never_adopt_a_finished_run_and_time_out_without_a_new_master() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let first = assert_agree(&run_nodes(&store, 3, &[0, 1, 2], |_| config.clone(), |_| Duration::ZERO), 3, &config, &[]);
    let out = run_nodes(&store, 3, &[1, 2], |_| config_with_timeout(T_MS), |_| Duration::ZERO);
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        match r {
            Err(RendezvousError::NoSession { detail, .. }) => assert!(detail.contains("finished runs"), "{detail}"),
            other => panic!("node {i} adopted stale state: {other:?} (first session {})", first.session_id),
        }
    }
}

#[test]
fn a_round_left_open_by_a_dead_master_is_skipped() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let dead = "00000000000000000000000000000001";
    store.set(&round_key(0), &announcement(dead, 3, &config)).unwrap();
    // Workers first: they join the dead round, then move when the live master opens round 1.
    let delay = |i| if i == 0 { Duration::from_millis(300) } else { Duration::ZERO };
    let out = run_nodes(&store, 3, &[0, 1, 2], |_| config.clone(), delay);
    let ctx = assert_agree(&out, 3, &config, &[]);
    assert_ne!(ctx.session_id, dead);
    assert!(out.iter().all(|(_, _, took)| *took < Duration::from_secs(5)));
}

#[test]
fn a_mismatched_config_is_named_by_field_and_its_peers_go_on_without_it() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(T_MS * 4);
    let out = run_nodes(
        &store,
        3,
        &[0, 1, 2],
        |i| if i == 2 { Config { probe_out_degree: 3, ..config.clone() } } else { config.clone() },
        |_| Duration::ZERO,
    );
    for (i, r, took) in &out {
        assert!(*took < Duration::from_millis(T_MS), "node {i} took {took:?}: a mismatch is known at once");
        if *i == 2 {
            match r {
                Err(RendezvousError::ConfigMismatch { node: 2, fields, .. }) => {
                    assert_eq!(fields, &vec!["probe_out_degree (master 8, this node 3)".to_string()])
                }
                _ => panic!("node {i}: unexpected {r:?}"),
            }
        }
    }
    assert_agree(&out[..2], 3, &config, &[2]);
    // Node-local fields may differ freely.
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(
        &store,
        2,
        &[0, 1],
        |i| Config { interface: format!("eth{i}"), probe_port: 9000 + i as u16, ..config_with_timeout(5_000) },
        |_| Duration::ZERO,
    );
    assert!(out.iter().all(|(_, r, _)| r.is_ok()), "{out:?}");
}

#[test]
fn a_node_count_mismatch_is_named() {
    let store = Arc::new(MemoryStore::new());
    let handles: Vec<_> = [(0u32, 3u32), (1, 3), (2, 4)]
        .into_iter()
        .map(|(i, n)| {
            let store = store.clone();
            thread::spawn(move || rendezvous(store.as_ref(), i, n, &config_with_timeout(T_MS * 4), addr_of(i), "h"))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results[2], Err(RendezvousError::NodeCountMismatch { node: 2, ours: 4, master: 3 }));
    for r in &results[..2] {
        assert_eq!(r.as_ref().unwrap().absent_peers, vec![2], "{r:?}");
    }
}

#[test]
fn local_runs_get_one_context_per_node_in_order() {
    let addrs: Vec<SocketAddr> = (0..5).map(addr_of).collect();
    let config = Config { probe_out_degree: 2, ..Config::default() };
    let ctxs = rendezvous_local(&config, &addrs, "here").unwrap();
    assert_eq!(ctxs.len(), 5);
    let graph = ProbeGraph::new(5, 2, config.graph_seed);
    for (i, c) in ctxs.iter().enumerate() {
        assert_eq!(c.node, i as NodeId);
        assert_eq!(c.shared_json(), ctxs[0].shared_json());
        assert_eq!(c.out_edges, graph.out_edges(i as NodeId));
        assert_eq!(c.me().unwrap().probe_addr, addrs[i]);
        for &p in &c.out_edges {
            assert_eq!(c.info(p).unwrap().probe_addr, addrs[p as usize]);
        }
    }
    let bad = Config { reference_node: 9, ..Config::default() };
    assert!(matches!(rendezvous_local(&bad, &addrs, "here"), Err(RendezvousError::InvalidArgument(_))));
}
