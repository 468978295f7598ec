//! The PostgreSQL store: the authority for any number of gateway replicas.
//!
//! Every transition is one statement (see `sql`), so the database decides
//! under the primary key and no replica ever reads-then-writes. A new key
//! costs two round trips (reserve, complete), a replay one. Statements are
//! prepared once per pooled connection (`prepare_cached`).
//!
//! **Schema per deployment (and per test).** Tables are created unqualified,
//! in the first schema of the connection's `search_path`; put it in the URL:
//! `postgres://…/db?options=-c%20search_path%3Dmy_schema`. The schema must
//! exist. Without it, PostgreSQL's default (`public`) is used.
//!
//! **Errors** are `Unavailable` with a `PostgresCause`, which keeps the
//! driver's error as its source; neither holds the URL or the password.

mod batch;
pub(in crate::store) mod cause;
mod connect;
mod count;
mod crowded;
mod grant;
mod lent;
mod listing;
mod many;
mod migrations;
#[cfg(test)]
mod plans;
mod pool;
mod pooler;
mod privileges;
mod purges;
mod read_only;
mod ready;
mod rows;
mod server;
mod sql;
mod tls;
mod unanswered;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio_postgres::types::ToSql;

pub use cause::{PostgresCause, RootCertProblem};
pub use grant::Grant;
pub use migrations::SCHEMA_VERSION;
pub use purges::{Heard, PurgeHook};
pub use unanswered::{Freed, FreedHook};

use super::{
    Kept, Lease, MigrationReport, RecordId, RecordInfo, Reservation, Store, StoreError,
    StoredResponse,
};
use crate::config::PostgresStoreConfig;
use crate::log_limit::LogLimit;
use batch::Queue;
use lent::Pool;
use many::{CompleteJob, Completed, ReserveJob, Reserved};
use pool::{db_error, pool_error};
use rows::{Decided, KeptFor, Recorded, millis};

/// How often one reservation re-runs `RESERVE` when its snapshot missed a row
/// committed concurrently. Each run after the first sees a newer snapshot, so
/// more than two is rare; the bound only turns a pathological churn into an
/// error instead of a spin.
const RESERVE_ATTEMPTS: usize = 10;

/// How many times a reservation, a release, a read or a ping whose
/// connection died under it runs again, each time on another connection, at
/// least: as many times as the pool holds connections (`reconnects`), since
/// after every session was terminated each of them may be lent before the
/// pool sees it closed. A dead connection fails at once, without a round
/// trip, and a database that is down fails to connect, which is not retried.
const RECONNECTS: usize = 2;

/// Pause before retrying a failed completion, doubled up to `COMPLETE_RETRY_MAX`.
const COMPLETE_RETRY_FIRST: Duration = Duration::from_millis(50);
const COMPLETE_RETRY_MAX: Duration = Duration::from_millis(500);

#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// Upper bound of one operation (waiting for a connection, then the
    /// statement), so a database that stops answering — a cut network, not a
    /// refused connection — fails the request instead of hanging it. The
    /// connection left without its answer is closed (`lent`).
    deadline: Duration,
    /// Reservations and completions share statements under load (`batch`);
    /// `None` for a store built outside a runtime.
    batches: Option<Arc<Batches>>,
    /// For connections outside the pool (the purge listener).
    settings: tokio_postgres::Config,
    /// Their TLS, when the URL asks for it (`tls`).
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// `store.statement_timeout`, which every session must have (`pooler`).
    statement_timeout: Duration,
    /// Which store this is (`migrations::identity`), read by `connect`;
    /// empty for a store that has not connected.
    identity: Arc<str>,
    /// Who hears what freeing a reservation given up came to.
    counting: unanswered::Counting,
    /// Read-only sessions seen: the pool drops connections made before
    /// (`read_only`).
    read_only: read_only::Sightings,
}

struct Batches {
    reserve: Queue<ReserveJob>,
    complete: Queue<CompleteJob>,
}

