//! An in-memory key-value store: one process, many threads.
//!
//! Used by tests and benchmarks (threads as nodes) and as the backing map of the TCP
//! store's server. A blocking `get` parks its thread in the waiter list of its own key,
//! and a `set` hands the value to each of that key's waiters and unparks them: a set wakes
//! only its own key's waiters, and they return without taking any shared lock again. (With
//! a condition variable per key, 16,384 node threads woken by one announcement queued for
//! the lock one by one, a convoy that took most of a rendezvous on two cores.) The keys are
//! spread over `SHARDS` maps, each with its own lock, so that unrelated keys do not
//! contend either.

use super::{check_value_size, KvError, KvStore};
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Independent maps the keys are spread over; more than the threads that run at once
/// on any machine this serves, few enough that `len` stays cheap.
const SHARDS: usize = 64;

/// A thread blocked in `get`: `set` fills `value` and unparks `thread`.
struct Waiter {
    value: OnceLock<String>,
    thread: Thread,
}

#[derive(Default)]
struct State {
    values: HashMap<String, String>,
    /// Threads waiting for keys not set yet; a key's list is taken by its `set`.
    waiters: HashMap<String, Vec<Arc<Waiter>>>,
}

/// A thread-safe in-memory store. Clone the `Arc` to share it between nodes.
pub struct MemoryStore {
    shards: Box<[Mutex<State>]>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore { shards: (0..SHARDS).map(|_| Mutex::default()).collect() }
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys currently stored.
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| Self::guard(&self.shards[i]).values.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self, key: &str) -> MutexGuard<'_, State> {
        // A fixed hasher: the shard of a key is the same in every run.
        let shard = BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % SHARDS;
        Self::guard(&self.shards[shard])
    }

    fn guard(shard: &Mutex<State>) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated (every
        // mutation is a single insert/remove), so a poisoned lock is still consistent.
        shard.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl KvStore for MemoryStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let deadline = Instant::now() + timeout;
        let me = {
            let mut state = self.lock(key);
            if let Some(value) = state.values.get(key) {
                return Ok(value.clone());
            }
            let me = Arc::new(Waiter { value: OnceLock::new(), thread: std::thread::current() });
            state.waiters.entry(key.to_string()).or_default().push(Arc::clone(&me));
            me
        };
        loop {
            if let Some(value) = me.value.get() {
                return Ok(value.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Wakes early on `unpark` (or spuriously); the loop checks again.
            std::thread::park_timeout(deadline - now);
        }
        // Timed out: leave the list. If a `set` took the list meanwhile (it may not have
        // filled this waiter's value yet), the value is in the map.
        let mut state = self.lock(key);
        let mut still_listed = false;
        if let Some(list) = state.waiters.get_mut(key) {
            let before = list.len();
            list.retain(|w| !Arc::ptr_eq(w, &me));
            still_listed = list.len() < before;
            if list.is_empty() {
                state.waiters.remove(key);
            }
        }
        if !still_listed {
            if let Some(value) = state.values.get(key) {
                return Ok(value.clone());
            }
        }
        Err(KvError::Timeout {
            key: key.to_string(),
            timeout_ms: timeout.as_millis() as u64,
        })
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        Ok(self.lock(key).values.get(key).cloned())
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        check_value_size(key, value.len())?;
        let waiters = {
            let mut state = self.lock(key);
            state.values.insert(key.to_string(), value.to_string());
            state.waiters.remove(key).unwrap_or_default()
        };
        // Outside the lock: the woken threads need nothing of it.
        for w in waiters {
            let _ = w.value.set(value.to_string());
            w.thread.unpark();
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
