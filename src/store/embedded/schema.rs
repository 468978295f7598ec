//! Opening the SQLite file: pragmas, schema creation and the version check.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::cause::{EmbeddedCause, FileUse};
use crate::store::{MigrationReport, StoreError};

/// Bumped by every schema change; an older binary refuses a newer file rather
/// than misreading it.
pub const SCHEMA_VERSION: i64 = 3;

/// Long enough to ride out another process (`idemgate sweep`, `keys purge`)
/// holding the write lock for one transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of WAL kept after a checkpoint (`journal_size_limit`): four times
/// what the automatic checkpoint (1000 pages) lets it reach in steady state.
pub(super) const WAL_SIZE_LIMIT: i64 = 16 * 1024 * 1024;

/// `state` column values.
pub(super) const IN_FLIGHT: i64 = 0;
pub(super) const COMPLETED: i64 = 1;

/// The records table under `name`. The key comes before the scope in the
/// primary key: the scope is the same 64-character hash for every row of a
/// single-tenant route, and in front it would be compared in full at every
/// B-tree step; behind the key it is reached only by rows of the same key, and
/// `records`/`purge` (route and key, every scope) read one range of the index.
fn records_table(name: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {name} (
    route            TEXT    NOT NULL,
    scope            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    state            INTEGER NOT NULL CHECK (state IN (0, 1)),
    fingerprint      TEXT    NOT NULL,
    token            INTEGER NOT NULL,
    status           INTEGER NULL,
    headers          BLOB    NULL,
    body             BLOB    NULL,
    body_omitted     INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER NULL,
    expires_at       INTEGER NULL,
    lease_expires_at INTEGER NULL,
    outcome_unknown  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (route, key, scope)
);"
    )
}

/// Version 1 had the primary key (route, scope, key). Its rows move to a
/// table of the new shape once, inside the opening transaction: a crash
/// midway leaves the version 1 file as it was.
const FROM_VERSION_1: &str = "
INSERT INTO records_v2 (route, scope, key, state, fingerprint, token, status,
    headers, body, body_omitted, created_at, completed_at, expires_at, lease_expires_at)
    SELECT route, scope, key, state, fingerprint, token, status,
    headers, body, body_omitted, created_at, completed_at, expires_at, lease_expires_at
    FROM records;
DROP TABLE records;
ALTER TABLE records_v2 RENAME TO records;
";

const INDEXES_AND_META: &str = "
-- Only completed rows have an expiry, and only the sweeper looks rows up by
-- it: in-flight rows stay out of the index, so a reservation and its
-- completion touch it once, not three times. Files made before this index
-- had one over every row; it is dropped.
CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_at)
    WHERE expires_at IS NOT NULL;
DROP INDEX IF EXISTS records_expires_at;
-- Fencing tokens come from one sequence, not from the row: a row is deleted on
-- release, purge and sweep, and a per-row counter restarting at 1 would hand
-- a late holder's token to a new holder of the same key.
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (name, value) VALUES ('last_token', 0);
";

/// Version 2 had no `outcome_unknown` column: added, and set once for the
/// records completed with the gateway's own outcome-unknown problem (its
/// status, and the start its body always has); the gateway marks the ones it
/// writes.
const FROM_VERSION_2: &str = "
ALTER TABLE records ADD COLUMN outcome_unknown INTEGER NOT NULL DEFAULT 0;
";

/// Run after every migration that can leave unmarked outcome-unknown rows.
const MARK_OUTCOME_UNKNOWN: &str = "
UPDATE records SET outcome_unknown = 1
    WHERE state = 1 AND status IN (502, 504)
      AND substr(body, 1, 51) = CAST('{\"type\":\"outcome-unknown\",\"title\":\"Outcome unknown\"' AS BLOB);
";

/// The operators' listing (`GET /admin/keys/{route}`) and counting
/// (`idemgate_records`): per route and state, oldest first, with the expiry
/// at the end so that counting unexpired records reads this index alone.
const LISTING_INDEX: &str = "
CREATE INDEX IF NOT EXISTS records_listing ON records
    (route, state, outcome_unknown, created_at, key, scope, expires_at);
";

/// The start of a statement that reads every route of the table, one
/// descent of the primary key each (a loose index scan), as `routes`.
macro_rules! with_routes {
    () => {
        "
WITH RECURSIVE routes(route) AS (
    SELECT min(route) FROM records
    UNION ALL
    SELECT (SELECT min(route) FROM records WHERE route > routes.route)
    FROM routes WHERE routes.route IS NOT NULL
)
"
    };
}
pub(super) use with_routes;

