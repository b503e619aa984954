use super::*;

fn setup(cfg: RelayConfig) -> (Relay, UdpSocket, UdpSocket) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let eps = [&a, &b]
        .iter()
        .enumerate()
        .map(|(k, s)| RelayEndpoint { node: k as u32, face: UdpSocket::bind("127.0.0.1:0").unwrap(), node_addr: s.local_addr().unwrap() })
        .collect();
    (Relay::start(eps, cfg).unwrap(), a, b)
}

#[test]
fn delays_each_direction_by_its_own_model() {
    let mut cfg = RelayConfig::clean(2_000.0);
    cfg.paths.insert((1, 0), PathModel::fixed(8_000.0));
    let (relay, a, b) = setup(cfg);
    b.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 16];
    let t = Instant::now();
    a.send_to(b"ping", relay.faces()[1]).unwrap();
    let (n, from) = b.recv_from(&mut buf).unwrap();
    let fwd = t.elapsed();
    assert_eq!((&buf[..n], from), (&b"ping"[..], relay.faces()[0]));
    let t = Instant::now();
    b.send_to(b"pong", from).unwrap();
    a.recv_from(&mut buf).unwrap();
    let rev = t.elapsed();
    // Never early; late only by scheduling (generous: the machine is shared).
    assert!(fwd >= Duration::from_millis(2) && fwd < Duration::from_millis(100), "{fwd:?}");
    assert!(rev >= Duration::from_millis(8) && rev < Duration::from_millis(100), "{rev:?}");
    let s = relay.stop();
    assert_eq!((s.received, s.forwarded, s.lost), (2, 2, 0));
}

#[test]
fn loses_and_duplicates_at_the_configured_rates() {
    let cfg = RelayConfig {
        seed: 7,
        default_path: PathModel { loss: 0.2, duplicate: 0.1, ..PathModel::fixed(100.0) },
        paths: HashMap::new(),
        blackholes: Vec::new(),
    };
    // Read while sending (a socket buffer holds only a few hundred small datagrams).
    let (delays, s) = timed_sends(setup(cfg), 1000, Duration::from_micros(100));
    let got = delays.len() as u64;
    assert_eq!(s.received, 1000);
    assert!((150..=250).contains(&s.lost), "{s:?}");
    assert!((60..=140).contains(&s.duplicated), "{s:?}");
    assert_eq!(got, 1000 - s.lost + s.duplicated);
}

#[test]
fn bad_probabilities_are_named() {
    let cfg = RelayConfig {
        seed: 1,
        default_path: PathModel { loss: 1.5, ..PathModel::fixed(1.0) },
        paths: HashMap::new(),
        blackholes: Vec::new(),
    };
    let e = Relay::start(Vec::new(), cfg).err().unwrap();
    assert!(e.contains("loss = 1.5"), "{e}");
}

/// Sends `count` datagrams from a to b through the relay, `gap` apart, each carrying
/// its send time; returns every delivered datagram's one-way delay (ns) and the relay's
/// stats once stopped.
fn timed_sends((relay, a, b): (Relay, UdpSocket, UdpSocket), count: usize, gap: Duration) -> (Vec<i64>, RelayStats) {
    b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let reader = std::thread::spawn(move || {
        let mut delays = Vec::new();
        let mut buf = [0u8; 16];
        while let Ok((n, _)) = b.recv_from(&mut buf) {
            let sent_ns = i64::from_le_bytes(buf[..n].try_into().unwrap());
            delays.push(distprof::clock::realtime_ns() - sent_ns);
        }
        delays
    });
    for _ in 0..count {
        a.send_to(&distprof::clock::realtime_ns().to_le_bytes(), relay.faces()[1]).unwrap();
        std::thread::sleep(gap);
    }
    let delays = reader.join().unwrap();
    (delays, relay.stop())
}

