//! Reading beside the writer: the count behind `idemgate_records` reads
//! up to a limit of index entries per route and a sample of the table
//! (`count`), still 1.5 s on a file of 10 million records whose pages are
//! not cached (docs/tuning-retention.md). On the writer thread, inside
//! its transaction, every write would wait for it once per `sweep_interval`. Here it
//! runs on a connection of its own, on a blocking thread: with the WAL
//! journal a reader sees the last commit before its statement began while
//! the writer goes on committing, so no write waits for the count.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, InterruptHandle, OpenFlags};

use super::EmbeddedCause;
use super::clock::Clock;
use super::codec::to_ms;
use super::count;
use crate::store::CountLimits;
use crate::store::StoreError;
use crate::store::listing::Count;

/// A read transaction only waits while another connection recovers or
/// resets the WAL: moments.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Reader {
    /// `None` once closed (`close`).
    conn: Mutex<Option<Connection>>,
    /// Stops a statement running on `conn`, so that closing need not wait.
    interrupt: InterruptHandle,
    clock: Clock,
}

impl Reader {
    /// A read-only connection to the file the writer opened (its schema
    /// already migrated); never creates one.
    pub(super) fn open(path: &Path, clock: Clock) -> Result<Reader, StoreError> {
        let fail = |e: rusqlite::Error| {
            StoreError::from(EmbeddedCause::Opening {
                path: path.to_path_buf(),
                source: Arc::new(e),
            })
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        Ok(Reader {
            interrupt: conn.get_interrupt_handle(),
            conn: Mutex::new(Some(conn)),
            clock,
        })
    }

    /// Unexpired records per route and state, as of the last commit.
    pub(super) async fn count(
        self: &Arc<Self>,
        limits: CountLimits,
    ) -> Result<Vec<Count>, StoreError> {
        let reader = self.clone();
        tokio::task::spawn_blocking(move || {
            let now = to_ms(reader.clock.now());
            let conn = reader.connection();
            count::count(conn.as_ref().ok_or_else(closed)?, now, limits)
        })
        .await
        .map_err(|e| StoreError::from(EmbeddedCause::Reader(Arc::new(e))))?
    }

    /// Closes the connection, stopping a statement still running on it:
    /// the writer's connection must be the file's last to close, so that it
    /// checkpoints the WAL into the file and removes it.
    pub(super) fn close(&self) {
        self.interrupt.interrupt();
        self.connection().take();
    }

    fn connection(&self) -> MutexGuard<'_, Option<Connection>> {
        // A panic while counting leaves nothing half-done on a reader.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn closed() -> StoreError {
    StoreError::from(EmbeddedCause::Stopped)
}
