//! Releases a reservation that is dropped without being completed or released
//! (a panic, an error path, a task aborted at shutdown), so a key does not stay
//! wedged until its lease runs out while the process lives on.

use std::sync::Arc;

use super::{Lease, Store, StoreError, StoredResponse};
use std::time::Duration;

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

    /// Completes the record. Whatever the result, the guard is disarmed: a failed
    /// completion leaves the lease to expire rather than freeing a key whose
    /// request did run.
    pub async fn complete(
        mut self,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<(), StoreError> {
        match self.lease.take() {
            Some(lease) => self.store.complete(&lease, response, retain_for).await,
            None => Ok(()),
        }
    }

    /// Frees the key now.
    pub async fn release(mut self) -> Result<(), StoreError> {
        match self.lease.take() {
            Some(lease) => self.store.release(&lease).await,
            None => Ok(()),
        }
    }
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
                if let Err(err) = store.release(&lease).await {
                    tracing::warn!(error = %err, "releasing an abandoned lease failed; it will expire");
                }
            });
        }
    }
}
