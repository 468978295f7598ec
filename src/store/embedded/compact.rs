//! `idemgate compact`: the file rewritten without the free pages that swept
//! and purged records leave behind. SQLite reuses them for new records but
//! never gives them back, so a file stays at its largest size after a
//! backlog or a lowered retention (docs/tuning-retention.md). The rewrite
//! needs the file to itself: no gateway may serve it meanwhile.

use std::path::Path;

use super::cause::EmbeddedCause;
use super::compact_stop::CompactStop;
use super::db_error::db;
use super::{schema, serve_lock};
use crate::store::StoreError;

/// The file's size with its WAL, before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub before: u64,
    pub after: u64,
}

/// How a compaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// The file rewritten.
    Done(Compacted),
    /// Stopped ([`CompactStop::stop`]) before the rewrite ended: it was
    /// rolled back, the file is as it was.
    Stopped,
}

pub(super) fn compact(path: &Path, stop: &CompactStop) -> Result<Compaction, StoreError> {
    if serve_lock::held_elsewhere(path) {
        return Err(EmbeddedCause::ServedWhileCompacting {
            path: path.to_owned(),
            lock: serve_lock::lock_path(path),
        }
        .into());
    }
    // Held while it runs: a gateway started meanwhile fails at once.
    let _lock = serve_lock::acquire(path)?;
    let before = size_with_wal(path);
    let (conn, _) = schema::open_and_migrate(path)?;
    // One transaction: a failure (a full disk) or a stop leaves the file as
    // it was.
    if !stop.arm(&conn) {
        return Ok(Compaction::Stopped);
    }
    let rewritten = conn.execute_batch("VACUUM");
    let stop_asked = stop.disarm();
    match rewritten {
        Err(error)
            if stop_asked
                && error.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted) =>
        {
            return Ok(Compaction::Stopped);
        }
        other => other.map_err(db)?,
    }
    // The rewritten pages went to the WAL: into the file, and the WAL emptied.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(db)?;
    conn.close().map_err(|(_, e)| db(e))?;
    Ok(Compaction::Done(Compacted {
        before,
        after: size_with_wal(path),
    }))
}

fn size_with_wal(path: &Path) -> u64 {
    [path, schema::wal_path(path).as_path()]
        .iter()
        .filter_map(|file| std::fs::metadata(file).ok())
        .map(|meta| meta.len())
        .sum()
}
