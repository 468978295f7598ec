//! `idemgate compact`: the file rewritten without the free pages that swept
//! and purged records leave behind. SQLite reuses them for new records but
//! never gives them back, so a file stays at its largest size after a
//! backlog or a lowered retention (docs/tuning-retention.md). The rewrite
//! needs the file to itself: no gateway may serve it meanwhile.

use std::path::Path;

use super::cause::EmbeddedCause;
use super::db_error::db;
use super::{schema, serve_lock};
use crate::store::StoreError;

/// The file's size with its WAL, before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub before: u64,
    pub after: u64,
}

pub(super) fn compact(path: &Path) -> Result<Compacted, StoreError> {
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
    // One transaction: a failure (a full disk) leaves the file as it was.
    conn.execute_batch("VACUUM").map_err(db)?;
    // The rewritten pages went to the WAL: into the file, and the WAL emptied.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(db)?;
    conn.close().map_err(|(_, e)| db(e))?;
    Ok(Compacted {
        before,
        after: size_with_wal(path),
    })
}

fn size_with_wal(path: &Path) -> u64 {
    [path, schema::wal_path(path).as_path()]
        .iter()
        .filter_map(|file| std::fs::metadata(file).ok())
        .map(|meta| meta.len())
        .sum()
}
