//! SQLite (rusqlite, bundled) as the embedded store runs it today, and
//! layouts of it: the DDL, pragmas and statements of src/store/embedded/
//! (schema.rs, ops.rs, tokens.rs, writer.rs, wal_sync.rs), parameterised.

use std::fs::File;
use std::path::Path;

use rusqlite::{Connection, params};

use crate::engine::Engine;
use crate::workload::{
    Answer, Job, Key, LEASE_MS, Outcome, Prefilled, RETAIN_MS, ROUTE, SCOPE, hex,
};

/// What a variant changes against today's store.
#[derive(Clone, Copy)]
pub struct Layout {
    /// Scope and fingerprint as 32-byte BLOBs rather than 64 hex characters:
    /// the primary key's and the listing index's entries shrink by 32 bytes.
    pub blob_hashes: bool,
    /// `cache_size` in KiB (today: SQLite's default, 2000 KiB).
    pub cache_kib: Option<i64>,
    /// `mmap_size` in bytes (today: 0).
    pub mmap_bytes: Option<i64>,
    /// `page_size` in bytes of a new file (today: SQLite's default, 4096).
    /// Every dirty page is one WAL frame of this size, and the checkpoint
    /// copies it again; `wal_autocheckpoint` stays 1000 pages, as the
    /// store leaves it.
    pub page_bytes: Option<i64>,
}

pub const TODAY: Layout = Layout {
    blob_hashes: false,
    cache_kib: None,
    mmap_bytes: None,
    page_bytes: None,
};

pub struct Sqlite {
    conn: Connection,
    wal: File,
    layout: Layout,
    answer: Answer,
}

fn schema(layout: Layout) -> String {
    let hash = if layout.blob_hashes { "BLOB" } else { "TEXT" };
    format!(
        "CREATE TABLE IF NOT EXISTS records (
    route            TEXT    NOT NULL,
    scope            {hash}  NOT NULL,
    key              TEXT    NOT NULL,
    state            INTEGER NOT NULL CHECK (state IN (0, 1)),
    fingerprint      {hash}  NOT NULL,
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
);
CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (name, value) VALUES ('last_token', 0);
CREATE INDEX IF NOT EXISTS records_listing ON records
    (route, state, outcome_unknown, created_at, key, scope, expires_at);"
    )
}

const INSERT_IN_FLIGHT: &str = "INSERT INTO records (route, scope, key, state, fingerprint,
         token, body_omitted, created_at, lease_expires_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)
     ON CONFLICT DO NOTHING";

const COMPLETE_BY_ROW: &str = "UPDATE records SET state = ?3, status = ?4, headers = ?5, body = ?6,
         body_omitted = ?7, completed_at = ?8, expires_at = ?9, lease_expires_at = NULL,
         outcome_unknown = ?11
     WHERE rowid = ?10 AND token = ?1 AND state = ?2";

const LOOK_UP: &str = "SELECT rowid, state, fingerprint, token, expires_at, lease_expires_at
     FROM records WHERE route = ?1 AND scope = ?2 AND key = ?3";

const LOAD_ANSWER: &str =
    "SELECT status, headers, body, body_omitted, outcome_unknown, completed_at
     FROM records WHERE route = ?1 AND scope = ?2 AND key = ?3 AND token = ?4";

const SWEEP: &str = "DELETE FROM records WHERE rowid IN (
     SELECT rowid FROM records WHERE expires_at <= ?1 AND state = ?2 LIMIT ?3)";

const PREFILL: &str = "INSERT INTO records (route, scope, key, state, fingerprint, token,
         status, headers, body, body_omitted, created_at, completed_at, expires_at,
         lease_expires_at, outcome_unknown)
     VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?9, ?10, NULL, 0)";

