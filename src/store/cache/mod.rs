//! Redis in front of Postgres: a fast path for completed answers, never the
//! authority.
//!
//! - `reserve` first looks the record up in Redis. A completed answer stored
//!   under the same fingerprint is returned at once (no Postgres round trip,
//!   and it still replays while Postgres is down). Anything else — a miss, a
//!   different fingerprint, an undecodable value, an error — asks Postgres,
//!   which alone reserves. A replay Postgres served is written back (`NX`,
//!   TTL = the remaining retention) for the next retry; over a value the
//!   lookup could not use (garbage, another type, a stale answer of another
//!   fingerprint) it is written only if that value is still there, atomically.
//! - `complete` writes Postgres first (fenced by the token) and only then
//!   Redis, with the retention as TTL: Redis never holds an answer Postgres
//!   refused, so it can only ever replay a final answer.
//! - Losing Redis data (flush, eviction, restart) only turns hits into misses,
//!   and misses go to Postgres: no second execution, no wrong replay. A Redis
//!   that is down is skipped (see `conn`) and counted as `error` lookups.
//! - No in-flight pre-filter: a marker left behind by a release that could
//!   not reach Redis would answer 409 to retries that should run, and
//!   Postgres decides an in-flight key in the same single round trip anyway.

pub(in crate::store) mod cause;
mod conn;
mod entry;
mod purged_copies;
mod tls;
mod url;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::{
    Kept, Lease, PostgresStore, RecordId, RecordInfo, Reservation, Store, StoreError,
    StoredResponse,
};
use crate::config::RedisConfig;
use conn::{Got, Redis};

pub use cause::{CacheError, RedisCause};
pub use purged_copies::PurgedCopies;

/// Result of one cache lookup, for `idemgate_cache_lookups_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Served from Redis.
    Hit,
    /// Not in Redis, or there under another fingerprint (Postgres decides).
    Miss,
    /// Redis failed, timed out or is paused after a failure.
    Error,
}

impl Lookup {
    pub fn as_str(self) -> &'static str {
        match self {
            Lookup::Hit => "hit",
            Lookup::Miss => "miss",
            Lookup::Error => "error",
        }
    }
}

/// Result of one write to Redis (an answer, a write-back, a purge's mark),
/// for `idemgate_cache_writes_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Redis took it (a write-back that found a value already there too).
    Written,
    /// Redis answered with an error reply: `OOM` under `noeviction`,
    /// `READONLY` from a replica after a failover, `NOAUTH`. Lookups may
    /// still work while every write is refused, so the fast path stops
    /// filling with no lookup failing.
    Refused,
    /// Redis failed, timed out or is paused after a failure.
    Failed,
}

impl Write {
    pub const ALL: [Write; 3] = [Write::Written, Write::Refused, Write::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Write::Written => "ok",
            Write::Refused => "refused",
            Write::Failed => "error",
        }
    }

    fn of(result: &Result<(), CacheError>) -> Write {
        match result {
            Ok(()) => Write::Written,
            Err(CacheError::Refused(_)) => Write::Refused,
            Err(CacheError::Failed { .. } | CacheError::NoAnswer { .. } | CacheError::Paused) => {
                Write::Failed
            }
        }
    }
}

/// What opening the cache would refuse of its settings (the URL, the `ca`
/// file), found without connecting.
pub fn settings_error(config: &RedisConfig) -> Option<super::setting::SettingError> {
    tls::client(&config.url, config.ca.as_deref()).err()
}

/// Told every lookup's result (metrics).
pub type LookupHook = Arc<dyn Fn(Lookup) + Send + Sync>;
/// Told every write's result (metrics).
pub type WriteHook = Arc<dyn Fn(Write) + Send + Sync>;

/// What the cache tells of each lookup and each write.
#[derive(Clone)]
pub struct CacheHooks {
    pub on_lookup: LookupHook,
    pub on_write: WriteHook,
}

impl CacheHooks {
    /// Tells nobody (the one-shot commands).
    pub fn none() -> Self {
        Self::lookups(Arc::new(|_| {}))
    }

    /// Tells of lookups only.
    pub fn lookups(on_lookup: LookupHook) -> Self {
        Self {
            on_lookup,
            on_write: Arc::new(|_| {}),
        }
    }
}

pub struct CachedStore {
    authority: PostgresStore,
    redis: Arc<Redis>,
    prefix: String,
    hooks: CacheHooks,
}

