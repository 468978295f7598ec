//! The record store: the small state machine at the heart of idemgate.
//!
//! A record is identified by (route, scope, key) and moves
//! `reserve → complete | release`. Each backend implements the transitions
//! atomically in its own terms; the gateway only sees this trait. Nothing here
//! knows of HTTP: a stored answer is a status, a list of header pairs and bytes.

pub mod cache;
pub mod count;
mod damaged;
pub mod embedded;
pub mod guard;
pub mod instrumented;
mod lease_retry;
pub mod listing;
mod migration;
mod open;
pub mod postgres;
mod refusal;
pub mod replay_cache;
mod replay_flight;
pub mod seal;
pub mod setting;
pub mod sweeper;
mod unavailable;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

pub use cache::{CacheError, CacheHooks, CachedStore, Lookup, LookupHook, RedisCause, Write};
pub use count::CountLimits;
pub use damaged::Damaged;
pub use embedded::{EmbeddedCause, EmbeddedStore};
pub use guard::LeaseGuard;
pub use instrumented::InstrumentedStore;
use lease_retry::LeaseRetry;
pub use listing::{Count, Cursor, ListQuery, Listed, Page};
pub use migration::MigrationReport;
pub use open::{
    StoreConfigExt, migrate, open, open_with_metrics, sweep_settings, unusable_settings,
};
pub use postgres::{PostgresCause, PostgresStore};
pub use refusal::Refusal;
pub use replay_cache::ReplayCache;
pub use setting::{Setting, SettingError};
pub use sweeper::spawn_sweeper;
pub use unavailable::Unavailable;

/// Identity of one record. Shared strings: a request's id is cloned into its
/// lease and into each store call, and the route name and the scope of a
/// single-tenant route are the same for every request (docs/adr/0007-hot-path-costs.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    pub route: Arc<str>,
    /// Hex hash of the configured scope parts ("" hashes to a fixed value too).
    pub scope: Arc<str>,
    pub key: Arc<str>,
}

impl RecordId {
    pub fn new(
        route: impl Into<Arc<str>>,
        scope: impl Into<Arc<str>>,
        key: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            route: route.into(),
            scope: scope.into(),
            key: key.into(),
        }
    }

    /// Route, scope and key as `&str`, the form SQL parameters take.
    pub fn parts(&self) -> (&str, &str, &str) {
        (&self.route, &self.scope, &self.key)
    }
}

/// What the upstream answered, as kept for replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// Header pairs in the order received; names lower-case. Hop-by-hop and
    /// excluded headers are already removed by the caller. Shared, and
    /// values as `Bytes`, so that a replay from a kept copy copies neither
    /// the list nor a value.
    pub headers: Arc<[(String, Bytes)]>,
    pub body: Bytes,
    /// The answer was larger than `max_stored_response`: only status and headers kept.
    pub body_omitted: bool,
    /// The answer is the gateway's own outcome-unknown problem (the request
    /// was sent and no answer came back), not the upstream's. Written with
    /// the completion so operators can list and count such records without
    /// reading bodies.
    pub outcome_unknown: bool,
}

impl StoredResponse {
    /// A header list from (name, value) pairs, in order.
    pub fn header_list<N, V>(pairs: impl IntoIterator<Item = (N, V)>) -> Arc<[(String, Bytes)]>
    where
        N: Into<String>,
        V: Into<Bytes>,
    {
        pairs
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect()
    }
}

/// Proof of holding the right to execute a key, fenced by `token`: a token is
/// never reused for one record id, so a holder whose lease was taken over can
/// no longer complete or release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: RecordId,
    pub token: i64,
    /// When the lease ends, as the store wrote it.
    pub expires_at: SystemTime,
    /// The same end by this process's clock, which times what the holder
    /// may still do (retrying a completion): on Postgres the database's
    /// clock times the lease, and ours may be skewed from it. No later than
    /// the lease's end; elsewhere equal to `expires_at`.
    pub expires_here: SystemTime,
    /// Where the backend wrote the record, when it can say (the embedded
    /// store: the row's SQLite rowid), so that the completion or release
    /// goes straight to it instead of looking the key up again. Only a
    /// hint: `token` decides whether the row is still this lease's.
    pub row: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The caller now holds the key and must forward the request once.
    Reserved(Lease),
    /// Another holder's lease is live; same fingerprint.
    InFlight { lease_expires_at: SystemTime },
    /// A completed, unexpired answer with the same fingerprint.
    Completed(StoredResponse),
    /// The key is in flight or completed under another fingerprint.
    Mismatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordState {
    InFlight,
    Completed,
    /// Completed with the gateway's own outcome-unknown problem: someone
    /// must reconcile it with the upstream (and purge the key).
    OutcomeUnknown,
}

impl RecordState {
    pub const ALL: [RecordState; 3] = [
        RecordState::InFlight,
        RecordState::Completed,
        RecordState::OutcomeUnknown,
    ];

