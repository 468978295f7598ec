//! Making what the WAL holds durable, after each batch (the writer) or behind
//! it (`background_sync`), and what a failed sync means.

use std::path::Path;
use std::sync::Arc;

use super::cause::{EmbeddedCause, FileUse};
use crate::store::StoreError;

/// Makes what the WAL holds durable (`fdatasync` of the WAL file).
pub(super) type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// Logs a failed sync; returns why every later operation is refused.
pub(super) fn sync_failed(e: std::io::Error) -> EmbeddedCause {
    let err = EmbeddedCause::SyncFailed(Arc::new(e));
    tracing::error!(error = %err, "store sync failed");
    err
}

/// A descriptor of the file's WAL, for the writer's sync after each batch.
/// SQLite made the WAL when the connection first read the file; it does not
/// delete it while this connection is open.
pub(super) fn sync_wal(path: &Path) -> Result<SyncWal, StoreError> {
    let wal_path = super::schema::wal_path(path);
    let wal = std::fs::OpenOptions::new()
        .write(true)
        .open(&wal_path)
        .map_err(|e| EmbeddedCause::file(FileUse::Opening, wal_path, e))?;
    Ok(Box::new(move || wal.sync_data()))
}