impl CachedStore {
    /// Does not connect to Redis (see `conn`).
    pub fn new(
        authority: PostgresStore,
        config: &RedisConfig,
        hooks: CacheHooks,
    ) -> Result<CachedStore, StoreError> {
        Ok(CachedStore {
            authority,
            redis: Arc::new(Redis::lazy(&config.url, config.ca.as_deref())?),
            prefix: config.key_prefix.clone(),
            hooks,
        })
    }

    /// Tells the hook how a write went, and hands its result on.
    fn wrote(&self, result: Result<(), CacheError>) -> Result<(), CacheError> {
        (self.hooks.on_write)(Write::of(&result));
        result
    }

    /// Hears of purges made through any replica or `idemgate keys purge`
    /// (`PostgresStore::follow_purges`).
    pub fn follow_purges(&self, hook: super::postgres::PurgeHook) -> tokio_util::sync::DropGuard {
        self.authority.follow_purges(hook)
    }

    /// Deletes this store's Redis copies of what was purged elsewhere.
    pub fn purged_copies(&self) -> PurgedCopies {
        PurgedCopies::new(&self.redis, self.prefix.clone())
    }

    /// The cached answer for this fingerprint, if Redis has one; otherwise
    /// what stands in the way of writing one back.
    async fn lookup(
        &self,
        id: &RecordId,
        key: &str,
        fingerprint: &str,
    ) -> (Result<entry::Entry, Seen>, Lookup) {
        match self.redis.get(key).await {
            Ok(Got::Value(value)) => match entry::decode(self.authority.identity(), id, &value) {
                // A value past its record's expiry (a TTL lifted or
                // lengthened by hand, a snapshot restored) is no answer:
                // Postgres says whether the key may run again.
                Some(found)
                    if found.fingerprint == fingerprint && found.expires_at > SystemTime::now() =>
                {
                    (Ok(found), Lookup::Hit)
                }
                // Another fingerprint (or a value we cannot read): only
                // Postgres may say Mismatch.
                _ => (Err(Seen::Unusable(value)), Lookup::Miss),
            },
            Ok(Got::Nothing) => (Err(Seen::Nothing), Lookup::Miss),
            Ok(Got::NotAString) => {
                tracing::debug!("cache lookup found a value that is not a string");
                (Err(Seen::Unusable(Vec::new())), Lookup::Error)
            }
            Err(err) => {
                tracing::debug!(error = %err, "cache lookup failed");
                (Err(Seen::Unreachable), Lookup::Error)
            }
        }
    }
}

/// Why a lookup was no hit, for the write-back of what Postgres replays.
enum Seen {
    /// Nothing under the key: written with `NX`.
    Nothing,
    /// A value we cannot use here: garbage, another type, or the answer of
    /// another fingerprint (an earlier record under this id, since purged or
    /// expired: Postgres just replayed a completed answer for this one).
    /// Replaced, or it would send every replay of the key to Postgres for
    /// ever (a write-back with `NX` never lands over it).
    Unusable(Vec<u8>),
    /// Redis failed: not written back.
    Unreachable,
}

impl CachedStore {
    /// Replaces the cached answers of these scopes of (route, key) with the
    /// purge's mark (`entry::purged_mark`).
    async fn forget(
        &self,
        route: &str,
        key: &str,
        scopes: impl Iterator<Item = &str>,
    ) -> Result<(), CacheError> {
        let keys: Vec<String> = scopes
            .map(|scope| entry::key(&self.prefix, &RecordId::new(route, scope, key)))
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let written = self
            .redis
            .set_all(&keys, &entry::purged_mark(), entry::PURGED_FOR)
            .await;
        self.wrote(written)
    }
}

impl CachedStore {
    /// Postgres decides; a replay it serves is written back to Redis over
    /// what the lookup saw there (`seen`).
    async fn ask_authority(
        &self,
        id: &RecordId,
        key: &str,
        fingerprint: &str,
        lease_for: Duration,
        seen: Seen,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        let (reservation, kept_for) = self
            .authority
            .reserve_with_ttl(id, fingerprint, lease_for)
            .await?;
        let now = SystemTime::now();
        let kept = kept_for.map(|k| k.kept());
        if let (Reservation::Completed(response), Some(kept_for)) = (&reservation, kept_for)
            && !kept_for.remaining.is_zero()
        {
            let value = entry::encode(
                self.authority.identity(),
                id,
                fingerprint,
                response,
                kept_for.expires_at,
                now.checked_sub(kept_for.age).unwrap_or(now),
            );
            let ttl = kept_for.remaining;
            let written = match seen {
                // NX: never overwrite what a completion wrote meanwhile.
                Seen::Nothing => Some(self.redis.set(key, &value, ttl, true).await),
                Seen::Unusable(old) => Some(self.redis.replace(key, &old, &value, ttl).await),
                Seen::Unreachable => None,
            };
            if let Some(written) = written {
                let _ = self.wrote(written);
            }
        }
        Ok((reservation, kept))
    }
}