impl Batches {
    fn start(
        pool: &Pool,
        deadline: Duration,
        pool_size: usize,
        counting: &unanswered::Counting,
    ) -> Option<Batches> {
        let workers = batch::workers_for(pool_size);
        let reserving = pool.clone();
        let completing = pool.clone();
        let counting = counting.clone();
        Some(Batches {
            reserve: Queue::start(workers, move |jobs| {
                let (pool, counting) = (reserving.clone(), counting.clone());
                async move { many::reserve(&pool, deadline, &counting, jobs).await }
            })?,
            complete: Queue::start(workers, move |jobs| {
                let pool = completing.clone();
                async move { many::complete(&pool, deadline, jobs).await }
            })?,
        })
    }
}

/// What opening this store would refuse of its settings (the URL, its TLS
/// parameters and `sslrootcert` file), found without connecting.
pub fn settings_error(config: &PostgresStoreConfig) -> Option<super::setting::SettingError> {
    pool::settings(config).err()
}

impl PostgresStore {
    /// Builds the pool and applies pending migrations (`config.migrate`), or
    /// checks that the schema is this binary's. Connects once to do so: a
    /// database that is down at start is an error here.
    pub async fn connect(config: &PostgresStoreConfig) -> Result<PostgresStore, StoreError> {
        Self::connect_reporting(config)
            .await
            .map(|(store, _)| store)
    }

    /// `connect`, also saying what it found of the schema and applied
    /// (`serve` logs it).
    pub async fn connect_reporting(
        config: &PostgresStoreConfig,
    ) -> Result<(PostgresStore, MigrationReport), StoreError> {
        let mut store = Self::lazy(config)?;
        let report = if config.migrate {
            store.migrate().await?
        } else {
            store.vet().await?;
            let mut client = store.pool.get().await.map_err(pool_error)?;
            migrations::check(&mut client).await?
        };
        let client = store.pool.get().await.map_err(pool_error)?;
        store.identity = migrations::identity(&client).await?.into();
        Ok((store, report))
    }

    /// What tells this store from another (another database, or another
    /// schema of one): the same for every replica that shares its records.
    /// Empty until `connect`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Builds the pool without touching the database.
    pub fn lazy(config: &PostgresStoreConfig) -> Result<PostgresStore, StoreError> {
        let (settings, tls) = pool::settings(config)?;
        let read_only = read_only::Sightings::new();
        let pool = pool::build(config, settings.clone(), tls.clone(), read_only.hook())?;
        let deadline = config.connect_timeout + config.statement_timeout + Duration::from_secs(1);
        let counting = unanswered::Counting::default();
        let batches = Batches::start(&pool, deadline, config.pool_size, &counting).map(Arc::new);
        Ok(PostgresStore {
            pool,
            deadline,
            batches,
            settings,
            tls,
            statement_timeout: config.statement_timeout,
            identity: Arc::from(""),
            counting,
            read_only,
        })
    }

    /// Tells `hook` what each freeing of a reservation given up came to
    /// (`unanswered`); the first hook given stays.
    pub fn count_unanswered(&self, hook: FreedHook) {
        self.counting.set(hook);
    }

    /// Refuses a role that lacks a privilege a serving gateway needs
    /// (`privileges`): `serve` checks at start, where the role's every
    /// keyed request would otherwise fail.
    pub async fn require_privileges(&self) -> Result<(), StoreError> {
        let missing = self.read(privileges::MISSING, &[]).await?;
        privileges::refuse(&missing)
    }

    /// Hears of purges made through any replica (see `purges`) until the
    /// returned guard is dropped.
    pub fn follow_purges(&self, hook: PurgeHook) -> tokio_util::sync::DropGuard {
        let stop = tokio_util::sync::CancellationToken::new();
        purges::spawn(self.settings.clone(), self.tls.clone(), hook, stop.clone());
        stop.drop_guard()
    }

