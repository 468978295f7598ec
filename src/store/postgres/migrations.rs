//! Versioned schema migrations, embedded in the binary.
//!
//! Everything runs in one transaction that first takes a transaction-level
//! advisory lock: replicas starting together queue on the lock, the first
//! applies what is missing, the others then find nothing to do. DDL is
//! transactional in PostgreSQL, so a failed migration leaves no half schema,
//! and the lock is released by the commit, the rollback or a dropped session.

use std::sync::Arc;

use deadpool_postgres::{Client, GenericClient};

use super::cause::PostgresCause;
use super::pool::db_error;
use crate::store::{MigrationReport, StoreError, Unavailable};

/// (version, SQL), in order. Append only: a released migration never changes.
pub(super) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/0001_records.sql")),
    (2, include_str!("migrations/0002_listing.sql")),
];

/// The schema version this binary reads and writes.
pub const SCHEMA_VERSION: i64 = 2;

/// First key of the two-key advisory lock ("idem" in ASCII); the second is the
/// hash of the target schema, so migrations of different schemas in one
/// database (tests, several deployments) do not wait on each other.
const LOCK_CLASS: i32 = 0x6964_656d;

const LOCK: &str = "SELECT pg_advisory_xact_lock($1, coalesce(hashtext(current_schema()), 0))";

/// Keeps the session's `statement_timeout` aside (the custom setting
/// lives as long as the transaction), then lifts it, and any `lock_timeout`
/// the role sets: the wait for another replica's migration lasts as long as
/// that migration does.
const BOUND_LOCK_WAITS_ONLY: &str =
    "SELECT set_config('idemgate.lock_wait', current_setting('statement_timeout'), true);
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0";

/// Once this migration holds the advisory lock (which the other replicas
/// may wait on for as long as it runs): table locks are waited for no
/// longer than the statement timeout set aside.
const AFTER_THE_LOCK: &str =
    "SELECT set_config('lock_timeout', current_setting('idemgate.lock_wait'), true)";

const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS idemgate_schema_migrations (
    version    bigint      PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

const CURRENT: &str = "SELECT coalesce(max(version), 0) FROM idemgate_schema_migrations";

/// Where the tables go: the first schema of `search_path` that exists (NULL
/// when none does), and the path itself for the message.
const TARGET: &str = "SELECT current_schema(), current_setting('search_path')";

const LEDGER_EXISTS: &str = "SELECT to_regclass('idemgate_schema_migrations') IS NOT NULL";

/// Applies every migration the database lacks; says which, and the version
/// found. Refuses a database whose schema is newer than this binary.
pub async fn migrate(client: &mut Client) -> Result<MigrationReport, StoreError> {
    // Up to date (every start but an upgrade's): read, not locked and
    // written, so that a gateway that starts against a server taking no
    // writes (a standby still at the address during a failover) starts and
    // says it is not ready, instead of failing on the ledger's DDL.
    match check(&mut *client).await {
        Err(StoreError::Unavailable(Unavailable::Postgres(PostgresCause::SchemaOlder {
            ..
        }))) => {}
        checked => return checked,
    }
    let tx = client.transaction().await.map_err(db_error)?;
    // "already exists, skipping" notices are expected on every start: keep
    // them out of the gateway's log.
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await
        .map_err(db_error)?;
    // `statement_timeout` bounds a request's statements, not a migration:
    // building an index over a large table takes what it takes, and the
    // replicas queued on the lock meanwhile wait for it instead of failing
    // to start. Only waiting for the table's locks stays bounded (by the
    // same setting), so the DDL does not queue behind a long transaction
    // while every request queues behind it.
    tx.batch_execute(BOUND_LOCK_WAITS_ONLY)
        .await
        .map_err(db_error)?;
    let schema = require_schema(&tx).await?;
    tx.execute(LOCK, &[&LOCK_CLASS]).await.map_err(db_error)?;
    tx.batch_execute(AFTER_THE_LOCK).await.map_err(db_error)?;
    // Read before any DDL: once a statement fails, the transaction answers
    // nothing more, and a refusal is told by who owns the tables.
    let owner: Option<String> = tx
        .query_opt(FOREIGN_OWNER, &[])
        .await
        .map_err(db_error)?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(db_error)?;
    let refused = |e| refused(e, &schema, owner.as_deref());
    tx.batch_execute(CREATE_LEDGER).await.map_err(refused)?;
    let current: i64 = tx
        .query_one(CURRENT, &[])
        .await
        .map_err(db_error)?
        .try_get(0)
        .map_err(db_error)?;
    refuse_newer(current)?;
    let mut applied = Vec::new();
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql).await.map_err(|e| {
            if lacks_privilege(&e) {
                return refused(e);
            }
            PostgresCause::Migration {
                version: *version,
                source: Arc::new(e),
            }
            .into()
        })?;
        tx.execute(
            "INSERT INTO idemgate_schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(db_error)?;
        applied.push(*version);
    }
    tx.commit().await.map_err(db_error)?;
    Ok(MigrationReport {
        found: current,
        now: SCHEMA_VERSION,
        applied,
    })
}