/// Spiked datagrams are at least `spike_us` late; the rest are not held back by it.
#[test]
fn spikes_delay_the_configured_share_by_the_spike() {
    let cfg = RelayConfig {
        seed: 3,
        default_path: PathModel { spike: 0.25, spike_us: 10_000.0, ..PathModel::fixed(200.0) },
        paths: HashMap::new(),
        blackholes: Vec::new(),
    };
    let (delays, s) = timed_sends(setup(cfg), 200, Duration::from_millis(1));
    assert_eq!(delays.len(), 200);
    // Binomial(200, 0.25): mean 50, sd 6.
    assert!((25..=75).contains(&s.spiked), "{s:?}");
    let late = delays.iter().filter(|&&d| d >= 10_000_000).count() as u64;
    // Every spiked datagram is >= 10 ms late; others only by a scheduling stall, which
    // on a loaded machine reaches up to a tenth of them. A spike that held back the
    // queue behind it would make nearly all 200 late (one every 1 ms, spikes of 10 ms).
    assert!(late >= s.spiked && late <= s.spiked + 20, "{late} late, {s:?}");
    assert!(delays.iter().all(|&d| d >= 200_000), "a datagram came early");
}

/// On an idle path each send starts within a fraction of a µs of its due time (the
/// relay wakes early and watches the clock): `distprof local` runs on the 2-core VM
/// measure p50 0.3 µs, the bound is 1 µs. The system call takes ~1 µs more to reach
/// the wire when datagrams come every few hundred µs, but 3-10 µs (p50 of this test on
/// the VM at load 2-6) when they come 2 ms apart and the kernel's paths have gone cold:
/// the bound is 20 µs. Every datagram is measured, and none leaves early.
#[test]
fn sends_start_on_time_and_every_one_is_measured() {
    let (delays, s) = timed_sends(setup(RelayConfig::clean(200.0)), 200, Duration::from_millis(2));
    assert_eq!(delays.len(), 200);
    assert!(delays.iter().all(|&d| d >= 200_000), "a datagram came early");
    let counts = (s.pickup_lateness.count(), s.send_lateness.count(), s.wire_lateness.count());
    assert_eq!(counts, (200, 200, 200), "{s:?}");
    assert!(s.pickup_while_awake.count() <= 200, "the datagrams read while polling are a part of all: {s:?}");
    let send_p50 = s.send_lateness.quantile_ns(0.5).unwrap();
    let wire_p50 = s.wire_lateness.quantile_ns(0.5).unwrap();
    assert!(send_p50 <= 1_000, "sends started late by {}", s.send_lateness.summary());
    assert!(wire_p50 <= 20_000 && wire_p50 >= send_p50, "left late by {}", s.wire_lateness.summary());
    assert!(s.spin_margin_ns >= spin_margin::MIN_NS as u64 && s.cpu_ns > 0, "{s:?}");
}

/// A blackholed node neither sends nor receives during its span, and both work after.
#[test]
fn blackhole_drops_everything_of_the_node_during_its_span_only() {
    let now = distprof::clock::realtime_ns();
    let cfg = RelayConfig {
        blackholes: vec![Blackhole { node: 1, from_real_ns: now - 1_000_000, until_real_ns: now + 400_000_000 }],
        ..RelayConfig::clean(100.0)
    };
    let (relay, a, b) = setup(cfg);
    b.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    a.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buf = [0u8; 16];
    for _ in 0..10 {
        a.send_to(b"in", relay.faces()[1]).unwrap();
        b.send_to(b"out", relay.faces()[0]).unwrap();
    }
    assert!(b.recv_from(&mut buf).is_err() && a.recv_from(&mut buf).is_err());
    while distprof::clock::realtime_ns() < now + 450_000_000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    a.send_to(b"in", relay.faces()[1]).unwrap();
    b.send_to(b"out", relay.faces()[0]).unwrap();
    assert_eq!(b.recv_from(&mut buf).unwrap().0, 2);
    assert_eq!(a.recv_from(&mut buf).unwrap().0, 3);
    // Only delivered datagrams are kept for replay.
    assert_eq!(relay.captured(1), vec![b"in".to_vec()]);
    let s = relay.stop();
    assert_eq!((s.blackholed, s.forwarded), (20, 2), "{s:?}");
}