    /// Applies the migrations this database lacks (under an advisory lock, safe
    /// from many replicas at once); says which it applied now, and the
    /// version found.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        self.vet().await?;
        let mut client = self.pool.get().await.map_err(pool_error)?;
        migrations::migrate(&mut client).await
    }

    /// Refuses what a connection pooler in between would break without a
    /// word (`pooler`): before anything is prepared, or written to a schema
    /// the URL did not name. Bounded as an operation is: a server that
    /// accepts connections and never answers would hold the start for good.
    async fn vet(&self) -> Result<(), StoreError> {
        self.bounded(pooler::sessions_own(&self.settings, self.tls.as_ref()))
            .await?;
        self.bounded(async {
            let client = self.pool.get().await.map_err(pool_error)?;
            pooler::options_applied(&client, self.settings.get_options(), self.statement_timeout)
                .await
        })
        .await
    }

    /// `reserve`, also telling how long a replayed answer stays replayable
    /// (the cache in front of this store uses it as TTL).
    pub async fn reserve_with_ttl(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<KeptFor>), StoreError> {
        // The database times the lease by its clock, which ours may be
        // skewed from: by ours, the lease holds at least `lease_for` from
        // when the request was sent, as the database started it after that.
        let sent = SystemTime::now();
        let decided =
            self.reserve_deciding(id, fingerprint, lease_for)
                .await
                .map(|(reservation, kept)| match reservation {
                    Reservation::Reserved(lease) => (
                        Reservation::Reserved(Lease {
                            expires_here: sent + lease_for,
                            ..lease
                        }),
                        kept,
                    ),
                    other => (other, kept),
                });
        self.noting(decided)
    }

    async fn reserve_deciding(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<KeptFor>), StoreError> {
        let lease_ms = millis(lease_for);
        // One claim for every run of this reservation (`unanswered`).
        let claim = unanswered::claim();
        // Whether a run whose answer never came may have committed.
        let mut may_have_committed = false;
        if let Some(batches) = &self.batches {
            let (reply, replied) = tokio::sync::oneshot::channel();
            let job = ReserveJob {
                id: id.clone(),
                fingerprint: fingerprint.to_owned(),
                lease_ms,
                claim,
                reply,
            };
            if batches.reserve.push(job).is_ok() {
                // A batch given up (a failure, or this wait's deadline) is
                // freed by its worker when it may have committed.
                let decided = self
                    .bounded(async {
                        replied
                            .await
                            .map_err(|_| StoreError::from(PostgresCause::BatchDropped))?
                    })
                    .await?;
                match decided {
                    Reserved::Done(reservation, kept) => return Ok((reservation, kept)),
                    Reserved::Alone {
                        may_have_committed: maybe,
                    } => may_have_committed = maybe,
                }
            }
        }
        let (route, scope, key) = id.parts();
        let claim_bytes: &[u8] = &claim;
        let params: [&(dyn ToSql + Sync); 6] =
            [&route, &scope, &key, &fingerprint, &lease_ms, &claim_bytes];
        // A connection that died under the statement (a session cut, the
        // database restarted; the pool may still hold such connections) is
        // left for another: the request would otherwise fail (503, or pass
        // without a record). Running `RESERVE` again is safe even if the lost
        // run committed: the record is then found under this claim, and is
        // this reservation's (never reserved twice, never refused by itself).
        let reconnects = self.reconnects();
        let reserved = self
            .bounded(async {
                let mut lost = 0;
                'connection: loop {
                    let client = self.pool.get().await.map_err(pool_error)?;
                    let stmt = match client.prepare_cached(sql::RESERVE).await {
                        Ok(stmt) => stmt,
                        Err(e) if Failure::lost(&client, &e) && lost < reconnects => {
                            lost += 1;
                            continue 'connection;
                        }
                        Err(e) => return Err(db_error(e)),
                    };
                    for _ in 0..RESERVE_ATTEMPTS {
                        // Until its answer says otherwise, this run may commit.
                        let earlier = may_have_committed;
                        may_have_committed = true;
                        let rows = match client.query(&stmt, &params).await {
                            Ok(rows) => rows,
                            Err(e) if Failure::lost(&client, &e) && lost < reconnects => {
                                lost += 1;
                                continue 'connection;
                            }
                            Err(e) => {
                                if !Failure::lost(&client, &e) && e.as_db_error().is_some() {
                                    // Refused by the database: this run wrote nothing.
                                    may_have_committed = earlier;
                                }
                                return Err(db_error(e));
                            }
                        };
                        may_have_committed = earlier;
                        if let Decided::Done { reservation, kept } = rows::decide(id, &rows)? {
                            return Ok((reservation, kept));
                        }
                    }
                    return Err(PostgresCause::KeyKeptChanging.into());
                }
            })
            .await;
        if reserved.is_err() && may_have_committed {
            unanswered::free(
                self.pool.clone(),
                self.deadline,
                self.counting.clone(),
                unanswered::Claimed::new(id.clone(), claim, lease_for, self.deadline),
                unanswered::Why::AnswerLost,
            );
        }
        reserved
    }

    /// `complete`, returning the record's fingerprint beside its expiry
    /// (same single statement).
    pub async fn complete_recorded(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<Recorded, StoreError> {
        let id = &lease.id;
        let (route, scope, key) = id.parts();
        let (names, values) = rows::header_arrays(response);
        let status = i32::from(response.status);
        let body: &[u8] = &response.body;
        let retain_ms = millis(retain_for);
        let params: [&(dyn ToSql + Sync); 11] = [
            &route,
            &scope,
            &key,
            &lease.token,
            &status,
            &names,
            &values,
            &body,
            &response.body_omitted,
            &retain_ms,
            &response.outcome_unknown,
        ];
        // The request has run and its answer is about to be acknowledged:
        // recording it is worth waiting for, as long as the lease holds (a
        // completion that gives up leaves the key to a takeover that runs the
        // request again, after the client was given its answer). So a failed
        // attempt — a busy pool, a connection that died under the statement
        // (database restarted, session terminated), a database that cannot be
        // reached for a moment — is retried until the lease runs out. Nobody
        // else can take the key meanwhile, and the token fences every attempt.
        let mut retry = super::LeaseRetry::new(COMPLETE_RETRY_FIRST, COMPLETE_RETRY_MAX);
        let mut may_have_committed = false;
        if let Some(batches) = &self.batches {
            let (reply, replied) = tokio::sync::oneshot::channel();
            let job = CompleteJob {
                lease: lease.clone(),
                response: response.clone(),
                retain_ms,
                reply,
            };
            if batches.complete.push(job).is_ok() {
                // The worker bounds its statement by the deadline; a dropped
                // reply means it is gone, mid-statement or not.
                match replied.await.unwrap_or(Completed::Alone {
                    may_have_committed: true,
                }) {
                    Completed::Done(recorded) => return Ok(recorded),
                    Completed::Fenced => return Err(StoreError::Fenced),
                    Completed::Alone {
                        may_have_committed: maybe,
                    } => may_have_committed = maybe,
                }
            }
        }
        loop {
            let patience = lease
                .expires_here
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .max(self.deadline);
            let failure = match self.try_query(sql::COMPLETE, &params, Some(patience)).await {
                Ok(rows) => match rows.first() {
                    Some(row) => return rows::recorded(row),
                    None if !may_have_committed => return Err(StoreError::Fenced),
                    // An earlier attempt may have committed before its
                    // connection died: ask by token.
                    None => match self
                        .try_query(
                            sql::COMPLETED_BY,
                            &[&route, &scope, &key, &lease.token],
                            None,
                        )
                        .await
                    {
                        Ok(mine) => {
                            return rows::recorded(mine.first().ok_or(StoreError::Fenced)?);
                        }
                        Err(failure) => failure,
                    },
                },
                Err(failure) => failure,
            };
            may_have_committed = true;
            let err = failure.into_error();
            let Some(pause) = retry.pause_within(lease) else {
                return Err(err);
            };
            warn_completion_retried(route, &err, pause);
            retry.sleep(pause).await;
        }
    }

    /// `purge`, telling which scopes were deleted; once it has deleted any,
    /// it returns when every replica has had the time to hear of it.
    pub async fn purge_scopes(&self, route: &str, key: &str) -> Result<Vec<String>, StoreError> {
        let deleted = self.query(sql::PURGE, &[&route, &key]).await?;
        if !deleted.is_empty() {
            tokio::time::sleep(purges::HEARD_WITHIN).await;
        }
        deleted
            .iter()
            .map(|row| row.try_get(0).map_err(db_error))
            .collect()
    }

    /// Runs one statement (prepared once per connection); returns its rows.
    async fn query(
        &self,
        query: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.try_query(query, params, None)
            .await
            .map_err(Failure::into_error)
    }

    /// `query` for a statement that writes nothing, run again on another
    /// connection (twice at most) when its own turns out dead: the pool may
    /// lend one whose end (`pg_terminate_backend`, a restart) has not
    /// reached it yet, and a read run twice changes nothing.
    async fn read(
        &self,
        query: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let (mut lost, reconnects) = (0, self.reconnects());
        loop {
            match self.try_query(query, params, None).await {
                Ok(rows) => return Ok(rows),
                Err(Failure::ConnectionLost(_)) if lost < reconnects => lost += 1,
                Err(failure) => return Err(failure.into_error()),
            }
        }
    }

    /// `query`, telling apart a statement lost with its connection; `patience`
    /// replaces the pool's wait for a free connection.
    async fn try_query(
        &self,
        query: &str,
        params: &[&(dyn ToSql + Sync)],
        patience: Option<Duration>,
    ) -> Result<Vec<tokio_postgres::Row>, Failure> {
        let mut timeouts = self.pool.timeouts();
        if patience.is_some() {
            timeouts.wait = patience;
        }
        let work = async {
            let client = self
                .pool
                .timeout_get(&timeouts)
                .await
                .map_err(|e| Failure::Other(pool_error(e)))?;
            let stmt = client
                .prepare_cached(query)
                .await
                .map_err(|e| Failure::classify(&client, e))?;
            client
                .query(&stmt, params)
                .await
                .map_err(|e| Failure::classify(&client, e))
        };
        let deadline = self.deadline + patience.unwrap_or_default();
        let result = match lent::within(deadline, work).await {
            Some(result) => result,
            None => Err(Failure::Other(self.too_slow())),
        };
        if let Err(Failure::ConnectionLost(error) | Failure::Other(error)) = &result {
            self.read_only.note(error);
        }
        result
    }

    /// `result`, its error noted when the server refused a write as
    /// read-only (`read_only`).
    fn noting<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(error) = &result {
            self.read_only.note(error);
        }
        result
    }

    async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        lent::within(self.deadline, work)
            .await
            .unwrap_or_else(|| Err(self.too_slow()))
    }

    /// See `RECONNECTS`.
    fn reconnects(&self) -> usize {
        RECONNECTS.max(self.pool.max_size())
    }

    fn too_slow(&self) -> StoreError {
        PostgresCause::NoAnswer(self.deadline).into()
    }
}

