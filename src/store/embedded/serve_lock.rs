//! The lock that keeps a second `idemgate serve` off a file one already serves.
//!
//! SQLite would let two gateways share the file (its own locks serialise the
//! writes), but each keeps in-memory copies of replays that a purge through
//! the other's admin API does not drop, they contend for one write lock, and
//! a file shared between machines (a network volume) is not safe for WAL
//! mode at all. Sharing is always a mistake (the embedded store is for one
//! gateway process; several need Postgres), so `serve` takes this lock and a
//! second one fails at start with one line. `keys` and `sweep` do not take
//! it: they are meant to run against the file of a running gateway.
//!
//! An exclusive `flock` on `<file>-lock`, beside SQLite's `-wal` and `-shm`,
//! not on the database file itself: SQLite locks byte ranges of that file
//! with `fcntl`, which on a network file system is what `flock` becomes. The
//! lock file is left in place when the gateway stops; the kernel drops the
//! lock with the process, even one that was killed.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::cause::{EmbeddedCause, FileUse};
use crate::store::StoreError;

/// Held while the gateway serves the file; dropping it releases the lock.
#[derive(Debug)]
pub(super) struct ServeLock {
    _file: File,
}

/// `<file>-lock` for the store file `path`.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-lock");
    PathBuf::from(name)
}

/// Takes the lock without waiting: another gateway holding it is an error
/// that names the file.
pub(super) fn acquire(path: &Path) -> Result<ServeLock, StoreError> {
    super::schema::create_parent(path)?;
    let lock = lock_path(path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|e| EmbeddedCause::file(FileUse::Opening, &lock, e))?;
    match file.try_lock() {
        Ok(()) => Ok(ServeLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(EmbeddedCause::Served {
            path: path.to_owned(),
            lock,
        }
        .into()),
        Err(TryLockError::Error(e)) => Err(EmbeddedCause::file(FileUse::Locking, lock, e).into()),
    }
}

/// Whether a gateway serves the file right now (another process holds its
/// lock). The lock is only tried, never kept, and no lock file is made:
/// anything else (no lock file, a file system without `flock`) is `false`.
/// Opened for reading: `flock` needs no more, and a user who may not write
/// the lock file (a `sweep` run as another user) still sees the gateway.
pub(super) fn held_elsewhere(path: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .open(lock_path(path))
        .is_ok_and(|file| matches!(file.try_lock(), Err(TryLockError::WouldBlock)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("idemgate-serve-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let first = acquire(&path).unwrap();
        let second = acquire(&path);
        assert!(
            matches!(&second, Err(e) if e.to_string().contains("already served")),
            "{second:?}"
        );
        drop(first);
        assert!(acquire(&path).is_ok(), "free again once the first is gone");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