/// The database, the schema and the instant its first migration was
/// applied (in microseconds since the epoch, whatever the session's time
/// zone): one store's records, whichever replica asks, and no other
/// store's, even one of the same names on another server.
const IDENTITY: &str = "SELECT current_database() || '/' || current_schema() || '/' ||
    coalesce((extract(epoch FROM min(applied_at)) * 1000000)::bigint::text, '')
FROM idemgate_schema_migrations";

/// What tells this store from another (`PostgresStore::identity`).
pub async fn identity(client: &Client) -> Result<String, StoreError> {
    client
        .query_one(IDENTITY, &[])
        .await
        .map_err(db_error)?
        .try_get(0)
        .map_err(db_error)
}

/// For `store.migrate = false`: the schema must already be exactly this
/// binary's (older: run `idemgate migrate`; newer: upgrade idemgate).
pub async fn check(client: &mut Client) -> Result<MigrationReport, StoreError> {
    // As a migration's own statements: not bounded by `statement_timeout`,
    // which is for requests (a fresh session's first reads of the catalog
    // can take longer than a short one on a busy server), lock waits only.
    let tx = client.transaction().await.map_err(db_error)?;
    tx.batch_execute(BOUND_LOCK_WAITS_ONLY_NOW)
        .await
        .map_err(db_error)?;
    let report = read_version(&tx).await;
    tx.commit().await.map_err(db_error)?;
    report
}

/// [`BOUND_LOCK_WAITS_ONLY`] and [`AFTER_THE_LOCK`] at once, for reads that
/// take no advisory lock.
const BOUND_LOCK_WAITS_ONLY_NOW: &str =
    "SELECT set_config('lock_timeout', current_setting('statement_timeout'), true),
            set_config('statement_timeout', '0', true)";

async fn read_version(client: &impl GenericClient) -> Result<MigrationReport, StoreError> {
    require_schema(client).await?;
    let exists: bool = client
        .query_one(LEDGER_EXISTS, &[])
        .await
        .map_err(db_error)?
        .try_get(0)
        .map_err(db_error)?;
    let current: i64 = if exists {
        client
            .query_one(CURRENT, &[])
            .await
            .map_err(db_error)?
            .try_get(0)
            .map_err(db_error)?
    } else {
        0
    };
    refuse_newer(current)?;
    if current < SCHEMA_VERSION {
        return Err(PostgresCause::SchemaOlder {
            found: current,
            needed: SCHEMA_VERSION,
        }
        .into());
    }
    Ok(MigrationReport::stepped(current, SCHEMA_VERSION))
}

/// A `search_path` naming no schema that exists (a schema not created yet, a
/// typo in the URL) is said in those words: PostgreSQL's own "no schema has
/// been selected to create in" does not tell an operator what to fix, and
/// `store.migrate = false` would say to run a migrate that fails with it.
/// Returns the schema the tables go to.
async fn require_schema(client: &impl GenericClient) -> Result<String, StoreError> {
    let row = client.query_one(TARGET, &[]).await.map_err(db_error)?;
    let schema: Option<String> = row.try_get(0).map_err(db_error)?;
    if let Some(schema) = schema {
        return Ok(schema);
    }
    let path: String = row.try_get(1).map_err(db_error)?;
    Err(PostgresCause::NoSchema { search_path: path }.into())
}

/// The owner of a store object that exists and that this role may not act
/// as: only an owner may alter a table, so a migration that changes one
/// fails for this role whatever it is granted.
const FOREIGN_OWNER: &str = "SELECT pg_get_userbyid(c.relowner) FROM pg_class c
WHERE c.oid IN (to_regclass('idemgate_records')::oid,
                to_regclass('idemgate_schema_migrations')::oid,
                to_regclass('idemgate_tokens')::oid)
  AND NOT pg_has_role(c.relowner, 'USAGE')
LIMIT 1";

/// DDL refused for want of privilege is said with the way out, which
/// PostgreSQL's "permission denied for schema" or "must be owner of table"
/// do not tell: tables another role owns (`owner`) are migrated by it; a
/// role without CREATE on the schema (`public` since PostgreSQL 15) is
/// granted it, or another role migrates.
fn refused(e: tokio_postgres::Error, schema: &str, owner: Option<&str>) -> StoreError {
    if !lacks_privilege(&e) {
        return db_error(e);
    }
    let (schema, source) = (schema.to_owned(), Arc::new(e));
    match owner {
        Some(owner) => PostgresCause::NotOwner {
            schema,
            owner: owner.to_owned(),
            source,
        },
        None => PostgresCause::MayNotCreate { schema, source },
    }
    .into()
}

fn lacks_privilege(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
}

fn refuse_newer(current: i64) -> Result<(), StoreError> {
    if current > SCHEMA_VERSION {
        return Err(PostgresCause::SchemaNewer {
            found: current,
            supported: SCHEMA_VERSION,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_and_end_at_schema_version() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|(v, _)| *v).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(versions.last(), Some(&SCHEMA_VERSION));
    }

    #[test]
    fn newer_schema_is_refused_with_both_versions() {
        let err = refuse_newer(SCHEMA_VERSION + 1).unwrap_err().to_string();
        assert!(err.contains("newer"), "{err}");
        assert!(err.contains(&(SCHEMA_VERSION + 1).to_string()), "{err}");
        assert!(refuse_newer(SCHEMA_VERSION).is_ok());
    }
}
