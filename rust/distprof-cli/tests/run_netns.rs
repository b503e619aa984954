//! Two hosts as network namespaces joined by a veth pair: `distprof run` discovers its
//! probe address (from NCCL_SOCKET_IFNAME on one host, from the default route on the
//! other) and both agree over the TCP store served across the link. Needs root and
//! iproute2 (both present on this project's machines).

use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_distprof");

fn ip(args: &[&str]) -> Output {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run `ip` (iproute2)")
}

fn ip_ok(args: &[&str]) {
    let out = ip(args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deletes the namespaces (and with them the veth ends) when the test ends, pass or fail.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[test]
fn two_namespaced_hosts_discover_their_addresses_and_agree() {
    let tag = std::process::id() % 100_000;
    let (ns_a, ns_b) = (format!("dprdv-a-{tag}"), format!("dprdv-b-{tag}"));
    let (if_a, if_b) = (format!("dprA{tag}"), format!("dprB{tag}"));
    for ns in [&ns_a, &ns_b] {
        let _ = ip(&["netns", "del", ns]);
    }
    ip_ok(&["netns", "add", &ns_a]);
    let _guard = Namespaces(vec![ns_a.clone(), ns_b.clone()]);
    ip_ok(&["netns", "add", &ns_b]);
    ip_ok(&["link", "add", &if_a, "type", "veth", "peer", "name", &if_b]);
    ip_ok(&["link", "set", &if_a, "netns", &ns_a]);
    ip_ok(&["link", "set", &if_b, "netns", &ns_b]);
    for (ns, ifname, addr) in [
        (&ns_a, &if_a, "10.213.0.1/24"),
        (&ns_b, &if_b, "10.213.0.2/24"),
    ] {
        ip_ok(&["-n", ns, "addr", "add", addr, "dev", ifname]);
        ip_ok(&["-n", ns, "link", "set", ifname, "up"]);
        ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
    }
    ip_ok(&["-n", &ns_b, "route", "add", "default", "via", "10.213.0.1"]);

    let run = |ns: &str, rank: &str, nccl: Option<&str>| {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns", "exec", ns, BIN, "run", "--rank", rank, "--nodes", "2",
        ])
        .args([
            "--rendezvous",
            "10.213.0.1:29611",
            "--rendezvous-only",
            "--rendezvous-timeout-ms",
            "15000",
        ])
        .env("NO_COLOR", "1")
        .env_remove("NCCL_SOCKET_IFNAME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for v in [
            "RANK",
            "WORLD_SIZE",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "OMPI_COMM_WORLD_RANK",
            "PJRT_PROCESS_INDEX",
        ] {
            cmd.env_remove(v);
        }
        if let Some(spec) = nccl {
            cmd.env("NCCL_SOCKET_IFNAME", spec);
        }
        let child = cmd.spawn().expect("spawn distprof in a namespace");
        // Collected on a thread so that both hosts run at once. Bounded: each process
        // gives up after its 15 s rendezvous timeout.
        std::thread::spawn(move || child.wait_with_output().expect("wait for distprof"))
    };
    let b = run(&ns_b, "1", None);
    let a = run(&ns_a, "0", Some("^lo,docker"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    for (who, out) in [("rank 0", &a), ("rank 1", &b)] {
        assert!(
            out.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (a_err, b_err) = (
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr),
    );
    assert!(
        a_err.contains(&format!(
            "probe address 10.213.0.1:0 on {if_a} (from NCCL_SOCKET_IFNAME)"
        )),
        "{a_err}"
    );
    assert!(
        b_err.contains(&format!(
            "probe address 10.213.0.2:0 on {if_b} (from default route)"
        )),
        "{b_err}"
    );
    let line = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let (la, lb) = (line(&a), line(&b));
    assert!(
        la.starts_with("node 0/2: context ") && lb.starts_with("node 1/2: context "),
        "{la} / {lb}"
    );
    assert_eq!(
        la.split_once(": ").unwrap().1,
        lb.split_once(": ").unwrap().1
    );
}
