//! Why the embedded store failed, as a value (`Unavailable::Embedded`).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::store::Refusal;

#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbeddedCause {
    /// A statement, or a batch's transaction, failed.
    #[error("sqlite: {0}")]
    Sqlite(#[source] Arc<rusqlite::Error>),
    /// Opening the file, or bringing its schema up to date, failed.
    #[error("{}: {source}", path.display())]
    Opening {
        path: PathBuf,
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// SQLite would not put the file in WAL mode (another journal mode was
    /// forced on it, e.g. by a file system that cannot share memory).
    #[error("{}: cannot use WAL journal mode (got {mode})", path.display())]
    NoWal { path: PathBuf, mode: String },
    /// The file was written by a newer idemgate.
    #[error(
        "{}: store schema version {found} is newer than this idemgate supports \
         ({supported}); upgrade idemgate or point it at another file",
        path.display()
    )]
    SchemaNewer {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// A file or directory beside the database could not be made or used.
    #[error("{doing} {}: {source}", path.display())]
    File {
        doing: FileUse,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Another gateway process serves the file (it holds `lock`).
    #[error(
        "{} is already served by another idemgate process (it holds {}); \
         the embedded store is for one gateway process, several need Postgres",
        path.display(),
        lock.display()
    )]
    Served { path: PathBuf, lock: PathBuf },
    /// `compact` found the file served by a running gateway.
    #[error(
        "{} is served by a running idemgate (it holds {}); stop it, then compact the file",
        path.display(),
        lock.display()
    )]
    ServedWhileCompacting { path: PathBuf, lock: PathBuf },
    /// `keys`, `sweep` or `migrate` found a file of an older schema that a
    /// running gateway serves: an older idemgate, which could no longer
    /// start on the file once this one had migrated it.
    #[error(
        "{}: store schema version {found} is served by a running idemgate (it holds {}); \
         this idemgate would migrate it to version {supported} under that gateway, which \
         could then not start on it again: stop that gateway and start this version on \
         the file (it migrates it), then run this again",
        path.display(),
        lock.display()
    )]
    ServedOlder {
        path: PathBuf,
        lock: PathBuf,
        found: i64,
        supported: i64,
    },
    /// The store's writer or sync thread could not be started.
    #[error("starting the {thread} thread: {source}")]
    Thread {
        thread: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The writer thread has ended (it panicked, or the store is closing).
    #[error("the store thread has stopped")]
    Stopped,
    /// The writer thread did not answer a reservation in time: it is held
    /// up in the kernel (a disk that does not answer, a frozen file system)
    /// or behind work that is (`late_lease`).
    #[error("the store gave no answer within {0:?} (is its disk answering?)")]
    NoAnswer(std::time::Duration),
    /// A reservation given up at its deadline is still unanswered: the
    /// writer is held up, and a new one would only queue behind it
    /// (`late_lease`).
    #[error(
        "the store has left a reservation unanswered for more than {0:?}; refused at once \
         until it answers (is its disk answering?)"
    )]
    Behind(std::time::Duration),
    /// Syncing the WAL failed: refused until a restart (`wal_sync`).
    #[error(
        "syncing the store's WAL failed ({0}); what it holds on disk is unknown, \
         so the store refuses every operation until idemgate restarts"
    )]
    SyncFailed(#[source] Arc<std::io::Error>),
    /// The path no longer names the file the store has open: refused until
    /// a restart (`file_watch`).
    #[error(
        "the store file {} was {change} while idemgate ran; answers recorded from now on \
         would be lost at the next start, so the store refuses every operation until \
         idemgate restarts",
        path.display()
    )]
    FileGone { path: PathBuf, change: FileChange },
    /// The count's blocking task on the reader connection did not finish
    /// (it panicked, or the runtime is shutting down).
    #[error("the store's reader failed: {0}")]
    Reader(#[source] Arc<tokio::task::JoinError>),
    /// The store-wide fencing token sequence reached `i64::MAX`.
    #[error("fencing tokens exhausted")]
    TokensExhausted,
}

