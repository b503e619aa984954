//! `distprof run --rendezvous-only` as separate processes on the TCP store over loopback.

use distprof_testkit::cli::{distprof, free_port};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Launcher variables a CI runner might set; cleared so tests see only their own.
const LAUNCHER_VARS: &[&str] = &[
    "PJRT_PROCESS_INDEX",
    "PJRT_NUM_PROCESSES",
    "PJRT_COORDINATOR_ADDRESS",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "NCCL_SOCKET_IFNAME",
];

struct Finished {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    took: Duration,
}

fn node(args: &[String], env: &[(&str, String)]) -> Child {
    let mut cmd = distprof();
    cmd.arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    cmd.env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn distprof")
}

fn flags(rank: u32, nodes: u32, port: u16, timeout_ms: u64) -> Vec<String> {
    [
        "--rank",
        &rank.to_string(),
        "--nodes",
        &nodes.to_string(),
        "--rendezvous",
        &format!("127.0.0.1:{port}"),
        "--bind",
        "127.0.0.1",
        "--rendezvous-only",
        "--rendezvous-timeout-ms",
        &timeout_ms.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Waits for the child, killing it at `limit` (then `status` is None).
fn finish(mut child: Child, started: Instant, limit: Duration) -> Finished {
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Finished {
        status,
        stdout,
        stderr,
        took,
    }
}

/// Parses `node r/n: context <digest> session <id>`.
fn agreed_line(out: &Finished, rank: u32, nodes: u32) -> (String, String) {
    let line = out
        .stdout
        .lines()
        .next()
        .unwrap_or_else(|| panic!("rank {rank} printed nothing; stderr: {}", out.stderr));
    let prefix = format!("node {rank}/{nodes}: context ");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("unexpected line `{line}`"));
    let (digest, session) = rest.split_once(" session ").unwrap();
    assert_eq!(digest.len(), 32, "{line}");
    assert_eq!(session.len(), 32, "{line}");
    (digest.to_string(), session.to_string())
}

#[test]
fn four_processes_print_the_same_context() {
    let port = free_port();
    let started = Instant::now();
    // Highest rank first: the others must wait for rank 0's store to come up.
    let children: Vec<(u32, Child)> = (0..4)
        .rev()
        .map(|r| (r, node(&flags(r, 4, port, 20_000), &[])))
        .collect();
    let mut seen = Vec::new();
    for (rank, child) in children {
        let out = finish(child, started, Duration::from_secs(30));
        assert!(
            out.status.map(|s| s.success()).unwrap_or(false),
            "rank {rank}: {:?}\n{}",
            out.status,
            out.stderr
        );
        seen.push(agreed_line(&out, rank, 4));
    }
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
}

#[test]
fn rank_size_and_address_come_from_the_torchrun_environment() {
    let port = free_port();
    let started = Instant::now();
    let children: Vec<(u32, Child)> = (0..2)
        .map(|r| {
            let env = [
                ("RANK", r.to_string()),
                ("WORLD_SIZE", "2".to_string()),
                ("MASTER_ADDR", "127.0.0.1".to_string()),
                ("MASTER_PORT", port.to_string()),
            ];
            (
                r,
                node(
                    &[
                        "--bind".into(),
                        "127.0.0.1".into(),
                        "--rendezvous-only".into(),
                    ],
                    &env,
                ),
            )
        })
        .collect();
    let mut seen = Vec::new();
    for (rank, child) in children {
        let out = finish(child, started, Duration::from_secs(30));
        assert!(
            out.status.map(|s| s.success()).unwrap_or(false),
            "rank {rank}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("launcher environment: torchrun"),
            "{}",
            out.stderr
        );
        seen.push(agreed_line(&out, rank, 2));
    }
    assert_eq!(seen[0], seen[1]);
}

const T_MS: u64 = 2_500;
/// Process start-up, the last poll slice and the TCP client's reply slack.
const SLACK: Duration = Duration::from_secs(4);

fn failed_within_timeout(out: &Finished, who: &str) {
    assert!(
        out.status.is_some(),
        "{who} hung and was killed after {:?}",
        out.took
    );
    assert!(
        !out.status.unwrap().success(),
        "{who} succeeded: {}",
        out.stdout
    );
    assert!(
        out.took < Duration::from_millis(T_MS) + SLACK,
        "{who} took {:?}",
        out.took
    );
}

/// The ranks that took part: succeeded within the timeout, agreed, and named `peer` in a
/// log line with `why`.
fn went_on_without(out: &Finished, rank: u32, nodes: u32, peer: u32, why: &str) {
    assert!(out.status.is_some_and(|s| s.success()), "rank {rank}: {:?} {}", out.status, out.stderr);
    assert!(out.took < Duration::from_millis(T_MS) + SLACK, "rank {rank} took {:?}", out.took);
    agreed_line(out, rank, nodes);
    assert!(
        out.stderr.contains("without peer") && out.stderr.contains(&peer.to_string()) && out.stderr.contains(why),
        "rank {rank}: {}",
        out.stderr
    );
}

#[test]
fn a_mismatched_config_file_is_named_by_field_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("odd.json");
    std::fs::write(&cfg, r#"{"probe_out_degree": 1}"#).unwrap();
    let port = free_port();
    let started = Instant::now();
    let children: Vec<(u32, Child)> = (0..3)
        .map(|r| {
            let mut f = flags(r, 3, port, T_MS);
            if r == 2 {
                f.extend(["--config".to_string(), cfg.display().to_string()]);
            }
            (r, node(&f, &[]))
        })
        .collect();
    for (rank, child) in children {
        let out = finish(child, started, Duration::from_secs(30));
        if rank == 2 {
            failed_within_timeout(&out, "rank 2");
            assert!(out.stderr.contains("probe_out_degree (master 8, this node 1)"), "{}", out.stderr);
        } else {
            went_on_without(&out, rank, 3, 2, "probe_out_degree");
        }
    }
}

#[test]
fn a_node_that_never_arrives_is_named_and_the_others_go_on() {
    let port = free_port();
    let started = Instant::now();
    let children: Vec<(u32, Child)> = [0, 1]
        .into_iter()
        .map(|r| (r, node(&flags(r, 3, port, T_MS), &[])))
        .collect();
    for (rank, child) in children {
        let out = finish(child, started, Duration::from_secs(30));
        went_on_without(&out, rank, 3, 2, "did not join");
        // They waited for node 2 until their deadline.
        assert!(out.took >= Duration::from_millis(T_MS), "rank {rank} took {:?}", out.took);
    }
}

#[test]
fn a_master_that_dies_ends_the_others_with_the_store_address() {
    let port = free_port();
    let started = Instant::now();
    // Node 2 never comes, so the master is still waiting when it is killed.
    let mut master = node(&flags(0, 3, port, 60_000), &[]);
    let others: Vec<(u32, Child)> = [1]
        .into_iter()
        .map(|r| (r, node(&flags(r, 3, port, T_MS * 4), &[])))
        .collect();
    // Let node 1 join, then kill the master.
    std::thread::sleep(Duration::from_millis(800));
    master.kill().unwrap();
    master.wait().unwrap();
    let killed_at = started.elapsed();
    for (rank, child) in others {
        let out = finish(child, started, Duration::from_secs(60));
        assert!(
            out.status.is_some() && !out.status.unwrap().success(),
            "rank {rank}: {:?}",
            out.status
        );
        // Noticed soon after the death, well before their own 10 s timeout.
        assert!(
            out.took < killed_at + SLACK,
            "rank {rank} took {:?} (master killed at {killed_at:?})",
            out.took
        );
        assert!(
            out.stderr.contains(&format!("store at 127.0.0.1:{port}")),
            "rank {rank}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_store_that_speaks_another_protocol_is_reported_not_waited_on() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let started = Instant::now();
    let out = finish(
        node(&flags(1, 2, port, 10_000), &[]),
        started,
        Duration::from_secs(30),
    );
    fake.join().unwrap();
    assert!(out.status.is_some() && !out.status.unwrap().success());
    assert!(out.took < Duration::from_secs(5), "took {:?}", out.took);
    assert!(
        out.stderr.contains("malformed") && out.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        out.stderr
    );
}

#[test]
fn flag_errors_name_the_fix() {
    let started = Instant::now();
    let cases: [(&[&str], &str); 4] = [
        (&["--rank", "0", "--nodes", "2"], "pass --rendezvous HOST:PORT"),
        (&[], "pass --rank and --nodes"),
        (&["--rank", "3", "--nodes", "2"], "rank 3 is out of range for 2 nodes"),
        (&["--rank", "0", "--nodes", "1", "--bind", "0.0.0.0"], "--bind 0.0.0.0 would publish"),
    ];
    for (args, want) in cases {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let out = finish(node(&args, &[]), started, Duration::from_secs(10));
        assert!(out.stderr.contains(want), "{args:?}: {}", out.stderr);
    }
    // A one-node run needs no store and agrees with itself.
    let out = finish(
        node(
            &[
                "--rank".into(),
                "0".into(),
                "--nodes".into(),
                "1".into(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--rendezvous-only".into(),
            ],
            &[],
        ),
        started,
        Duration::from_secs(10),
    );
    assert!(out.status.unwrap().success(), "{}", out.stderr);
    agreed_line(&out, 0, 1);
}

/// With `DISTPROF_STORE_SECRET`, ranks that share it agree; a rank with another secret is
/// refused at its HELLO and says so, naming the variable.
#[test]
fn a_store_secret_admits_ranks_that_share_it_and_names_a_mismatch() {
    let port = free_port();
    let started = Instant::now();
    let secret = |s: &str| vec![("DISTPROF_STORE_SECRET", s.to_string())];
    let children: Vec<(u32, Child)> = (0..2)
        .map(|r| (r, node(&flags(r, 2, port, 20_000), &secret("shared-secret"))))
        .collect();
    let mut seen = Vec::new();
    for (rank, child) in children {
        let out = finish(child, started, Duration::from_secs(30));
        assert!(out.status.map(|s| s.success()).unwrap_or(false), "rank {rank}: {}", out.stderr);
        seen.push(agreed_line(&out, rank, 2));
    }
    assert_eq!(seen[0], seen[1]);

    let port = free_port();
    let started = Instant::now();
    let master = node(&flags(0, 2, port, T_MS), &secret("right"));
    let intruder = node(&flags(1, 2, port, T_MS), &secret("wrong"));
    let out = finish(intruder, started, Duration::from_millis(T_MS) + SLACK);
    failed_within_timeout(&out, "rank 1 with the wrong secret");
    assert!(out.stderr.contains("wrong store secret") && out.stderr.contains("DISTPROF_STORE_SECRET"), "{}", out.stderr);
    let _ = finish(master, started, Duration::from_millis(T_MS) + SLACK);
}