    /// The name operators see (JSON, metrics labels, `--state`).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::InFlight => "in_flight",
            RecordState::Completed => "completed",
            RecordState::OutcomeUnknown => "outcome_unknown",
        }
    }

    pub fn parse(name: &str) -> Option<RecordState> {
        RecordState::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// What a store knows of a completed record beside its answer, told with a
/// replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// When the record stops replaying, as the store wrote it: the instant
    /// `complete` returned, told to clients (`expiry_header`) alike on the
    /// first answer and on every replay.
    pub expires_at: SystemTime,
    /// The same instant by this process's clock, which bounds how long a
    /// copy is served: on Postgres the database's clock decides expiry, and
    /// ours may be skewed from it. Elsewhere equal to `expires_at`.
    pub expires_here: SystemTime,
    /// How long ago it was completed, by the store's own clock (`None`:
    /// the store could not tell).
    pub age: Option<Duration>,
}

/// One record as an operator sees it (`keys show`, `GET /admin/keys/...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordInfo {
    pub scope: String,
    pub state: RecordState,
    pub fingerprint: String,
    pub status: Option<u16>,
    pub created_at: SystemTime,
    pub completed_at: Option<SystemTime>,
    /// When a completed record stops replaying (`None` while in flight).
    pub expires_at: Option<SystemTime>,
    /// `None` once completed.
    pub lease_expires_at: Option<SystemTime>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The lease was taken over (or the record purged): this holder may not write.
    #[error("the lease is no longer this holder's (taken over, or the record purged)")]
    Fenced,
    /// The store could not be reached or failed; the operation's outcome is unknown
    /// to the caller only for `complete`, which callers treat as not written.
    #[error("store unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// A completed answer no configured key opens (`[store.encryption]`):
    /// the request may have run, so it is never forwarded again.
    #[error("{0}")]
    Sealed(#[from] seal::OpenError),
    /// A record holds what the store never writes: it exists, so its
    /// request may have run, and it is never forwarded again.
    #[error("{0}")]
    Damaged(#[from] Damaged),
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Short backend name for metrics and logs: `embedded`, `postgres`, `redis+postgres`.
    fn backend(&self) -> &'static str;

    /// Atomically decide what a request with this key and fingerprint may do.
    /// - no record, or a completed record past its retention → `Reserved`;
    /// - in flight, lease live → `InFlight` (same fingerprint) or `Mismatch`;
    /// - in flight, lease expired → taken over by the same fingerprint
    ///   (`Reserved` with a higher token), else `Mismatch`: the dead holder
    ///   may have run its request, and one key never runs two;
    /// - completed, unexpired → `Completed` (same fingerprint) or `Mismatch`.
    async fn reserve(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<Reservation, StoreError> {
        Ok(self
            .reserve_with_expiry(id, fingerprint, lease_for)
            .await?
            .0)
    }

    /// `reserve`, and with a `Completed` answer the instant it stops
    /// replaying (so that a copy kept in memory never outlives the record)
    /// and its age (`idemgate_replay_age_seconds`).
    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError>;

    /// `reserve_with_expiry` decided by the authority alone, past any copy of
    /// answers a store keeps in front of it (the Redis fast path), for a
    /// caller that could not use the answer the copy gave (it does not open:
    /// damaged, or sealed under a key no longer listed). `None`: this store
    /// keeps no such copy, and what it answered is the authority's.
    async fn reserve_past_copies(
        &self,
        _id: &RecordId,
        _fingerprint: &str,
        _lease_for: Duration,
    ) -> Option<Result<(Reservation, Option<Kept>), StoreError>> {
        None
    }

    /// Store the answer and mark the record completed, replayable for `retain_for`
    /// from now; returns the expiry written, which every replay tells too
    /// (`Kept::expires_at`). `Err(Fenced)` when the lease's token is no
    /// longer the record's.
    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError>;

    /// Free the key (delete the in-flight record) if this lease still holds it.
    /// Releasing a lease that was taken over is a no-op, not an error.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Every record of this key, one per scope.
    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError>;

    /// Delete every record of this key (all scopes); returns how many.
    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError>;

    /// Delete up to `batch` records whose retention has passed, or whose
    /// lease ran out without an answer (which refuse every request under the
    /// key but their own until then); returns how many.
    async fn sweep(&self, batch: u32) -> Result<u64, StoreError>;

    /// Cheap liveness probe for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Why the store refuses every operation until the process restarts
    /// (the embedded store after a failed sync, or its file deleted), for
    /// `/healthz`: only a restart mends it, which a supervisor makes on a
    /// failed liveness probe. `None` while a restart would change nothing.
    fn stopped_for_good(&self) -> Option<StoreError> {
        None
    }

    /// One page of a route's unexpired records, oldest first (`GET
    /// /admin/keys/{route}`, `idemgate keys list`), read through an index.
    async fn list(&self, query: &listing::ListQuery) -> Result<listing::Page, StoreError>;

    /// Unexpired records per route and state (`idemgate_records`).
    async fn count(&self) -> Result<Vec<listing::Count>, StoreError>;
}
