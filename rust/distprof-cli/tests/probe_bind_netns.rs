//! The probe socket binds the configured interface's address, not every interface: a host
//! (a network namespace) with two interfaces runs `distprof run` with `interface` naming
//! the second; the socket's local address is that interface's, and a datagram sent to
//! the probe port on the other interface never reaches the node, while one sent to the
//! chosen interface is received and counted. Needs root (CI runs as root).

use distprof_sim::netns::{is_root, veth, Netns};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PORT: u16 = 7311;

#[test]
fn probe_socket_binds_only_the_configured_interface() {
    assert!(is_root(), "this test builds network namespaces and must run as root (as CI does)");
    let tag = std::process::id() % 100_000;
    let host = Netns::create(&format!("dpbH{tag}")).unwrap();
    let peer = Netns::create(&format!("dpbP{tag}")).unwrap();
    // Two links between the hosts: 10.79.1.0/24 on `dpbm`, 10.79.2.0/24 on `dpbx`.
    veth(&host, "dpbm0", "10.79.1.1/24", &peer, "dpbm1", "10.79.1.2/24").unwrap();
    veth(&host, "dpbx0", "10.79.2.1/24", &peer, "dpbx1", "10.79.2.2/24").unwrap();

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    let config = serde_json::json!({
        "interface": "=dpbx0",
        "probe_port": PORT,
        "output_dir": dir.path(),
    });
    std::fs::write(&cfg, config.to_string()).unwrap();
    let node = Command::new("ip")
        .args(["netns", "exec", host.name(), env!("CARGO_BIN_EXE_distprof"), "run", "--rank", "0", "--nodes", "1"])
        .args(["--duration", "2.5", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .env_remove("NCCL_SOCKET_IFNAME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The kernel's view of the node's UDP sockets on the probe port.
    let mut bound = String::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let out = Command::new("ip").args(["netns", "exec", host.name(), "ss", "-H", "-u", "-l", "-n"]).output().unwrap();
        bound = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
            .filter(|a| a.ends_with(&format!(":{PORT}")))
            .collect::<Vec<_>>()
            .join(" ");
        if !bound.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(bound, format!("10.79.2.1:{PORT}"), "bound addresses on port {PORT}");

    // From the peer host: one datagram to the probe port on each interface.
    peer.run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.send_to(b"not a probe on the chosen interface", ("10.79.2.1", PORT)).unwrap();
            s.send_to(b"not a probe on the other interface", ("10.79.1.1", PORT)).unwrap();
    })
    .unwrap();
    let out = node.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = distprof::jsonl::read(&dir.path().join(distprof::jsonl::file_name(0))).unwrap();
    let dropped: u64 = f.windows.iter().flat_map(|w| w.dropped.values()).sum();
    let wrong_length: u64 = f.windows.iter().map(|w| w.dropped.get("wrong_length").copied().unwrap_or(0)).sum();
    // Only the datagram to the chosen interface reached the socket (and was dropped as
    // not a probe); the other was refused by the kernel.
    assert_eq!((dropped, wrong_length), (1, 1), "{:?}", f.windows.iter().map(|w| &w.dropped).collect::<Vec<_>>());
}
