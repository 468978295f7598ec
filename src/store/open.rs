//! Opening the configured store: the backend and the layers above it (the
//! Redis fast path, sealing, the copies of answers kept in memory), for
//! `serve` and for the one-shot commands; `idemgate migrate`; and the
//! settings opening would refuse, found without connecting.

use std::sync::Arc;
use std::time::Duration;

use super::cache::PurgedCopies;
use super::postgres::{Freed, FreedHook, Heard, PurgeHook};
use super::replay_cache::Copies;
use super::seal::{Keys, SealedStore};
use super::{
    CacheHooks, CachedStore, EmbeddedStore, Lookup, MigrationReport, PostgresStore, ReplayCache,
    Store, StoreError, Unavailable, Write,
};
use crate::config::StoreConfig;
use crate::metrics::Metrics;

/// Memory for copies of replayed answers in front of every backend.
const REPLAY_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// Opens the configured backend. Postgres applies pending migrations first
/// unless `store.migrate = false` (then the schema must already match); with
/// `[store.redis]` it is wrapped in the Redis fast path. Answers are sealed
/// (`[store.encryption]`) above the backend, below the copies kept in memory. For the one-shot
/// commands: an embedded file is opened beside a gateway that may serve it.
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    let (store, _) = open_with_hook(config, CacheHooks::none(), None, Serving::No).await?;
    Ok(store)
}

/// `open` for `serve`, counting cache lookups in
/// `idemgate_cache_lookups_total`, cache writes in
/// `idemgate_cache_writes_total` and Postgres reservations given up in
/// `idemgate_unanswered_reservations_total`; an embedded file is locked against a
/// second gateway (`EmbeddedStore::open_for_serving`). Also says what
/// opening found of the schema and applied, for the start's log.
pub async fn open_with_metrics(
    config: &StoreConfig,
    metrics: &Metrics,
) -> Result<(Arc<dyn Store>, MigrationReport), StoreError> {
    // Resolved once: the hook runs on every Redis lookup.
    let [hit, miss, error] = [Lookup::Hit, Lookup::Miss, Lookup::Error]
        .map(|lookup| metrics.cache_lookups.with_label_values(&[lookup.as_str()]));
    let [written, refused, failed] =
        Write::ALL.map(|write| metrics.cache_writes.with_label_values(&[write.as_str()]));
    let hooks = CacheHooks {
        on_lookup: Arc::new(move |lookup| match lookup {
            Lookup::Hit => hit.inc(),
            Lookup::Miss => miss.inc(),
            Lookup::Error => error.inc(),
        }),
        on_write: Arc::new(move |write| match write {
            Write::Written => written.inc(),
            Write::Refused => refused.inc(),
            Write::Failed => failed.inc(),
        }),
    };
    // Resolved now, so the series exist (at 0) before the first one; only
    // Postgres gives reservations up this way.
    let on_freed = matches!(config, StoreConfig::Postgres(_)).then(|| {
        let [freed, nothing, held] = Freed::ALL.map(|freed| {
            metrics
                .unanswered_reservations
                .with_label_values(&[freed.as_str()])
        });
        let hook: FreedHook = Arc::new(move |result| match result {
            Freed::Freed => freed.inc(),
            Freed::Nothing => nothing.inc(),
            Freed::Held => held.inc(),
        });
        hook
    });
    let opened = open_with_hook(config, hooks, on_freed, Serving::Yes).await?;
    super::seal::announce(match config {
        StoreConfig::Embedded(embedded) => &embedded.encryption,
        StoreConfig::Postgres(pg) => &pg.encryption,
    });
    Ok(opened)
}

async fn open_with_hook(
    config: &StoreConfig,
    hooks: CacheHooks,
    on_freed: Option<FreedHook>,
    serving: Serving,
) -> Result<(Arc<dyn Store>, MigrationReport), StoreError> {
    match config {
        StoreConfig::Embedded(embedded) => {
            let (file, report) = open_embedded(config, serving).await?;
            // A purge made by another process (`idemgate keys purge` beside
            // this gateway) may have left any copy stale.
            let copies = Arc::new(Copies::new(REPLAY_CACHE_BYTES));
            let held = Arc::downgrade(&copies);
            file.on_written_elsewhere(Box::new(move || {
                if let Some(copies) = held.upgrade() {
                    copies.forget_all();
                }
            }));
            let file = SealedStore::new(file, Keys::new(&embedded.encryption));
            Ok((
                Arc::new(ReplayCache::with_copies(file, copies, None)),
                report,
            ))
        }
        StoreConfig::Postgres(pg) => {
            let (authority, report) = PostgresStore::connect_reporting(pg).await?;
            if serving == Serving::Yes {
                authority.require_privileges().await?;
            }
            if let Some(on_freed) = on_freed {
                authority.count_unanswered(on_freed);
            }
            let copies = Arc::new(Copies::new(REPLAY_CACHE_BYTES));
            let keys = Keys::new(&pg.encryption);
            let store: Arc<dyn Store> = match &pg.redis {
                Some(redis) => {
                    let cached = CachedStore::new(authority, redis, hooks)?;
                    let hook = forget_purged(&copies, Some(cached.purged_copies()));
                    let listener = Some(cached.follow_purges(hook));
                    Arc::new(ReplayCache::with_copies(
                        SealedStore::new(cached, keys),
                        copies,
                        listener,
                    ))
                }
                None => {
                    let listener = Some(authority.follow_purges(forget_purged(&copies, None)));
                    Arc::new(ReplayCache::with_copies(
                        SealedStore::new(authority, keys),
                        copies,
                        listener,
                    ))
                }
            };
            Ok((store, report))
        }
    }
}