/// What was being done with a file when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUse {
    Creating,
    Opening,
    Locking,
}

impl fmt::Display for FileUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileUse::Creating => "creating",
            FileUse::Opening => "opening",
            FileUse::Locking => "locking",
        })
    }
}

/// How a path stopped naming the store's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChange {
    Deleted,
    Replaced,
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileChange::Deleted => "deleted",
            FileChange::Replaced => "replaced by another file",
        })
    }
}

impl EmbeddedCause {
    /// A failure that may pass with no restart: a full disk, an I/O error,
    /// another process holding the write lock past the busy timeout, a file
    /// made read-only. Failures that refuse the store until a restart
    /// (`SyncFailed`, `FileGone`, `Stopped`) and those that repeat
    /// (a constraint) are not.
    pub fn may_pass(&self) -> bool {
        use rusqlite::ErrorCode::*;
        match self {
            EmbeddedCause::Sqlite(error) => matches!(
                error.sqlite_error_code(),
                Some(
                    DatabaseBusy
                        | DatabaseLocked
                        | DiskFull
                        | SystemIoFailure
                        | ReadOnly
                        | CannotOpen
                        | OutOfMemory
                )
            ),
            _ => false,
        }
    }

    /// Another process held the file's write lock past the busy timeout
    /// (SQLite's `SQLITE_BUSY`, "database is locked"): a write, or the
    /// opening's own, waited 5 s for it. A gateway's writes are far shorter:
    /// what holds it so long is a `compact`, another command's batch or a
    /// program with the file open.
    pub fn locked_by_another_writer(&self) -> bool {
        match self {
            EmbeddedCause::Sqlite(error) | EmbeddedCause::Opening { source: error, .. } => {
                error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
            }
            _ => false,
        }
    }

    /// The file answered and refused: the disk full, or the file (or its
    /// directory) read-only.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            EmbeddedCause::Sqlite(error) => match error.sqlite_error_code()? {
                rusqlite::ErrorCode::DiskFull => Some(Refusal::DiskFull),
                rusqlite::ErrorCode::ReadOnly => Some(Refusal::ReadOnly),
                _ => None,
            },
            _ => None,
        }
    }

    /// A refusal of every operation that only a restart ends: a failed
    /// sync, the file deleted or replaced (module docs of `wal_sync`,
    /// `file_watch`).
    pub fn lasts_until_restart(&self) -> bool {
        matches!(
            self,
            EmbeddedCause::SyncFailed(_) | EmbeddedCause::FileGone { .. }
        )
    }

    /// A failure to do `doing` with the file at `path`.
    pub(super) fn file(doing: FileUse, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EmbeddedCause::File {
            doing,
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// The store's writer or sync thread could not be started.
    pub(super) fn thread(thread: &'static str, source: std::io::Error) -> Self {
        EmbeddedCause::Thread {
            thread,
            source: Arc::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> EmbeddedCause {
        let error = rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        EmbeddedCause::Sqlite(Arc::new(error))
    }

    #[test]
    fn a_full_disk_and_a_read_only_file_are_refusals_and_a_busy_file_is_not() {
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_FULL).refusal(),
            Some(Refusal::DiskFull)
        );
        assert_eq!(
            sqlite(rusqlite::ffi::SQLITE_READONLY).refusal(),
            Some(Refusal::ReadOnly)
        );
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_BUSY).refusal(), None);
    }

    #[test]
    fn a_busy_file_is_locked_by_another_writer_whether_writing_or_opening() {
        assert!(sqlite(rusqlite::ffi::SQLITE_BUSY).locked_by_another_writer());
        let opening = EmbeddedCause::Opening {
            path: "store.db".into(),
            source: Arc::new(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                None,
            )),
        };
        assert!(opening.locked_by_another_writer());
        assert!(!sqlite(rusqlite::ffi::SQLITE_FULL).locked_by_another_writer());
        assert!(!EmbeddedCause::Stopped.locked_by_another_writer());
    }
}
