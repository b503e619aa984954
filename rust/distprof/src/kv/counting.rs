//! A store that counts what passes through it: calls, bytes read and written, and the
//! largest value. The benchmarks and tests use it to show what one node costs the store.

use super::{KvError, KvStore};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What one user of a [`Counting`] store did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// `get`, `try_get` and `set` calls, timed-out waits included.
    pub calls: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub largest_value_bytes: u64,
}

/// Wraps a store (typically one per simulated node over a shared store) and counts.
pub struct Counting<S> {
    inner: S,
    calls: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    largest: AtomicU64,
}

impl<S: KvStore> Counting<S> {
    pub fn new(inner: S) -> Self {
        Counting { inner, calls: AtomicU64::new(0), bytes_read: AtomicU64::new(0), bytes_written: AtomicU64::new(0), largest: AtomicU64::new(0) }
    }

    pub fn traffic(&self) -> Traffic {
        Traffic {
            calls: self.calls.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            largest_value_bytes: self.largest.load(Ordering::Relaxed),
        }
    }

    fn read(&self, key: &str, value: &str) {
        self.bytes_read.fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        self.largest.fetch_max(value.len() as u64, Ordering::Relaxed);
    }
}

impl<S: KvStore> KvStore for Counting<S> {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let v = self.inner.get(key, timeout)?;
        self.read(key, &v);
        Ok(v)
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let v = self.inner.try_get(key)?;
        if let Some(v) = &v {
            self.read(key, v);
        }
        Ok(v)
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        self.largest.fetch_max(value.len() as u64, Ordering::Relaxed);
        self.inner.set(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStore;

    #[test]
    fn counts_calls_bytes_and_the_largest_value() {
        let store = Counting::new(MemoryStore::new());
        store.set("k", "12345").unwrap();
        assert_eq!(store.get("k", Duration::ZERO).unwrap(), "12345");
        assert_eq!(store.try_get("absent").unwrap(), None);
        assert!(store.get("absent", Duration::ZERO).is_err());
        assert_eq!(
            store.traffic(),
            Traffic { calls: 4, bytes_read: 6, bytes_written: 6, largest_value_bytes: 5 }
        );
    }
}
