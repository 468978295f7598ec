//! Noticing that the store's file was deleted or replaced under a running
//! gateway.
//!
//! SQLite keeps writing to the file it has open: after `rm` (or a `mv` of
//! another file over it) the gateway goes on answering and recording, into
//! an inode that no path names any more, and the next start finds no file
//! (or the other one): every answer recorded since, and before, is gone, and
//! their retries run again. Nothing would have said so. The writer checks,
//! at most once per `INTERVAL` and before a batch, that the path still names
//! the file it opened; once it does not, the store refuses every operation
//! (503, `/readyz` not ready) until idemgate restarts, as after a failed
//! sync: the gateway fails closed, and says why once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cause::{EmbeddedCause, FileChange};

/// How stale the check may be: at most this long of answers go to a file
/// that is already gone.
pub(super) const INTERVAL: Duration = Duration::from_secs(1);

/// The paths and identities (device, inode) of the files the writer has
/// open: the database and its WAL, which holds every commit not yet
/// checkpointed (SQLite does not delete it while the connection is open).
pub(super) struct FileWatch {
    files: Vec<(PathBuf, (u64, u64))>,
    next: Instant,
}

impl FileWatch {
    /// Watches the store file `path` and its WAL as they are now: call it
    /// once the connection has opened both. `None` where a file's identity
    /// cannot be read (not a Unix system).
    pub(super) fn new(path: &Path) -> Option<FileWatch> {
        let files = [path.to_owned(), super::schema::wal_path(path)]
            .into_iter()
            .map(|file| identity(&file).ok().flatten().map(|opened| (file, opened)))
            .collect::<Option<Vec<_>>>()?;
        Some(FileWatch {
            files,
            next: Instant::now() + INTERVAL,
        })
    }

    /// Why the store must stop, once a path no longer names its file;
    /// `None` while each does, or before the next check is due.
    pub(super) fn gone(&mut self) -> Option<EmbeddedCause> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.next = now + INTERVAL;
        let (path, change) = self.files.iter().find_map(|(path, opened)| {
            let change = match identity(path) {
                Ok(Some(found)) if found == *opened => return None,
                Ok(_) => FileChange::Replaced,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileChange::Deleted,
                // Unreadable for another reason (permissions changed): the
                // file open may still be the one; SQLite reports real
                // trouble itself.
                Err(_) => return None,
            };
            Some((path, change))
        })?;
        let err = EmbeddedCause::FileGone {
            path: path.clone(),
            change,
        };
        tracing::error!(error = %err, "store file gone");
        Some(err)
    }
}

#[cfg(unix)]
fn identity(path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(Some((meta.dev(), meta.ino())))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    Ok(None)
}