/// The WAL SQLite keeps beside the store file `path`: `<file>-wal`.
pub(super) fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Creates the directories the store file goes in.
pub(super) fn create_parent(path: &Path) -> Result<(), StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| EmbeddedCause::file(FileUse::Creating, parent, e))?;
    }
    Ok(())
}

/// For the unit tests, which want the connection alone.
#[cfg(test)]
pub(super) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    open_and_migrate(path).map(|(conn, _)| conn)
}

/// Opens the file and brings its schema to `SCHEMA_VERSION`; also says the
/// version the file had (0: a new file), for `serve`'s and `idemgate
/// migrate`'s report.
pub(super) fn open_and_migrate(path: &Path) -> Result<(Connection, MigrationReport), StoreError> {
    create_parent(path)?;
    let fail = |e: rusqlite::Error| EmbeddedCause::Opening {
        path: path.to_owned(),
        source: Arc::new(e),
    };
    let mut conn = Connection::open(path).map_err(fail)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;

    // Checked before anything writes to the file.
    let version = user_version(&conn).map_err(fail)?;
    refuse_newer(path, version)?;

    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(fail)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(EmbeddedCause::NoWal {
            path: path.to_owned(),
            mode,
        }
        .into());
    }
    // NORMAL: a commit is not synced by SQLite; the writer syncs the WAL
    // after each batch (`sync_wal`), which with NORMAL's own syncs around a
    // checkpoint makes every commit as durable as FULL would (`writer`).
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(fail)?;
    // The WAL grows past its usual few MiB while something holds back
    // checkpoints (a reader left in a transaction, a burst), and SQLite
    // keeps a WAL at its largest size for good: truncated back to this
    // once a checkpoint has caught up.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .map_err(fail)?;

    // IMMEDIATE, and the version read again inside: two processes opening a
    // version 1 file at once must not both move its rows.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    let version = user_version(&tx).map_err(fail)?;
    refuse_newer(path, version)?;
    if version == 1 {
        tx.execute_batch(&records_table("records_v2"))
            .and_then(|()| tx.execute_batch(FROM_VERSION_1))
            .map_err(fail)?;
    } else if version == 2 {
        tx.execute_batch(FROM_VERSION_2).map_err(fail)?;
    } else {
        tx.execute_batch(&records_table("records")).map_err(fail)?;
    }
    if version == 1 || version == 2 {
        tx.execute_batch(MARK_OUTCOME_UNKNOWN).map_err(fail)?;
    }
    tx.execute_batch(INDEXES_AND_META).map_err(fail)?;
    tx.execute_batch(LISTING_INDEX).map_err(fail)?;
    // A file already at this version is left unwritten: a command opening
    // it beside a serving gateway (`keys list`, `keys show`) would otherwise
    // commit, and the gateway drops its replay copies on any commit made
    // elsewhere (`writes_elsewhere`).
    if version != SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(fail)?;
    }
    tx.commit().map_err(fail)?;
    Ok((conn, MigrationReport::stepped(version, SCHEMA_VERSION)))
}

/// The schema version of an existing file, read without writing anything
/// (no migration, no file made); `None` when it cannot be read.
pub(super) fn version_on_disk(path: &Path) -> Option<i64> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.busy_timeout(BUSY_TIMEOUT).ok()?;
    user_version(&conn).ok()
}

/// Whether the file at `path` is one SQLite opens as a database (an empty
/// file is one yet to be written). Asked of SQLite, never read through a
/// descriptor of our own: closing any descriptor of a file drops every POSIX
/// lock the process holds on it, SQLite's included, and a gateway serving
/// the file (a reload asks again) would lose the lock that keeps another
/// process's connection from checkpointing and deleting the WAL when it
/// closes. SQLite keeps such a descriptor open while its locks are held.
/// Any other failure is left to opening the store, which says why.
pub fn holds_a_database(path: &Path) -> bool {
    let Ok(conn) = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return true;
    };
    !matches!(user_version(&conn), Err(rusqlite::Error::SqliteFailure(e, _))
        if e.code == rusqlite::ErrorCode::NotADatabase)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

fn refuse_newer(path: &Path, version: i64) -> Result<(), StoreError> {
    if version > SCHEMA_VERSION {
        return Err(EmbeddedCause::SchemaNewer {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        }
        .into());
    }
    Ok(())
}
