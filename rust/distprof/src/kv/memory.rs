//! An in-memory key-value store: one process, many threads.
//!
//! Used by tests and benchmarks (threads as nodes) and as the backing map of the TCP
//! store's server. A blocking `get` waits on a condition variable of its own key, so a
//! `set` wakes only the waiters of that key: with 1024 nodes waiting on different keys a
//! set does not stampede every thread.

use super::{check_value_size, KvError, KvStore};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    values: HashMap<String, String>,
    /// Condition variables of keys someone is waiting for; removed when the key is set.
    waiters: HashMap<String, Arc<Condvar>>,
}

/// A thread-safe in-memory store. Clone the `Arc` to share it between nodes.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys currently stored.
    pub fn len(&self) -> usize {
        self.lock().values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated (every
        // mutation is a single insert/remove), so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl KvStore for MemoryStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(value) = state.values.get(key) {
                return Ok(value.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(KvError::Timeout {
                    key: key.to_string(),
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
            let condvar = state
                .waiters
                .entry(key.to_string())
                .or_insert_with(|| Arc::new(Condvar::new()))
                .clone();
            state = match condvar.wait_timeout(state, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        Ok(self.lock().values.get(key).cloned())
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        check_value_size(key, value.len())?;
        let mut state = self.lock();
        state.values.insert(key.to_string(), value.to_string());
        if let Some(condvar) = state.waiters.remove(key) {
            condvar.notify_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MAX_VALUE_BYTES;
    use std::thread;

    #[test]
    fn get_returns_a_value_set_later_by_another_thread() {
        let store = Arc::new(MemoryStore::new());
        let writer = {
            let store = store.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                store.set("a", "1").unwrap();
            })
        };
        let start = Instant::now();
        assert_eq!(store.get("a", Duration::from_secs(5)).unwrap(), "1");
        let waited = start.elapsed();
        writer.join().unwrap();
        assert!(
            waited >= Duration::from_millis(40),
            "returned before the set: {waited:?}"
        );
        assert!(waited < Duration::from_secs(2), "woke late: {waited:?}");
    }

    #[test]
    fn get_times_out_naming_the_key() {
        let store = MemoryStore::new();
        let start = Instant::now();
        let err = store
            .get("missing", Duration::from_millis(100))
            .unwrap_err();
        let elapsed = start.elapsed();
        assert_eq!(
            err,
            KvError::Timeout {
                key: "missing".into(),
                timeout_ms: 100
            }
        );
        assert!(
            elapsed >= Duration::from_millis(100) && elapsed < Duration::from_secs(2),
            "{elapsed:?}"
        );
    }

    #[test]
    fn try_get_and_overwrite() {
        let store = MemoryStore::new();
        assert_eq!(store.try_get("k").unwrap(), None);
        store.set("k", "v1").unwrap();
        store.set("k", "v2").unwrap();
        assert_eq!(store.try_get("k").unwrap().as_deref(), Some("v2"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn oversized_value_is_refused_naming_the_key() {
        let store = MemoryStore::new();
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        let err = store.set("big", &big).unwrap_err();
        assert_eq!(
            err,
            KvError::TooLarge {
                key: "big".into(),
                len: MAX_VALUE_BYTES + 1,
                limit: MAX_VALUE_BYTES
            }
        );
        assert_eq!(store.try_get("big").unwrap(), None);
    }

    #[test]
    fn many_waiters_on_distinct_keys_all_wake() {
        let store = Arc::new(MemoryStore::new());
        let readers: Vec<_> = (0..32)
            .map(|i| {
                let store = store.clone();
                thread::spawn(move || {
                    store
                        .get(&format!("k{i}"), Duration::from_secs(10))
                        .unwrap()
                })
            })
            .collect();
        for i in 0..32 {
            store.set(&format!("k{i}"), &i.to_string()).unwrap();
        }
        for (i, r) in readers.into_iter().enumerate() {
            assert_eq!(r.join().unwrap(), i.to_string());
        }
    }
}
