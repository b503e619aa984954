//! Rendezvous with threads as nodes on the in-memory store: agreement at several sizes,
//! and every failure ending within its timeout with the named error.

use distprof::config::Config;
use distprof::context::{NodeId, RunContext};
use distprof::kv::{KvError, KvStore, MemoryStore};
use distprof::rendezvous::session::{context_key, join_key, round_key};
use distprof::rendezvous::values::{encode, Announcement, PROTOCOL_VERSION};
use distprof::rendezvous::{
    digest, rendezvous, rendezvous_local, wait_for_acks, RendezvousError,
};
use distprof::topology::build_probe_graph;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

type Outcome = (NodeId, Result<RunContext, RendezvousError>, Duration);

fn addr_of(node: NodeId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 20_000 + node as u16))
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
    let handles: Vec<_> = nodes
        .iter()
        .map(|&i| {
            let store = store.clone();
            let config = config_of(i);
            let wait = delay(i);
            thread::spawn(move || {
                thread::sleep(wait);
                let start = Instant::now();
                let r = rendezvous(
                    store.as_ref(),
                    i,
                    num_nodes,
                    &config,
                    addr_of(i),
                    &format!("host{}", i / 4),
                );
                (i, r, start.elapsed())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn assert_agree(outcomes: &[Outcome], num_nodes: u32, config: &Config) -> RunContext {
    let first = outcomes[0].1.as_ref().unwrap().clone();
    for (i, r, _) in outcomes {
        let ctx = r.as_ref().unwrap_or_else(|e| panic!("node {i}: {e}"));
        assert_eq!(ctx, &first, "node {i} disagrees");
    }
    assert_eq!(first.num_nodes, num_nodes);
    assert_eq!(first.nodes.len(), num_nodes as usize);
    for (i, info) in first.nodes.iter().enumerate() {
        assert_eq!(info.node, i as u32);
        assert_eq!(info.probe_addr, addr_of(i as u32));
        assert_eq!(info.hostname, format!("host{}", i / 4));
    }
    assert_eq!(
        first.out_edges,
        build_probe_graph(num_nodes, config.probe_out_degree, config.graph_seed)
    );
    assert_ne!(first.session_token, 0);
    assert_eq!(first.config_digest, digest::config_digest(config));
    first
}

#[test]
fn nodes_agree_at_2_3_8_and_64() {
    for n in [2u32, 3, 8, 64] {
        let store = Arc::new(MemoryStore::new());
        let config = config_with_timeout(20_000);
        let all: Vec<NodeId> = (0..n).collect();
        // Reverse start order: workers wait for a master that arrives last.
        let out = run_nodes(
            &store,
            n,
            &all,
            |_| config.clone(),
            |i| Duration::from_millis(((n - i) % 5) as u64 * 3),
        );
        let ctx = assert_agree(&out, n, &config);
        assert!(wait_for_acks(store.as_ref(), &ctx, Duration::from_secs(5)).is_empty());
    }
}

#[test]
fn one_node_needs_no_peers() {
    let store = MemoryStore::new();
    let ctx = rendezvous(&store, 0, 1, &Config::default(), addr_of(0), "solo").unwrap();
    assert_eq!(ctx.num_nodes, 1);
    assert_eq!(ctx.out_edges, vec![Vec::<NodeId>::new()]);
    assert_eq!(ctx.nodes[0].hostname, "solo");
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
fn a_node_that_never_arrives_is_named_by_the_master_and_others_abort() {
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(
        &store,
        4,
        &[0, 1, 3],
        |_| config_with_timeout(T_MS),
        |_| Duration::ZERO,
    );
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        let err = r.as_ref().unwrap_err();
        match (i, err) {
            (
                0,
                RendezvousError::NodesMissing {
                    missing,
                    num_nodes: 4,
                    ..
                },
            ) => assert_eq!(missing, &vec![2]),
            (1 | 3, RendezvousError::Aborted { reason, .. }) => {
                assert!(reason.contains("[2]"), "{reason}")
            }
            _ => panic!("node {i}: unexpected {err}"),
        }
    }
}

#[test]
fn a_master_that_never_starts_times_out_every_node() {
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(
        &store,
        3,
        &[1, 2],
        |_| config_with_timeout(T_MS),
        |_| Duration::ZERO,
    );
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        assert!(
            *took >= Duration::from_millis(T_MS),
            "node {i} gave up early: {took:?}"
        );
        assert!(
            matches!(r, Err(RendezvousError::NoSession { node, .. }) if node == i),
            "node {i}: {r:?}"
        );
    }
}

fn announcement(session_id: &str, num_nodes: u32, config: &Config) -> String {
    encode(&Announcement {
        version: PROTOCOL_VERSION,
        session_id: session_id.into(),
        num_nodes,
        config_digest: digest::config_digest(config),
        config: digest::shared_config_value(config),
    })
}

#[test]
fn a_master_that_dies_after_opening_the_session_leaves_nodes_with_no_context() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(T_MS);
    let sid = "0123456789abcdef0123456789abcdef";
    store
        .set(&round_key(0), &announcement(sid, 3, &config))
        .unwrap();
    let out = run_nodes(&store, 3, &[1, 2], |_| config.clone(), |_| Duration::ZERO);
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        assert!(
            matches!(r, Err(RendezvousError::NoContext { session_id, .. }) if session_id == sid),
            "node {i}: {r:?}"
        );
        // They did join the dead master's session.
        assert!(store.try_get(&join_key(sid, *i)).unwrap().is_some());
    }
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
    let out = run_nodes(
        &store,
        2,
        &[1],
        |_| config_with_timeout(T_MS),
        |_| Duration::ZERO,
    );
    assert_eq!(malformed_key(&out[0].1), "distprof/round/0");
    assert!(
        out[0].2 < Duration::from_millis(500),
        "garbage is reported at once, took {:?}",
        out[0].2
    );
    let text = out[0].1.as_ref().unwrap_err().to_string();
    assert!(
        text.contains("`distprof/round/0`") && text.contains("{not json"),
        "{text}"
    );
}

#[test]
fn garbage_join_is_an_error_naming_the_key_at_the_master() {
    let store = Arc::new(MemoryStore::new());
    let faker = {
        let store = store.clone();
        thread::spawn(move || {
            let ann = store.get(&round_key(0), Duration::from_secs(5)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&ann).unwrap();
            let sid = v["session_id"].as_str().unwrap().to_string();
            store.set(&join_key(&sid, 1), "\u{0}\u{1}garbage").unwrap();
            sid
        })
    };
    let out = run_nodes(
        &store,
        2,
        &[0],
        |_| config_with_timeout(T_MS),
        |_| Duration::ZERO,
    );
    let sid = faker.join().unwrap();
    assert_eq!(malformed_key(&out[0].1), format!("distprof/s/{sid}/node/1"));
    // The master told everyone.
    let abort = store.try_get(&context_key(&sid)).unwrap().unwrap();
    assert!(
        abort.contains("abort") && abort.contains("node 1"),
        "{abort}"
    );
}

#[test]
fn garbage_context_is_an_error_naming_its_key() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(T_MS);
    let sid = "fedcba9876543210fedcba9876543210";
    store
        .set(&round_key(0), &announcement(sid, 2, &config))
        .unwrap();
    let writer = {
        let store = store.clone();
        thread::spawn(move || {
            store
                .get(&join_key(sid, 1), Duration::from_secs(5))
                .unwrap();
            store
                .set(&context_key(sid), r#"{"ok": {"nonces": "x"}}"#)
                .unwrap();
        })
    };
    let out = run_nodes(&store, 2, &[1], |_| config.clone(), |_| Duration::ZERO);
    writer.join().unwrap();
    assert_eq!(malformed_key(&out[0].1), context_key(sid));
}

#[test]
fn a_restarted_job_on_a_reused_store_gets_a_new_session() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let all = [0, 1, 2];
    let first = assert_agree(
        &run_nodes(&store, 3, &all, |_| config.clone(), |_| Duration::ZERO),
        3,
        &config,
    );
    // Second run: workers start well before the master, with the old context in the store.
    let second = assert_agree(
        &run_nodes(
            &store,
            3,
            &all,
            |_| config.clone(),
            |i| {
                if i == 0 {
                    Duration::from_millis(300)
                } else {
                    Duration::ZERO
                }
            },
        ),
        3,
        &config,
    );
    assert_ne!(first.session_id, second.session_id);
    assert_ne!(first.session_token, second.session_token);
    assert!(
        store.try_get(&round_key(1)).unwrap().is_some()
            && store.try_get(&round_key(2)).unwrap().is_none()
    );
}