impl Sqlite {
    pub fn open(dir: &Path, layout: Layout) -> anyhow::Result<Sqlite> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("store.db");
        let conn = Connection::open(&path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Before WAL mode, which writes the file's first page: a file's page
        // size is fixed once written (in WAL mode even VACUUM keeps it).
        if let Some(bytes) = layout.page_bytes {
            conn.pragma_update(None, "page_size", bytes)?;
        }
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "no WAL mode: {mode}");
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
        Self::set_cache(&conn, layout)?;
        conn.execute_batch(&schema(layout))?;
        let page: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
        anyhow::ensure!(
            page == layout.page_bytes.unwrap_or(4096),
            "page_size {page}, not the layout's"
        );
        conn.set_prepared_statement_cache_capacity(32);
        let mut wal_path = path.into_os_string();
        wal_path.push("-wal");
        let wal = std::fs::OpenOptions::new().write(true).open(&wal_path)?;
        Ok(Sqlite {
            conn,
            wal,
            layout,
            answer: Answer::typical(),
        })
    }

    fn set_cache(conn: &Connection, layout: Layout) -> anyhow::Result<()> {
        conn.pragma_update(None, "cache_size", -layout.cache_kib.unwrap_or(2000))?;
        if let Some(bytes) = layout.mmap_bytes {
            conn.pragma_update(None, "mmap_size", bytes)?;
        }
        Ok(())
    }

    /// A hash as this layout stores it.
    fn hash(&self, bytes: &[u8]) -> rusqlite::types::Value {
        if self.layout.blob_hashes {
            rusqlite::types::Value::Blob(bytes.to_vec())
        } else {
            rusqlite::types::Value::Text(hex(bytes))
        }
    }

    fn key_text(key: &Key) -> &str {
        std::str::from_utf8(key).unwrap_or("")
    }

    fn jobs(&mut self, jobs: &[Job], now: i64, out: &mut Vec<Outcome>) -> anyhow::Result<()> {
        let scope = self.hash(&SCOPE);
        // Tokens as src/store/embedded/tokens.rs hands them out: the counter
        // read at the batch's first reservation, written back once.
        let mut tokens: Option<(i64, i64)> = None;
        for job in jobs {
            match job {
                Job::Reserve { key, fingerprint } => {
                    let last = match tokens {
                        Some((_, last)) => last,
                        None => {
                            let read: i64 = self
                                .conn
                                .prepare_cached("SELECT value FROM meta WHERE name = 'last_token'")?
                                .query_row([], |row| row.get(0))?;
                            tokens = Some((read, read));
                            read
                        }
                    };
                    let token = last + 1;
                    let fingerprint = self.hash(fingerprint);
                    let inserted = self
                        .conn
                        .prepare_cached(INSERT_IN_FLIGHT)?
                        .execute(params![
                            ROUTE,
                            scope,
                            Self::key_text(key),
                            0,
                            fingerprint,
                            token,
                            now,
                            now + LEASE_MS
                        ])?;
                    if inserted == 1 {
                        tokens = tokens.map(|(read, _)| (read, token));
                        out.push(Outcome::Reserved(crate::workload::Lease {
                            token: token as u64,
                            row: self.conn.last_insert_rowid(),
                        }));
                    } else {
                        out.push(Outcome::Exists);
                    }
                }
                Job::Complete { lease, .. } => {
                    let mut stmt = self.conn.prepare_cached(COMPLETE_BY_ROW)?;
                    stmt.raw_bind_parameter(1, lease.token as i64)?;
                    stmt.raw_bind_parameter(2, 0)?;
                    stmt.raw_bind_parameter(3, 1)?;
                    stmt.raw_bind_parameter(4, i64::from(self.answer.status))?;
                    stmt.raw_bind_parameter(5, &self.answer.headers)?;
                    stmt.raw_bind_parameter(6, &self.answer.body)?;
                    stmt.raw_bind_parameter(7, false)?;
                    stmt.raw_bind_parameter(8, now)?;
                    stmt.raw_bind_parameter(9, now + RETAIN_MS)?;
                    stmt.raw_bind_parameter(10, lease.row)?;
                    stmt.raw_bind_parameter(11, false)?;
                    let changed = stmt.raw_execute()?;
                    out.push(if changed == 1 {
                        Outcome::Completed
                    } else {
                        Outcome::Fenced
                    });
                }
            }
        }
        if let Some((read, last)) = tokens
            && last != read
        {
            self.conn
                .prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'last_token'")?
                .execute([last])?;
        }
        Ok(())
    }
}

impl Engine for Sqlite {
    fn run_batch(&mut self, jobs: &[Job], now: i64, out: &mut Vec<Outcome>) -> anyhow::Result<()> {
        self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        if let Err(e) = self.jobs(jobs, now, out) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        self.wal.sync_data()?;
        Ok(())
    }

    fn commit_syncs(&self) -> bool {
        false
    }

    fn prefill(&mut self, records: &mut dyn Iterator<Item = Prefilled>) -> anyhow::Result<()> {
        self.conn.pragma_update(None, "synchronous", "OFF")?;
        self.conn.pragma_update(None, "cache_size", -1024 * 1024)?;
        let scope = self.hash(&SCOPE);
        let mut last_token = 0;
        loop {
            self.conn.execute_batch("BEGIN")?;
            let mut n = 0;
            {
                let mut stmt = self.conn.prepare_cached(PREFILL)?;
                for record in (&mut *records).take(100_000) {
                    stmt.execute(params![
                        ROUTE,
                        scope,
                        Self::key_text(&record.key),
                        self.hash(&record.fingerprint),
                        record.token as i64,
                        i64::from(self.answer.status),
                        self.answer.headers,
                        self.answer.body,
                        record.created_at,
                        record.created_at + RETAIN_MS,
                    ])?;
                    last_token = record.token as i64;
                    n += 1;
                }
            }
            self.conn.execute(
                "UPDATE meta SET value = max(value, ?1) WHERE name = 'last_token'",
                [last_token],
            )?;
            self.conn.execute_batch("COMMIT")?;
            if n == 0 {
                break;
            }
        }
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        Self::set_cache(&self.conn, self.layout)?;
        self.conn.execute_batch("PRAGMA optimize")?;
        Ok(())
    }

    fn lookup(&mut self, keys: &[Key]) -> anyhow::Result<usize> {
        let scope = self.hash(&SCOPE);
        self.conn.prepare_cached("BEGIN")?.execute([])?;
        let mut found = 0;
        for key in keys {
            let token: Option<i64> = {
                let mut stmt = self.conn.prepare_cached(LOOK_UP)?;
                let mut rows = stmt.query(params![ROUTE, scope, Self::key_text(key)])?;
                match rows.next()? {
                    Some(row) => Some(row.get(3)?),
                    None => None,
                }
            };
            let Some(token) = token else { continue };
            let mut stmt = self.conn.prepare_cached(LOAD_ANSWER)?;
            let (headers, body): (Vec<u8>, Vec<u8>) = stmt
                .query_row(params![ROUTE, scope, Self::key_text(key), token], |row| {
                    Ok((row.get(1)?, row.get(2)?))
                })?;
            found += usize::from(!headers.is_empty() && !body.is_empty());
        }
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(found)
    }

    fn sweep(&mut self, limit: usize) -> anyhow::Result<usize> {
        self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let deleted =
            self.conn
                .prepare_cached(SWEEP)?
                .execute(params![i64::MAX, 1, limit as i64])?;
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.sync()?;
        Ok(deleted)
    }
}
