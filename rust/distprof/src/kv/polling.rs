//! A blocking `get` built from non-blocking calls: for host stores whose blocking call would
//! hold a lock distprof must not hold while waiting (the Python package calls JAX's client
//! with the GIL held, so it must never block inside the client).
//!
//! [`Polling`] turns a [`TryStore`] (`try_get` and `set`, each returning at once) into a
//! [`KvStore`]: `get` asks again after a pause that grows from [`FIRST_PAUSE`] to
//! [`LONGEST_PAUSE`], and waits without touching the store in between.

use super::{KvError, KvStore};
use std::time::{Duration, Instant};

/// The first pause after a miss: the keys the rendezvous waits for usually appear within
/// milliseconds once every node has started.
pub const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause: a key that appears is seen within this, and a node waiting two
/// minutes for a late peer asks 20 times a second (one small RPC each), not thousands.
pub const LONGEST_PAUSE: Duration = Duration::from_millis(50);

/// The non-blocking half of a store; both calls must return promptly.
pub trait TryStore: Send + Sync {
    /// The value of `key` if it exists now.
    fn try_get(&self, key: &str) -> Result<Option<String>, KvError>;
    fn set(&self, key: &str, value: &str) -> Result<(), KvError>;
}

/// A [`KvStore`] whose `get` polls `try_get` until the key exists or the timeout passes.
pub struct Polling<S>(pub S);

impl<S: TryStore> KvStore for Polling<S> {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let deadline = Instant::now() + timeout;
        let mut pause = FIRST_PAUSE;
        loop {
            if let Some(value) = self.0.try_get(key)? {
                return Ok(value);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(KvError::Timeout {
                    key: key.to_string(),
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        self.0.try_get(key)
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        self.0.set(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// The in-memory store seen only through its non-blocking calls, counting them.
    struct Counted {
        mem: Arc<MemoryStore>,
        calls: AtomicUsize,
    }
    impl TryStore for Counted {
        fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.mem.try_get(key)
        }
        fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
            self.mem.set(key, value)
        }
    }

    #[test]
    fn get_sees_a_key_set_later_within_the_longest_pause() {
        let mem = Arc::new(MemoryStore::new());
        let store = Polling(Counted {
            mem: Arc::clone(&mem),
            calls: AtomicUsize::new(0),
        });
        let writer = {
            let mem = Arc::clone(&mem);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                mem.set("k", "v").unwrap();
                Instant::now()
            })
        };
        let value = store.get("k", Duration::from_secs(5)).unwrap();
        let seen = Instant::now();
        let set_at = writer.join().unwrap();
        assert_eq!(value, "v");
        let lag = seen.duration_since(set_at);
        assert!(
            lag <= LONGEST_PAUSE + Duration::from_millis(30),
            "seen {lag:?} after the set"
        );
        // 1+2+4+...+32 ms, then every 50 ms: about 8 calls in 200 ms, never a busy loop.
        let calls = store.0.calls.load(Ordering::SeqCst);
        assert!((5..=20).contains(&calls), "{calls} calls");
    }

    #[test]
    fn get_times_out_by_its_deadline_naming_the_key() {
        let store = Polling(Counted {
            mem: Arc::new(MemoryStore::new()),
            calls: AtomicUsize::new(0),
        });
        let t = Instant::now();
        let err = store
            .get("missing", Duration::from_millis(120))
            .unwrap_err();
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(120) && took < Duration::from_millis(200),
            "{took:?}"
        );
        assert_eq!(
            err,
            KvError::Timeout {
                key: "missing".into(),
                timeout_ms: 120
            }
        );
    }

    /// A store whose calls fail: the first error is returned as it is, not retried.
    struct Broken;
    impl TryStore for Broken {
        fn try_get(&self, _key: &str) -> Result<Option<String>, KvError> {
            Err(KvError::Unavailable("coordinator gone".into()))
        }
        fn set(&self, _key: &str, _value: &str) -> Result<(), KvError> {
            Err(KvError::Unavailable("coordinator gone".into()))
        }
    }

    #[test]
    fn an_error_of_the_store_ends_the_get_at_once() {
        let t = Instant::now();
        let err = Polling(Broken)
            .get("k", Duration::from_secs(5))
            .unwrap_err();
        assert!(t.elapsed() < Duration::from_millis(50));
        assert_eq!(err, KvError::Unavailable("coordinator gone".into()));
    }
}
