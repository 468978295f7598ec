//! Releases a reservation that is dropped without being completed or released
//! (a panic, an error path, a task aborted at shutdown), so a key does not stay
//! wedged until its lease runs out while the process lives on. A release the
//! store could not take (unreachable) is tried again in the background for as
//! long as the lease holds, for the same reason.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Lease, LeaseRetry, Store, StoreError, StoredResponse};

/// Pause before a release is tried again, doubled up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

pub struct LeaseGuard {
    store: Arc<dyn Store>,
    lease: Option<Lease>,
}

impl LeaseGuard {
    pub fn new(store: Arc<dyn Store>, lease: Lease) -> Self {
        Self {
            store,
            lease: Some(lease),
        }
    }

    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Completes the record; returns the expiry written. Whatever the
    /// result, the guard is disarmed: a failed completion leaves the lease
    /// to expire rather than freeing a key whose request did run.
    pub async fn complete(
        mut self,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        match self.lease.take() {
            Some(lease) => self.store.complete(&lease, response, retain_for).await,
            // Only `complete` and `release` take the lease, and each
            // consumes the guard: a second completion cannot happen.
            None => Err(StoreError::Fenced),
        }
    }

    /// Frees the key now. When the store cannot be reached, the error is
    /// returned and the release goes on in the background until the lease
    /// runs out: the request did not run (or its answer is not kept), so
    /// its key should be free once the store is back, not held for the rest
    /// of a lease that may be minutes long.
    pub async fn release(mut self) -> Result<(), StoreError> {
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        let released = self.store.release(&lease).await;
        if let Err(StoreError::Unavailable(_)) = &released {
            keep_releasing(self.store.clone(), lease);
        }
        released
    }
}

/// Tries `lease`'s release again, with a growing pause, until it is taken,
/// the lease is found fenced, or the lease runs out (past it, the key is
/// free to a takeover anyway). Without a runtime (the process stopping)
/// the lease simply expires.
fn keep_releasing(store: Arc<dyn Store>, lease: Lease) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        let mut retry = LeaseRetry::new(RETRY_FIRST, RETRY_MAX);
        loop {
            let Some(pause) = retry.pause_within(&lease) else {
                tracing::warn!(
                    route = %lease.id.route,
                    key = %crate::key::short_hash(&lease.id.key),
                    "releasing the key failed until its lease ran out"
                );
                return;
            };
            retry.sleep(pause).await;
            match store.release(&lease).await {
                Ok(()) => {
                    tracing::info!(
                        route = %lease.id.route,
                        key = %crate::key::short_hash(&lease.id.key),
                        "released the key once the store answered again"
                    );
                    return;
                }
                // Releasing opens no answer: not a failure to retry.
                Err(StoreError::Fenced | StoreError::Sealed(_) | StoreError::Damaged(_)) => {
                    return;
                }
                Err(StoreError::Unavailable(_)) => {}
            }
        }
    });
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let store = self.store.clone();
        // Without a runtime (process shutting down) the lease simply expires.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                // Fenced: the key is another holder's now, nothing to free.
                if let Err(err @ StoreError::Unavailable(_)) = store.release(&lease).await {
                    tracing::warn!(error = %err, "releasing an abandoned lease failed; retrying while it holds");
                    keep_releasing(store, lease);
                }
            });
        }
    }
}
