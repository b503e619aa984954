//! Time-bounded, revocable access to a key-value store distprof does not own.
//!
//! Inside XLA the store handed to hook 1 calls back into the PJRT client (through the C
//! API's callbacks); once XLA destroys that client the callbacks may dangle, and XLA does
//! not tell us when that happens. So distprof holds the store only for the rendezvous,
//! which runs right after the client is created: the lease expires
//! `rendezvous_timeout_ms` after hook 1, is revoked as soon as the rendezvous ends (or the
//! plugin turns off), and every call after that fails without touching the store. A
//! blocking `get` is cut short at the expiry, so no call can run past it. Nothing after
//! the rendezvous needs the store: traces never call it (the network solve is merge's).

use crate::kv::{KvError, KvStore};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct KvLease {
    /// `None` once revoked or expired: the reference to the store is gone.
    store: Mutex<Option<Arc<dyn KvStore>>>,
    expires: Instant,
}

impl KvLease {
    /// Lends `store` until `expires` (or [`KvLease::revoke`], whichever comes first).
    pub fn new(store: Box<dyn KvStore>, expires: Instant) -> Self {
        Self {
            store: Mutex::new(Some(Arc::from(store))),
            expires,
        }
    }

    /// Ends the lease now. A call in flight keeps the store until it returns (bounded by
    /// the expiry); later calls fail. Never blocks on the store.
    pub fn revoke(&self) {
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(store);
    }

    /// True while calls may still reach the store.
    pub fn is_live(&self) -> bool {
        Instant::now() < self.expires
            && self
                .store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
    }

    /// The store and how long a call may still take.
    fn acquire(&self, key: &str) -> Result<(Arc<dyn KvStore>, Duration), KvError> {
        let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.expires.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Expired: drop our reference so nothing can reach the store any more.
            drop(slot.take());
        }
        match slot.as_ref() {
            Some(store) => Ok((Arc::clone(store), left)),
            None => Err(KvError::Unavailable(format!(
                "distprof no longer uses the host's key-value store (its lease ended; key `{key}`): \
                 the rendezvous must finish within `rendezvous_timeout_ms` of the GPU client's creation"
            ))),
        }
    }
}

impl KvStore for KvLease {
    fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
        let (store, left) = self.acquire(key)?;
        store.get(key, timeout.min(left))
    }

    fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
        let (store, _) = self.acquire(key)?;
        store.try_get(key)
    }

    fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
        let (store, _) = self.acquire(key)?;
        store.set(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStore;

    #[test]
    fn revoke_drops_the_store_and_later_calls_fail_naming_the_key() {
        let mem = Arc::new(MemoryStore::new());
        let lease = KvLease::new(
            Box::new(Arc::clone(&mem)),
            Instant::now() + Duration::from_secs(60),
        );
        lease.set("distprof/a", "1").unwrap();
        assert_eq!(lease.try_get("distprof/a").unwrap().as_deref(), Some("1"));
        assert_eq!(Arc::strong_count(&mem), 2);
        lease.revoke();
        assert_eq!(
            Arc::strong_count(&mem),
            1,
            "the lease still holds the store"
        );
        assert!(!lease.is_live());
        let err = lease
            .get("distprof/a", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`distprof/a`") && err.contains("rendezvous_timeout_ms"),
            "{err}"
        );
        assert!(lease.set("distprof/b", "2").is_err());
        assert!(mem.try_get("distprof/b").unwrap().is_none());
    }

    #[test]
    fn a_blocking_get_is_cut_at_the_expiry_and_the_store_released() {
        let mem = Arc::new(MemoryStore::new());
        let started = Instant::now();
        let lease = KvLease::new(
            Box::new(Arc::clone(&mem)),
            started + Duration::from_millis(150),
        );
        // Asked to wait 10 s, the call returns at the expiry.
        let err = lease
            .get("distprof/never", Duration::from_secs(10))
            .unwrap_err();
        let waited = started.elapsed();
        assert!(matches!(err, KvError::Timeout { .. }), "{err}");
        assert!(
            waited >= Duration::from_millis(140) && waited < Duration::from_millis(1500),
            "{waited:?}"
        );
        // The next call finds the lease expired and drops the store.
        assert!(matches!(
            lease.try_get("distprof/never"),
            Err(KvError::Unavailable(_))
        ));
        assert_eq!(Arc::strong_count(&mem), 1);
    }
}