/// Drops the copies of whatever another replica purged: in memory, and in
/// Redis (`redis`) the scopes the purge names. Holds the copies weakly: the
/// listener must not keep the cache (and so itself) alive.
fn forget_purged(copies: &Arc<Copies>, redis: Option<PurgedCopies>) -> PurgeHook {
    let copies = Arc::downgrade(copies);
    Arc::new(move |heard| {
        let Some(copies) = copies.upgrade() else {
            return;
        };
        match heard {
            Heard::Purged { route, key, scope } => {
                copies.forget(&route, &key);
                if let (Some(redis), Some(scope)) = (&redis, scope) {
                    redis.delete(&route, &scope, &key);
                }
            }
            Heard::Listening => copies.forget_all(),
        }
    })
}

/// `idemgate migrate`: brings the schema up to date whatever `store.migrate`
/// says, and says from which version.
pub async fn migrate(config: &StoreConfig) -> Result<MigrationReport, StoreError> {
    match config {
        StoreConfig::Embedded(embedded) => {
            let path = embedded.path.clone();
            tokio::task::spawn_blocking(move || EmbeddedStore::migrate(&path))
                .await
                .map_err(opening)?
        }
        StoreConfig::Postgres(pg) => PostgresStore::lazy(pg)?.migrate().await,
    }
}

/// Whether the embedded store is opened by `serve`, which locks the file
/// against a second gateway, or by a one-shot command, which must work
/// beside a running one.
#[derive(Clone, Copy, PartialEq)]
enum Serving {
    Yes,
    No,
}

async fn open_embedded(
    config: &StoreConfig,
    serving: Serving,
) -> Result<(EmbeddedStore, MigrationReport), StoreError> {
    let StoreConfig::Embedded(embedded) = config else {
        return Err(StoreError::invariant("not an embedded store"));
    };
    let (path, durability) = (embedded.path.clone(), embedded.durability);
    // Opening creates the file and runs the schema: blocking work.
    tokio::task::spawn_blocking(move || {
        let clock = super::embedded::Clock::system();
        if serving == Serving::Yes {
            EmbeddedStore::open_for_serving(&path, durability, clock)
        } else {
            EmbeddedStore::open_reporting(&path, durability, clock)
        }
    })
    .await
    .map_err(opening)?
}

/// The blocking task that opened the store did not finish.
fn opening(err: tokio::task::JoinError) -> StoreError {
    Unavailable::Opening(Arc::new(err)).into()
}

/// (interval, batch) of the background sweeper for the configured backend.
pub fn sweep_settings(config: &StoreConfig) -> (Duration, u32) {
    match config {
        StoreConfig::Embedded(c) => (c.sweep_interval, c.sweep_batch),
        StoreConfig::Postgres(c) => (c.sweep_interval, c.sweep_batch),
    }
}

pub trait StoreConfigExt {
    /// `embedded` or `postgres`, for messages.
    fn backend_name(&self) -> &'static str;
}

impl StoreConfigExt for StoreConfig {
    fn backend_name(&self) -> &'static str {
        match self {
            StoreConfig::Embedded(_) => "embedded",
            StoreConfig::Postgres(_) => "postgres",
        }
    }
}

/// Every setting of `config` that opening the store would refuse, read as
/// opening reads it (the same functions) but connecting to nothing.
pub fn unusable_settings(config: &StoreConfig) -> Vec<super::SettingError> {
    let StoreConfig::Postgres(pg) = config else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    errors.extend(super::postgres::settings_error(pg));
    if let Some(redis) = &pg.redis {
        errors.extend(super::cache::settings_error(redis));
    }
    errors
}