/// Logs a completion about to be tried again, per route at once and then
/// once per interval with the count left out (crate::log_limit): while the
/// database is down each completion is retried every half second until its
/// lease ends, and every request in flight has one.
fn warn_completion_retried(route: &str, err: &StoreError, pause: Duration) {
    static LIMIT: LogLimit = LogLimit::uncounted();
    if let Some(left_out) = LIMIT.admit(route) {
        tracing::warn!(route, error = %err, retry_in_ms = pause.as_millis() as u64,
            not_logged = left_out.count(),
            "completing failed; retrying while the lease holds{left_out}");
    }
}

/// A failed statement, and whether its connection died under it.
enum Failure {
    ConnectionLost(StoreError),
    Other(StoreError),
}

impl Failure {
    /// Whether the statement failed because its connection is gone.
    fn lost(client: &deadpool_postgres::Client, err: &tokio_postgres::Error) -> bool {
        pool::session_lost(client, err)
    }

    fn classify(client: &deadpool_postgres::Client, err: tokio_postgres::Error) -> Failure {
        if Failure::lost(client, &err) {
            Failure::ConnectionLost(db_error(err))
        } else {
            Failure::Other(db_error(err))
        }
    }

    fn into_error(self) -> StoreError {
        match self {
            Failure::ConnectionLost(err) | Failure::Other(err) => err,
        }
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        let (reservation, kept) = self.reserve_with_ttl(id, fingerprint, lease_for).await?;
        Ok((reservation, kept.map(KeptFor::kept)))
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        self.complete_recorded(lease, response, retain_for)
            .await
            .map(|recorded| recorded.expires_at)
    }