#[test]
fn workers_never_adopt_a_finished_run_and_time_out_without_a_new_master() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let first = assert_agree(
        &run_nodes(
            &store,
            3,
            &[0, 1, 2],
            |_| config.clone(),
            |_| Duration::ZERO,
        ),
        3,
        &config,
    );
    let out = run_nodes(
        &store,
        3,
        &[1, 2],
        |_| config_with_timeout(T_MS),
        |_| Duration::ZERO,
    );
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        match r {
            Err(RendezvousError::NoSession { detail, .. }) => {
                assert!(detail.contains("finished runs"), "{detail}")
            }
            other => panic!(
                "node {i} adopted stale state: {other:?} (first session {})",
                first.session_id
            ),
        }
    }
}

#[test]
fn a_round_left_open_by_a_dead_master_is_skipped() {
    let store = Arc::new(MemoryStore::new());
    let config = config_with_timeout(10_000);
    let dead = "00000000000000000000000000000001";
    store
        .set(&round_key(0), &announcement(dead, 3, &config))
        .unwrap();
    // Workers first: they join the dead round, then move when the live master opens round 1.
    let out = run_nodes(
        &store,
        3,
        &[0, 1, 2],
        |_| config.clone(),
        |i| {
            if i == 0 {
                Duration::from_millis(300)
            } else {
                Duration::ZERO
            }
        },
    );
    let ctx = assert_agree(&out, 3, &config);
    assert_ne!(ctx.session_id, dead);
    assert!(out
        .iter()
        .all(|(_, _, took)| *took < Duration::from_secs(5)));
}

