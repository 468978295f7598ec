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

/// How stale the check may be: at most this long of answers go to a file
/// that is already gone.
pub(super) const INTERVAL: Duration = Duration::from_secs(1);

/// The path and the identity (device, inode) of the file the writer opened.
pub(super) struct FileWatch {
    path: PathBuf,
    identity: (u64, u64),
    next: Instant,
}

impl FileWatch {
    /// Watches `path` as it is now: call it right after opening the file.
    /// `None` where the file's identity cannot be read (not a Unix system).
    pub(super) fn new(path: &Path) -> Option<FileWatch> {
        Some(FileWatch {
            path: path.to_owned(),
            identity: identity(path).ok()??,
            next: Instant::now() + INTERVAL,
        })
    }

    /// Why the store must stop, once the path no longer names the file;
    /// `None` while it does, or before the next check is due.
    pub(super) fn gone(&mut self) -> Option<String> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        self.next = now + INTERVAL;
        let why = match identity(&self.path) {
            Ok(Some(found)) if found == self.identity => return None,
            Ok(_) => "replaced by another file",
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "deleted",
            // Unreadable for another reason (permissions changed): the file
            // open may still be the one; SQLite reports real trouble itself.
            Err(_) => return None,
        };
        let err = format!(
            "the store file {} was {why} while idemgate ran; answers recorded from now on \
             would be lost at the next start, so the store refuses every operation until \
             idemgate restarts",
            self.path.display()
        );
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
