//! The server spoken to frame by frame over real loopback sockets, without the client's
//! retries: what it admits, what it refuses and counts, what it answers, and that one bad
//! peer touches no other. (Rendezvous over the store: rust/distprof/tests/rendezvous_tcp.rs.)
use super::*;
use crate::kv::tcp::REFUSAL_LOG_INTERVAL;

/// A raw connection with a generous read timeout: a test that waits on a reply that
/// never comes fails instead of hanging.
fn connect(server: &TcpStoreServer) -> TcpStream {
    let c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

fn ask(c: &mut TcpStream, req: Request) -> Response {
    frame::write_request(c, &req).unwrap();
    frame::read_response(c).unwrap()
}

fn hello(secret: &str) -> Request {
    Request::Hello { version: frame::VERSION, secret: secret.into() }
}

fn server(secret: Option<&str>) -> TcpStoreServer {
    TcpStoreServer::bind_with("127.0.0.1:0".parse().unwrap(), ServerOptions { secret: secret.map(str::to_string), ..ServerOptions::default() }).unwrap()
}

fn error_text(r: Response) -> String {
    match r {
        Response::Error(m) => m,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_request_before_the_hello_is_refused_and_counted() {
    let s = server(None);
    let mut c = connect(&s);
    let m = error_text(ask(&mut c, Request::TryGet { key: "k".into() }));
    assert_eq!(m, "request before handshake");
    assert_eq!((s.stats().refused_hello, s.stats().greeted), (1, 0));
    assert_eq!(s.connection_count(), 0);
}

#[test]
fn a_wrong_secret_or_version_is_refused_with_the_fix_and_the_right_one_admitted() {
    let s = server(Some("s3cret"));
    let m = error_text(ask(&mut connect(&s), hello("s3creT")));
    assert!(m.contains("DISTPROF_STORE_SECRET"), "{m}");
    let m = error_text(ask(&mut connect(&s), hello("")));
    assert!(m.contains("wrong store secret"), "{m}");
    let m = error_text(ask(&mut connect(&s), Request::Hello { version: frame::VERSION + 1, secret: "s3cret".into() }));
    assert!(m.contains(&format!("server speaks {}", frame::VERSION)), "{m}");
    let mut c = connect(&s);
    assert_eq!(ask(&mut c, hello("s3cret")), Response::Ok);
    assert_eq!((s.stats().refused_hello, s.stats().greeted), (3, 1));
    assert_eq!(s.connection_count(), 1);
}

#[test]
fn set_try_get_and_blocking_get_answer_from_one_store() {
    let s = server(None);
    let (mut a, mut b) = (connect(&s), connect(&s));
    assert_eq!(ask(&mut a, hello("")), Response::Ok);
    assert_eq!(ask(&mut b, hello("")), Response::Ok);
    assert_eq!(ask(&mut a, Request::Set { key: "k".into(), value: "v1".into() }), Response::Ok);
    assert_eq!(ask(&mut b, Request::TryGet { key: "k".into() }), Response::Value("v1".into()));
    assert_eq!(ask(&mut b, Request::TryGet { key: "absent".into() }), Response::NotFound);
    assert_eq!(ask(&mut b, Request::Get { key: "absent".into(), timeout_ms: 30 }), Response::Timeout);
    // A GET waits on the server for a SET from another connection.
    frame::write_request(&mut b, &Request::Get { key: "later".into(), timeout_ms: 15_000 }).unwrap();
    assert_eq!(ask(&mut a, Request::Set { key: "later".into(), value: "v2".into() }), Response::Ok);
    assert_eq!(frame::read_response(&mut b).unwrap(), Response::Value("v2".into()));
    // The hosting process sees the same map.
    assert_eq!(s.store().try_get("later").unwrap(), Some("v2".into()));
}

#[test]
fn a_malformed_frame_closes_only_its_own_connection() {
    let s = server(None);
    let mut good = connect(&s);
    assert_eq!(ask(&mut good, hello("")), Response::Ok);
    let mut bad = connect(&s);
    assert_eq!(ask(&mut bad, hello("")), Response::Ok);
    // A frame of 3 bytes holding an unknown opcode.
    std::io::Write::write_all(&mut bad, &[3, 0, 0, 0, 0x7f, 0, 0]).unwrap();
    let m = error_text(frame::read_response(&mut bad).unwrap());
    assert!(m.starts_with("bad frame"), "{m}");
    assert_eq!(bad.read(&mut [0u8; 1]).unwrap_or(0), 0, "the bad connection is closed");
    assert_eq!(ask(&mut good, Request::Set { key: "k".into(), value: "v".into() }), Response::Ok);
}

#[test]
fn silent_connections_past_the_per_address_limit_evict_the_oldest_not_the_client() {
    let s = server(None);
    let silent: Vec<TcpStream> = (0..=MAX_PENDING_PER_ADDRESS).map(|_| connect(&s)).collect();
    // A genuine client still gets in; the flood only displaced its own oldest.
    let mut c = connect(&s);
    assert_eq!(ask(&mut c, hello("")), Response::Ok);
    let mut first = &silent[0];
    assert_eq!(first.read(&mut [0u8; 1]).unwrap_or(0), 0, "the oldest silent connection is closed");
    // 257 silent ones and the client: two over the limit of 256 from one address, so
    // two are evicted (or, on a machine so loaded that a silent one reached its
    // HANDSHAKE_TIMEOUT first, closed for that instead).
    let closed = |s: &TcpStoreServer| s.stats().evicted_pending + s.stats().handshake_timeouts;
    let deadline = Instant::now() + Duration::from_secs(10);
    while closed(&s) < 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(s.stats().evicted_pending >= 1, "{:?}", s.stats());
    assert_eq!(closed(&s), 2, "{:?}", s.stats());
    assert_eq!(s.stats().greeted, 1);
}

#[test]
fn shutdown_ends_a_waiting_get_and_closes_every_connection() {
    let mut s = server(None);
    let mut c = connect(&s);
    assert_eq!(ask(&mut c, hello("")), Response::Ok);
    frame::write_request(&mut c, &Request::Get { key: "never".into(), timeout_ms: 600_000 }).unwrap();
    // Let the GET reach the server before it stops.
    thread::sleep(Duration::from_millis(100));
    s.shutdown();
    match frame::read_response(&mut c) {
        Ok(Response::Error(m)) => assert_eq!(m, "store shutting down"),
        Ok(other) => panic!("unexpected {other:?}"),
        // Closed before the reply left: the client sees the store go away.
        Err(FrameError::Io(e)) => assert!(!timed_out(&e), "the GET was still waiting: {e}"),
        Err(e) => panic!("{e}"),
    }
    assert!(TcpStream::connect(s.local_addr()).and_then(|mut c| c.read(&mut [0u8; 1])).map_or(true, |n| n == 0));
}

/// A raw connection from a chosen loopback address (any of 127.0.0.0/8 is this host).
fn connect_from(server: &TcpStoreServer, from: [u8; 4]) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    sock.connect(&server.local_addr().into()).unwrap();
    let c: TcpStream = sock.into();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

fn small_server(max_connections: usize, secret: Option<&str>) -> TcpStoreServer {
    let options = ServerOptions { secret: secret.map(str::to_string), max_connections };
    TcpStoreServer::bind_with("127.0.0.1:0".parse().unwrap(), options).unwrap()
}

/// A full server of greeted connections from two flooding addresses still admits a
/// host that holds fewer: it closes the heaviest address's oldest, and the flood's own
/// new connections are refused, since they hold no less than the heaviest.
#[test]
fn a_full_server_admits_an_address_that_holds_less_than_its_share() {
    let s = small_server(20, None);
    let mut flood = Vec::new();
    for i in 0..20 {
        let mut c = connect_from(&s, [127, 0, 0, 2 + (i % 2) as u8]);
        assert_eq!(ask(&mut c, hello("")), Response::Ok, "flood connection {i}");
        flood.push(c);
    }
    assert_eq!(s.connection_count(), 20);
    // The flood's next connection finds the server full and its address at its share.
    let mut more = connect_from(&s, [127, 0, 0, 2]);
    assert!(matches!(frame::read_response(&mut more), Ok(Response::Busy(ref m)) if m.contains("server full")));
    // A rank's host with none gets in, three times: each takes one of the flood's.
    let mut ranks = Vec::new();
    for _ in 0..3 {
        let mut c = connect_from(&s, [127, 0, 0, 1]);
        assert_eq!(ask(&mut c, hello("")), Response::Ok);
        assert_eq!(ask(&mut c, Request::Set { key: "k".into(), value: "v".into() }), Response::Ok);
        ranks.push(c);
    }
    assert_eq!(s.stats().evicted_greeted, 3, "{:?}", s.stats());
    assert_eq!(s.stats().refused_busy, 1, "{:?}", s.stats());
    assert_eq!(flood[0].read(&mut [0u8; 1]).unwrap_or(0), 0, "the oldest of the flood was closed");
    // The ranks are never the heaviest address, so the flood cannot take their places.
    let mut again = connect_from(&s, [127, 0, 0, 3]);
    assert!(matches!(frame::read_response(&mut again), Ok(Response::Busy(_))));
    for c in &mut ranks {
        assert_eq!(ask(c, Request::TryGet { key: "k".into() }), Response::Value("v".into()));
    }
}

/// 300 HELLOs with a wrong secret within a second are all refused and counted, and
/// logged as at most two summary lines (one at once, one for the rest), not 300.
#[test]
fn refusals_are_counted_and_summarized_not_logged_one_by_one() {
    let mut s = small_server(MAX_CONNECTIONS, Some("s3cret"));
    let start = Instant::now();
    for _ in 0..300 {
        let m = error_text(ask(&mut connect(&s), hello("guess")));
        assert!(m.contains("wrong store secret"), "{m}");
    }
    let took = start.elapsed();
    assert_eq!(s.stats().refused_hello, 300);
    // One line at the first refusal, then at most one per interval while it lasted.
    let allowed = 1 + (took.as_secs_f64() / REFUSAL_LOG_INTERVAL.as_secs_f64()).ceil() as u64;
    assert!(s.stats().summary_lines <= allowed, "{} lines in {took:?}", s.stats().summary_lines);
    // The rest is logged when the server stops: no refusal goes unreported.
    s.shutdown();
    assert!(s.stats().summary_lines >= 1 && s.stats().summary_lines <= allowed + 1, "{:?}", s.stats());
}

#[test]
fn secrets_compare_whole() {
    assert!(same_secret("abc", "abc"));
    assert!(!same_secret("abc", "abd"));
    assert!(!same_secret("abc", "ab"));
    assert!(same_secret("", ""));
}