#[test]
fn a_mismatched_config_is_named_by_field_and_aborts_everyone() {
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(
        &store,
        3,
        &[0, 1, 2],
        |i| {
            if i == 2 {
                Config {
                    probe_out_degree: 3,
                    ..config_with_timeout(T_MS)
                }
            } else {
                config_with_timeout(T_MS)
            }
        },
        |_| Duration::ZERO,
    );
    for (i, r, took) in &out {
        assert!(within_timeout(*took), "node {i} took {took:?}");
        match (i, r) {
            (
                2,
                Err(RendezvousError::ConfigMismatch {
                    node: 2, fields, ..
                }),
            ) => {
                assert_eq!(
                    fields,
                    &vec!["probe_out_degree (master 8, this node 3)".to_string()]
                )
            }
            (0 | 1, Err(RendezvousError::Aborted { reason, .. })) => {
                assert!(
                    reason.contains("node 2") && reason.contains("probe_out_degree"),
                    "{reason}"
                )
            }
            _ => panic!("node {i}: unexpected {r:?}"),
        }
    }
    // Node-local fields may differ freely.
    let store = Arc::new(MemoryStore::new());
    let out = run_nodes(
        &store,
        2,
        &[0, 1],
        |i| Config {
            interface: format!("eth{i}"),
            probe_port: 9000 + i as u16,
            ..config_with_timeout(5_000)
        },
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
            thread::spawn(move || {
                rendezvous(
                    store.as_ref(),
                    i,
                    n,
                    &config_with_timeout(T_MS),
                    addr_of(i),
                    "h",
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        results[2],
        Err(RendezvousError::NodeCountMismatch {
            node: 2,
            ours: 4,
            master: 3
        })
    );
    assert!(
        matches!(&results[0], Err(RendezvousError::Aborted { reason, .. }) if reason.contains("node 2")),
        "{:?}",
        results[0]
    );
}

#[test]
fn local_runs_get_one_context_per_node_in_order() {
    let addrs: Vec<SocketAddr> = (0..5).map(addr_of).collect();
    let config = Config {
        probe_out_degree: 2,
        ..Config::default()
    };
    let ctxs = rendezvous_local(&config, &addrs, "here").unwrap();
    assert_eq!(ctxs.len(), 5);
    assert!(ctxs.iter().all(|c| c == &ctxs[0]));
    assert_eq!(
        ctxs[0]
            .nodes
            .iter()
            .map(|n| n.probe_addr)
            .collect::<Vec<_>>(),
        addrs
    );
    assert_eq!(
        ctxs[0].out_edges,
        build_probe_graph(5, 2, config.graph_seed)
    );
    let bad = Config {
        reference_node: 9,
        ..Config::default()
    };
    assert!(matches!(
        rendezvous_local(&bad, &addrs, "here"),
        Err(RendezvousError::InvalidArgument(_))
    ));
}