    /// A statement lost with its connection (a session cut, the database
    /// restarted: the pool may still hold such connections) is run again on
    /// another: a release that fails leaves the key in flight, refusing its
    /// retries until the lease runs out. Deleting by token is idempotent.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let (route, scope, key) = lease.id.parts();
        let params: [&(dyn ToSql + Sync); 4] = [&route, &scope, &key, &lease.token];
        let (mut lost, reconnects) = (0, self.reconnects());
        loop {
            match self.try_query(sql::RELEASE, &params, None).await {
                Ok(_) => return Ok(()),
                Err(Failure::ConnectionLost(_)) if lost < reconnects => lost += 1,
                Err(failure) => return Err(failure.into_error()),
            }
        }
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        let found = self.read(sql::RECORDS, &[&route, &key]).await?;
        found.iter().map(rows::record_info).collect()
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        Ok(self.purge_scopes(route, key).await?.len() as u64)
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        let swept = self.bounded(async {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            let tx = client.transaction().await.map_err(db_error)?;
            tx.batch_execute(sql::SWEEP_PLAN).await.map_err(db_error)?;
            let stmt = tx.prepare_cached(sql::SWEEP).await.map_err(db_error)?;
            let mut deleted = tx
                .execute(&stmt, &[&i64::from(batch)])
                .await
                .map_err(db_error)?;
            let room = u64::from(batch).saturating_sub(deleted);
            if room > 0 {
                let stmt = tx
                    .prepare_cached(sql::SWEEP_DEAD_LEASES)
                    .await
                    .map_err(db_error)?;
                let room = i64::try_from(room).unwrap_or(i64::MAX);
                deleted += tx.execute(&stmt, &[&room]).await.map_err(db_error)?;
            }
            tx.commit().await.map_err(db_error)?;
            Ok(deleted)
        });
        self.noting(swept.await)
    }

    /// Runs again on another connection when the pool handed out one that
    /// had died (a session terminated, the database restarted), as a
    /// reservation does: `/readyz` must not take a replica out of service
    /// for a connection the next request would not use either.
    async fn ping(&self) -> Result<(), StoreError> {
        let (mut lost, reconnects) = (0, self.reconnects());
        loop {
            match self.try_query(ready::READY, &[], None).await {
                Ok(rows) => {
                    if ready::read_only(&rows) {
                        self.read_only.seen();
                        return Err(PostgresCause::ReadOnly.into());
                    }
                    // A grant revoked while serving fails every keyed
                    // request: not ready, saying which.
                    return privileges::refuse(&rows);
                }
                Err(Failure::ConnectionLost(_)) if lost < reconnects => lost += 1,
                Err(failure) => return Err(failure.into_error()),
            }
        }
    }

    async fn list(
        &self,
        query: &crate::store::ListQuery,
    ) -> Result<crate::store::Page, StoreError> {
        self.noting(listing::list(self, query).await)
    }

    async fn count(&self) -> Result<Vec<crate::store::Count>, StoreError> {
        self.noting(count::count(self, crate::store::CountLimits::default()).await)
    }
}
