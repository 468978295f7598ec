//! Stored answers sealed at rest (`[store.encryption]`), for every backend at
//! once: a [`Store`] wrapper seals each answer before the backend sees it and
//! opens each one it hands back, so the embedded file, Postgres and the Redis
//! fast path only ever hold the sealed form (`envelope`). The copies kept in
//! memory for replays sit above it and hold opened answers: memory is not at
//! rest.
//!
//! Always in place, keys or not: with encryption off, a record sealed while
//! it was on must answer 503, not be replayed as its ciphertext.

mod envelope;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

pub use envelope::{Keys, OpenError, SEALED, key_id, sealed_by};

use super::{
    Kept, Lease, RecordId, RecordInfo, Reservation, Store, StoreError, StoredResponse, Unavailable,
    listing,
};
use crate::key;
use crate::log_limit::LogLimit;
use crate::metrics::STORE_ERRORS;

/// One line at `serve` start naming each key's variable and id (never the
/// key), so that the key id in a refusal's log line can be traced to a
/// variable.
pub fn announce(configured: &[crate::config::StoreKey]) {
    let Some((first, rest)) = configured.split_first() else {
        return;
    };
    let opening: Vec<String> = rest
        .iter()
        .map(|key| format!("{} ({})", key_id(&key.bytes), key.env))
        .collect();
    let sealing = format!("{} ({})", key_id(&first.bytes), first.env);
    if opening.is_empty() {
        tracing::info!(%sealing, "store encryption on: answers are sealed at rest");
    } else {
        tracing::info!(%sealing, also_opening = %opening.join(", "),
            "store encryption on: answers are sealed at rest");
    }
}

/// A record no listed key opens: refused. Said at once, with the key id the
/// answer needs, then once per interval per route (crate::log_limit): a
/// removed key makes every record it sealed refuse every retry, and
/// `idemgate_store_errors_total{op="open"}` counts each one.
fn refused(id: &RecordId, error: OpenError) -> StoreError {
    static LIMIT: LogLimit = LogLimit::new(STORE_ERRORS);
    if let Some(left_out) = LIMIT.admit(&id.route) {
        let key = key::short_hash(&id.key);
        // After a rollback the answer is sound: purging it, the advice for
        // a lost key, would run the request again.
        if matches!(error, OpenError::SealedByNewer { .. }) {
            tracing::error!(route = %id.route, %key, %error, not_logged = left_out.count(),
                "stored answer cannot be opened by this release; serve it with the newer one, do not purge the key (its request would run again){left_out}");
        } else {
            tracing::error!(route = %id.route, %key, %error, not_logged = left_out.count(),
                "stored answer cannot be opened; purge the key once reconciled{left_out}");
        }
    }
    StoreError::Sealed(error)
}

pub struct SealedStore<S> {
    inner: S,
    keys: Arc<Keys>,
}

impl<S: Store> SealedStore<S> {
    pub fn new(inner: S, keys: Keys) -> Self {
        Self {
            inner,
            keys: Arc::new(keys),
        }
    }
}

#[async_trait]
impl<S: Store> Store for SealedStore<S> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        let (reservation, kept) = self
            .inner
            .reserve_with_expiry(id, fingerprint, lease_for)
            .await?;
        let Reservation::Completed(stored) = reservation else {
            return Ok((reservation, kept));
        };
        let error = match self.keys.open(id, stored) {
            Ok(opened) => return Ok((Reservation::Completed(opened), kept)),
            Err(error) => error,
        };
        // A copy in front of the authority (Redis) that does not open says
        // nothing of the record itself: a damaged copy must not refuse a
        // record that opens, nor have an operator purge it (and run the
        // request again) on its account.
        let Some(decided) = self
            .inner
            .reserve_past_copies(id, fingerprint, lease_for)
            .await
        else {
            return Err(refused(id, error));
        };
        let (reservation, kept) = match decided {
            // The copy names this record and its fingerprint matched: the
            // request ran. With the authority out of reach, nothing says
            // otherwise, so it is refused as unopenable, never reported as
            // a store that is down (which `on_store_error = "pass"` would
            // forward again).
            Err(StoreError::Unavailable(cause)) => {
                static LIMIT: LogLimit = LogLimit::new(STORE_ERRORS);
                if let Some(left_out) = LIMIT.admit(&id.route) {
                    tracing::error!(route = %id.route, key = %key::short_hash(&id.key), %error,
                        store = %cause, not_logged = left_out.count(),
                        "cached copy of a stored answer cannot be opened and the store cannot be asked; refused{left_out}");
                }
                return Err(StoreError::Sealed(error));
            }
            decided => decided?,
        };
        let Reservation::Completed(stored) = reservation else {
            return Ok((reservation, kept));
        };
        let opened = self
            .keys
            .open(id, stored)
            .map_err(|error| refused(id, error))?;
        // Said only when the record itself opens: otherwise `refused` says it.
        tracing::warn!(route = %id.route, key = %key::short_hash(&id.key), %error,
            "cached copy of a stored answer cannot be opened; replayed the store's record");
        Ok((Reservation::Completed(opened), kept))
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        match self.keys.seal(&lease.id, response) {
            Some(sealed) => self.inner.complete(lease, &sealed, retain_for).await,
            None if self.keys.enabled() => Err(Unavailable::Sealing.into()),
            None => self.inner.complete(lease, response, retain_for).await,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release(lease).await
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        self.inner.records(route, key).await
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        self.inner.purge(route, key).await
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        self.inner.sweep(batch).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn stopped_for_good(&self) -> Option<StoreError> {
        self.inner.stopped_for_good()
    }

    // Listings and counts carry states and statuses only, never answers:
    // nothing to open.
    async fn list(&self, query: &listing::ListQuery) -> Result<listing::Page, StoreError> {
        self.inner.list(query).await
    }

    async fn count(&self) -> Result<Vec<listing::Count>, StoreError> {
        self.inner.count().await
    }
}
