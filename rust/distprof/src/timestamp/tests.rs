//! Tests of the timestamp modes, over real loopback sockets.

use super::*;

fn pair(mode: TimestampMode) -> (StampedSocket, StampedSocket) {
    let a = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), mode).unwrap();
    let b = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), mode).unwrap();
    (a, b)
}

fn exchange(mode: TimestampMode, expect: StampMode) {
    let (mut a, mut b) = pair(mode);
    assert_eq!(a.mode(), expect);
    let to = b.local_addr().unwrap();
    let mut sent = Vec::new();
    for i in 0..50u8 {
        let before = crate::clock::realtime_ns();
        let id = a.send_to(&[i; 48], to).unwrap();
        assert_eq!(id, i as u32);
        sent.push(before);
    }
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 64];
    while got.len() < 50 && std::time::Instant::now() < deadline {
        b.wait(Duration::from_millis(10)).unwrap();
        while let Some(r) = b.try_recv(&mut buf).unwrap() {
            assert_eq!(r.from, a.local_addr().unwrap());
            got.push((buf[0], r.rx_real_ns));
        }
    }
    assert_eq!(got.len(), 50);
    let mut stamps = Vec::new();
    while stamps.len() < 50 && std::time::Instant::now() < deadline {
        a.drain_tx_stamps(&mut stamps);
        std::thread::sleep(Duration::from_millis(1));
    }
    stamps.sort();
    assert_eq!(stamps.iter().map(|s| s.0).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
    for (i, (id, tx)) in stamps.iter().enumerate() {
        let (_, rx) = got.iter().find(|g| g.0 as usize == i).unwrap();
        // Transmit stamp after the user-space time before the send, receive after transmit.
        assert!(*tx >= sent[i], "id {id}");
        assert!(rx >= tx, "id {id}: rx {rx} < tx {tx}");
        assert!(rx - tx < 50_000_000);
    }
    assert_eq!(a.stats.tx_unmatched, 0);
    assert_eq!(b.stats.rx_missing_stamp, 0);
}

/// The batched paths (`send_batch`, `recv_batch`, the batched error-queue read) over
/// more datagrams than one batch holds: every id once, every stamp in order.
fn exchange_batched(mode: TimestampMode) {
    let (mut a, mut b) = pair(mode);
    let to = b.local_addr().unwrap();
    let n = 3 * RECV_BATCH + 5;
    let pkts: Vec<([u8; PACKET_LEN], SocketAddr)> = (0..n).map(|i| ([i as u8; PACKET_LEN], to)).collect();
    let before = crate::clock::realtime_ns();
    let mut ids = Vec::new();
    a.send_batch(&pkts, &mut ids);
    assert_eq!(ids, (0..n as u32).map(Some).collect::<Vec<_>>());
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    while got.len() < n && std::time::Instant::now() < deadline {
        b.wait(Duration::from_millis(10)).unwrap();
        let k = b.recv_batch().unwrap();
        for i in 0..k {
            let (bytes, r) = b.received(i).unwrap();
            assert_eq!((bytes.len(), r.len, r.from), (PACKET_LEN, PACKET_LEN, a.local_addr().unwrap()));
            got.push((bytes[0], r.rx_real_ns));
        }
    }
    assert_eq!(got.iter().map(|g| g.0 as usize).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
    let mut stamps = Vec::new();
    while stamps.len() < n && std::time::Instant::now() < deadline {
        a.drain_tx_stamps(&mut stamps);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(stamps.iter().map(|s| s.0).collect::<Vec<_>>(), (0..n as u32).collect::<Vec<_>>());
    for (i, &(_, tx)) in stamps.iter().enumerate() {
        assert!(tx >= before && got[i].1 >= tx, "datagram {i}: tx {tx}, rx {}", got[i].1);
    }
    assert_eq!(a.stats.tx_unmatched, 0);
    assert_eq!(b.stats.rx_missing_stamp, 0);
}

#[test]
fn batched_kernel_stamps_match_every_send_by_id() {
    exchange_batched(TimestampMode::Kernel);
}

#[test]
fn batched_user_stamps_work_the_same_way() {
    exchange_batched(TimestampMode::User);
}

#[test]
fn oversized_datagram_shows_its_wrong_length() {
    let (a, mut b) = pair(TimestampMode::Kernel);
    a.sock.send_to(&[7u8; 1000], b.local_addr().unwrap()).unwrap();
    b.wait(Duration::from_secs(2)).unwrap();
    assert_eq!(b.recv_batch().unwrap(), 1);
    let (bytes, r) = b.received(0).unwrap();
    assert_eq!((bytes.len(), r.len), (SLOT_LEN, SLOT_LEN));
    assert_ne!(r.len, PACKET_LEN);
}

#[test]
fn kernel_stamps_match_every_send_by_id() {
    exchange(TimestampMode::Kernel, StampMode::Kernel);
}

#[test]
fn auto_falls_back_to_kernel_on_loopback() {
    let (a, _) = pair(TimestampMode::Auto);
    assert_eq!(a.mode(), StampMode::Kernel);
    assert!(a.hardware_note.contains("SIOCSHWTSTAMP on `lo`"), "{}", a.hardware_note);
}

#[test]
fn hardware_request_on_loopback_is_a_clear_error() {
    let e = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), TimestampMode::Hardware)
        .err()
        .unwrap();
    assert!(e.to_string().contains("`auto` or `kernel`"), "{e}");
}

#[test]
fn user_stamps_work_the_same_way() {
    exchange(TimestampMode::User, StampMode::User);
}
