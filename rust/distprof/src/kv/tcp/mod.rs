//! A TCP key-value store for standalone runs across hosts: rank 0 serves it, every node
//! (rank 0 included, or rank 0 directly on the served map) is a client. This is the model
//! of PyTorch's c10d `TCPStore` that torchrun users know: one address, known to all.

mod client;
// Public for the fuzz entry points (`distprof_testkit::fuzz::kv_frame`); not an API.
#[doc(hidden)]
pub mod frame;
mod refusals;
mod server;

pub use client::{TcpStore, TcpStoreOptions};
pub use frame::MAX_SECRET_BYTES;
pub use refusals::REFUSAL_LOG_INTERVAL;
pub use server::{ServerOptions, ServerStats, TcpStoreServer, MAX_CONNECTIONS};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvError, KvStore, MAX_VALUE_BYTES};
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    fn quick() -> TcpStoreOptions {
        TcpStoreOptions {
            op_timeout: Duration::from_millis(800),
            connect_timeout: Duration::from_millis(200),
            reconnect_timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn set_get_try_get_over_loopback() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let a = TcpStore::new(server.local_addr(), quick());
        let b = TcpStore::new(server.local_addr(), quick());
        assert_eq!(a.try_get("k").unwrap(), None);
        let reader = thread::spawn(move || b.get("k", Duration::from_secs(5)));
        thread::sleep(Duration::from_millis(50));
        a.set("k", "hello ✓").unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), "hello ✓");
        assert_eq!(a.try_get("k").unwrap().as_deref(), Some("hello ✓"));
        // The host's direct view is the same map.
        assert_eq!(
            server.store().try_get("k").unwrap().as_deref(),
            Some("hello ✓")
        );
    }

    #[test]
    fn get_times_out_on_the_server_and_names_the_key() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let c = TcpStore::new(server.local_addr(), quick());
        let start = Instant::now();
        let err = c.get("never", Duration::from_millis(150)).unwrap_err();
        assert_eq!(
            err,
            KvError::Timeout {
                key: "never".into(),
                timeout_ms: 150
            }
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn large_values_pass_and_oversized_values_are_refused() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let c = TcpStore::new(
            server.local_addr(),
            TcpStoreOptions {
                op_timeout: Duration::from_secs(10),
                ..quick()
            },
        );
        let big = "y".repeat(MAX_VALUE_BYTES);
        c.set("big", &big).unwrap();
        assert_eq!(c.get("big", Duration::from_secs(5)).unwrap().len(), MAX_VALUE_BYTES);
        let err = c.set("huge", &"z".repeat(MAX_VALUE_BYTES + 1)).unwrap_err();
        assert!(
            matches!(err, KvError::TooLarge { ref key, .. } if key == "huge"),
            "{err}"
        );
    }

    #[test]
    fn client_started_before_the_server_connects_when_it_comes_up() {
        // Reserve a port, release it, and start the server on it a little later.
        let port = TcpListener::bind(loopback())
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let c = TcpStore::new(
            addr,
            TcpStoreOptions {
                op_timeout: Duration::from_secs(5),
                ..quick()
            },
        );
        let server = thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let s = TcpStoreServer::bind(addr).unwrap();
            s.store().set("ready", "1").unwrap();
            thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        assert_eq!(c.get("ready", Duration::from_secs(5)).unwrap(), "1");
        server.join().unwrap();
    }

    #[test]
    fn server_that_goes_away_is_unavailable_naming_address_and_key_within_timeout() {
        let mut server = TcpStoreServer::bind(loopback()).unwrap();
        let addr = server.local_addr();
        let c = Arc::new(TcpStore::new(addr, quick()));
        c.set("x", "1").unwrap();
        let waiter = {
            let c = c.clone();
            thread::spawn(move || {
                let start = Instant::now();
                (c.get("never", Duration::from_millis(1500)), start.elapsed())
            })
        };
        thread::sleep(Duration::from_millis(100));
        server.shutdown();
        let (result, elapsed) = waiter.join().unwrap();
        let err = result.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, KvError::Unavailable(_)), "{err}");
        assert!(
            text.contains(&addr.to_string()) && text.contains("`never`"),
            "{text}"
        );
        // Bounded by the GET timeout plus the reply slack.
        assert!(
            elapsed < Duration::from_millis(1500) + Duration::from_secs(3),
            "{elapsed:?}"
        );
        // A later call fails within the operation timeout too.
        let start = Instant::now();
        assert!(matches!(c.try_get("x"), Err(KvError::Unavailable(_))));
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn garbage_from_a_fake_server_is_malformed_naming_peer_and_key() {
        let listener = TcpListener::bind(loopback()).unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
            thread::sleep(Duration::from_millis(200));
        });
        let c = TcpStore::new(addr, quick());
        let err = c.try_get("distprof/k").unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, KvError::Malformed { ref key, .. } if key == "distprof/k"),
            "{text}"
        );
        assert!(
            text.contains(&addr.to_string()) && text.contains("frame length"),
            "{text}"
        );
        fake.join().unwrap();
    }

    #[test]
    fn garbage_sent_to_the_server_closes_only_that_connection() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let good = TcpStore::new(server.local_addr(), quick());
        good.set("k", "v").unwrap();
        let mut raw = std::net::TcpStream::connect(server.local_addr()).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        raw.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
        // The server answers with an error frame and closes.
        let mut reply = Vec::new();
        let _ = raw.read_to_end(&mut reply);
        assert!(
            String::from_utf8_lossy(&reply).contains("bad frame"),
            "{reply:?}"
        );
        assert_eq!(good.try_get("k").unwrap().as_deref(), Some("v"));
    }

    /// 1,200 connections that never say HELLO (over twice the pending limit) do not keep a
    /// genuine client out: the newest evict the oldest and the client's HELLO gets through.
    #[test]
    fn a_flood_of_silent_connections_does_not_keep_a_client_out() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let addr = server.local_addr();
        let mut flood = Vec::new();
        for _ in 0..1_200 {
            if let Ok(c) = std::net::TcpStream::connect(addr) {
                flood.push(c);
            }
        }
        assert!(flood.len() >= 1_150, "{} connected", flood.len());
        let client = TcpStore::new(addr, TcpStoreOptions { op_timeout: Duration::from_secs(10), ..quick() });
        let start = Instant::now();
        client.set("k", "v").unwrap();
        assert_eq!(client.try_get("k").unwrap().as_deref(), Some("v"));
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        let stats = server.stats();
        assert!(stats.evicted_pending >= 1_150 - server::MAX_PENDING as u64, "{stats:?}");
        assert_eq!(server.connection_count(), 1, "only the client is greeted");
    }

    /// A peer that sends its HELLO one byte at a time (a 215-byte HELLO at 10 bytes/s) is
    /// closed at the handshake deadline, however steadily it trickles.
    #[test]
    fn a_slow_loris_is_closed_at_the_handshake_deadline() {
        let server = TcpStoreServer::bind(loopback()).unwrap();
        let mut raw = std::net::TcpStream::connect(server.local_addr()).unwrap();
        let mut hello = Vec::new();
        frame::write_request(&mut hello, &frame::Request::Hello { version: frame::VERSION, secret: "s".repeat(200) }).unwrap();
        let start = Instant::now();
        let mut closed_after = None;
        for byte in hello.iter().cycle().take(100) {
            if raw.write_all(&[*byte]).is_err() {
                closed_after = Some(start.elapsed());
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let closed_after = closed_after.expect("the server closed the connection");
        assert!(
            closed_after >= server::HANDSHAKE_TIMEOUT && closed_after < server::HANDSHAKE_TIMEOUT + Duration::from_secs(2),
            "{closed_after:?}"
        );
        assert_eq!(server.stats().handshake_timeouts, 1);
    }

    #[test]
    fn a_secret_is_required_when_the_server_has_one() {
        let server = TcpStoreServer::bind_with(loopback(), ServerOptions { secret: Some("s3cret".into()), ..ServerOptions::default() }).unwrap();
        let good = TcpStore::with_secret(server.local_addr(), quick(), "s3cret".into());
        good.set("k", "v").unwrap();
        for wrong in ["", "s3creT", "s3cret-longer"] {
            let bad = TcpStore::with_secret(server.local_addr(), quick(), wrong.into());
            let err = bad.try_get("k").unwrap_err().to_string();
            assert!(err.contains("wrong store secret"), "{wrong:?}: {err}");
        }
        assert_eq!(server.stats().refused_hello, 3);
        assert_eq!(good.try_get("k").unwrap().as_deref(), Some("v"));
    }

    /// A socket connected to itself (the TCP simultaneous open a connect to a port nobody
    /// listens on can end in) is told apart from a store, and one to a real listener is not.
    #[test]
    fn a_connection_to_itself_is_refused() {
        let port = std::net::TcpListener::bind(loopback()).unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_reuse_address(true).unwrap();
        sock.bind(&addr.into()).unwrap();
        sock.connect(&addr.into()).unwrap();
        let itself: std::net::TcpStream = sock.into();
        let err = client::refuse_self_connection(&itself).unwrap_err();
        assert!(err.contains("connected to itself") && err.contains(&addr.to_string()), "{err}");

        let server = TcpStoreServer::bind(loopback()).unwrap();
        let real = std::net::TcpStream::connect(server.local_addr()).unwrap();
        assert_eq!(client::refuse_self_connection(&real), Ok(()));
    }
}
