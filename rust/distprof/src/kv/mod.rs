//! Key-value stores: the one medium all nodes share before they can talk to each other.
//!
//! The interface is the intersection of what XLA's `KeyValueStoreInterface` offers through
//! the PJRT C API (blocking `Get` with a timeout, `TryGet`, `Set`; no `Delete`), so that the
//! same rendezvous code runs on XLA's store, in memory and on our TCP store.

use std::time::Duration;

pub mod counting;
pub mod memory;
pub mod polling;
pub mod tcp;

pub use counting::{Counting, Traffic};
pub use memory::MemoryStore;
pub use polling::{Polling, TryStore};
pub use tcp::{TcpStore, TcpStoreServer};

/// Largest value any backend accepts or returns. What distprof stores is per node and
/// O(out-degree) (a join is about 300 bytes, a node's fits of a window a few kB), so a
/// larger value is a bug; and the store is the job's own coordination service, where one
/// large value read by many nodes would cost the job.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Longest key any backend accepts; keys are short paths such as
/// `distprof/<session>/node/17`, so a longer one is a bug or a corrupted frame.
pub const MAX_KEY_BYTES: usize = 4096;

/// Refuses a value over [`MAX_VALUE_BYTES`] before it reaches any backend.
pub fn check_value_size(key: &str, len: usize) -> Result<(), KvError> {
    if len > MAX_VALUE_BYTES {
        return Err(KvError::TooLarge { key: key.to_string(), len, limit: MAX_VALUE_BYTES });
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("key-value store: timed out after {timeout_ms} ms waiting for key `{key}`")]
    Timeout { key: String, timeout_ms: u64 },
    #[error("key-value store: value of key `{key}` is {len} bytes, over the limit of {limit}")]
    TooLarge { key: String, len: usize, limit: usize },
    #[error("key-value store: value of key `{key}` is malformed: {reason}")]
    Malformed { key: String, reason: String },
    #[error("key-value store unavailable: {0}")]
    Unavailable(String),
}

/// A store shared by all nodes of a run. Implementations must be thread-safe; every call
/// is bounded in time.
pub trait KvStore: Send + Sync {
    /// Waits up to `timeout` for `key` to exist and returns its value.
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError>;
    /// Returns the value of `key` if it exists now.
    fn try_get(&self, key: &str) -> Result<Option<String>, KvError>;
    /// Sets `key`; overwriting is allowed but the rendezvous never relies on it.
    fn set(&self, key: &str, value: &str) -> Result<(), KvError>;
}

/// A shared store is a store: several nodes of one process (tests, a host running many
/// ranks) can hold one in-memory store each as a `Box<dyn KvStore>`.
impl<T: KvStore + ?Sized> KvStore for std::sync::Arc<T> {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        (**self).get(key, timeout)
    }
    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        (**self).try_get(key)
    }
    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        (**self).set(key, value)
    }
}