#[async_trait]
impl Store for CachedStore {
    fn backend(&self) -> &'static str {
        "redis+postgres"
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        let key = entry::key(&self.prefix, id);
        let (cached, lookup) = self.lookup(id, &key, fingerprint).await;
        (self.hooks.on_lookup)(lookup);
        let seen = match cached {
            Ok(found) => {
                let now = SystemTime::now();
                let kept = Kept {
                    expires_at: found.expires_at,
                    // Postgres's instant, the best this value knows: a copy
                    // in memory may outlive the record by the skew between
                    // the database's clock and ours (at most `MAX_AGE`).
                    expires_here: found.expires_at,
                    // By this replica's clock against the completing one's:
                    // skew between them is the error (clamped at 0).
                    age: Some(now.duration_since(found.completed_at).unwrap_or_default()),
                };
                return Ok((Reservation::Completed(found.response), Some(kept)));
            }
            Err(seen) => seen,
        };
        self.ask_authority(id, &key, fingerprint, lease_for, seen)
            .await
    }

    /// Reads what Redis holds without taking it for an answer, then asks
    /// Postgres, whose replay replaces the copy the caller could not use.
    async fn reserve_past_copies(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Option<Result<(Reservation, Option<Kept>), StoreError>> {
        let key = entry::key(&self.prefix, id);
        let seen = match self.redis.get(&key).await {
            Ok(Got::Value(value)) => Seen::Unusable(value),
            Ok(Got::Nothing) => Seen::Nothing,
            Ok(Got::NotAString) => Seen::Unusable(Vec::new()),
            Err(_) => Seen::Unreachable,
        };
        Some(
            self.ask_authority(id, &key, fingerprint, lease_for, seen)
                .await,
        )
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        let recorded = self
            .authority
            .complete_recorded(lease, response, retain_for)
            .await?;
        let key = entry::key(&self.prefix, &lease.id);
        let value = entry::encode(
            self.authority.identity(),
            &lease.id,
            &recorded.fingerprint,
            response,
            // Postgres's expiry, not ours: a hit tells what the record says.
            recorded.expires_at,
            SystemTime::now(),
        );
        let _ = self.wrote(self.redis.set(&key, &value, retain_for, false).await);
        Ok(recorded.expires_at)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.authority.release(lease).await
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        self.authority.records(route, key).await
    }

    /// Marks the cached answers of the key's scopes purged
    /// (`entry::purged_mark`), then deletes the records in Postgres, then
    /// marks the cached answers of the scopes deleted (one recorded or
    /// written back meanwhile; the mark keeps out one written back later). Redis goes first so that a Redis failure
    /// leaves the records in place: the error is reported and a retry finds
    /// the same scopes. The other way round, the records would be gone and a
    /// retry could no longer name the copy, which would keep replaying the
    /// purged key until its TTL.
    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        let known = self.authority.records(route, key).await?;
        self.forget(route, key, known.iter().map(|record| record.scope.as_str()))
            .await
            .map_err(RedisCause::NothingPurged)?;
        let scopes = self.authority.purge_scopes(route, key).await?;
        self.forget(route, key, scopes.iter().map(String::as_str))
            .await
            .map_err(|source| RedisCause::CopiesLeft {
                records: scopes.len(),
                source,
            })?;
        Ok(scopes.len() as u64)
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        // Redis expires its copies by TTL on its own.
        self.authority.sweep(batch).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Readiness follows the authority only: the gateway is correct without Redis.
        self.authority.ping().await
    }

    async fn list(&self, query: &super::ListQuery) -> Result<super::Page, StoreError> {
        self.authority.list(query).await
    }

    async fn count(&self) -> Result<Vec<super::Count>, StoreError> {
        self.authority.count().await
    }
}
