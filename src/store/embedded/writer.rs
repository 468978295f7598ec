//! The one thread that owns the SQLite connection, with group commit: it takes
//! every queued job, runs them all in one write transaction and commits once,
//! so N concurrent reservations cost one fsync instead of N.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::SystemTime;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::codec::to_ms;
use crate::store::StoreError;

/// Bounds one transaction so a flood cannot hold the write lock (and delay the
/// first replies) indefinitely.
const MAX_BATCH: usize = 512;

pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// One store operation travelling to the writer thread.
pub(super) trait Job: Send {
    /// Runs the operation on the open transaction, keeping its result for
    /// `finish`; returns whether it succeeded (else its writes are rolled back).
    fn run(&mut self, conn: &Connection, now_ms: i64) -> bool;
    /// Sends the kept result, or `Unavailable(batch_error)` when the batch's
    /// transaction did not commit.
    fn finish(self: Box<Self>, batch_error: Option<&str>);
}

pub(super) struct Task<T, F> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
{
    pub(super) fn job(work: F) -> (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>) {
        let (reply, rx) = oneshot::channel();
        let task = Task {
            work: Some(work),
            result: None,
            reply,
        };
        (Box::new(task), rx)
    }
}

impl<T, F> Job for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, i64) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, conn: &Connection, now_ms: i64) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = work(conn, now_ms);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, batch_error: Option<&str>) {
        let result = match (batch_error, self.result) {
            (None, Some(result)) => result,
            (Some(err), _) => Err(StoreError::Unavailable(err.to_owned())),
            (None, None) => Err(StoreError::Unavailable("operation did not run".into())),
        };
        // The caller may have gone away (request cancelled); nothing to tell it.
        let _ = self.reply.send(result);
    }
}

/// The writer thread's body; returns (closing the connection) once every
/// sender is dropped.
pub(super) fn run(mut conn: Connection, jobs: Receiver<Box<dyn Job>>, clock: Clock) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let outcome = execute(&mut conn, &mut batch, &clock);
        let error = outcome.err().map(|e| format!("sqlite: {e}"));
        if let Some(err) = &error {
            tracing::error!(error = %err, jobs = batch.len(), "store transaction failed");
        }
        for job in batch {
            job.finish(error.as_deref());
        }
    }
}

fn execute(
    conn: &mut Connection,
    batch: &mut [Box<dyn Job>],
    clock: &Clock,
) -> Result<(), rusqlite::Error> {
    // IMMEDIATE takes the write lock up front (waiting out busy_timeout for
    // another process) so no statement inside can fail with SQLITE_BUSY.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in batch.iter_mut() {
        let now = to_ms(clock());
        // A savepoint per job: a failing job undoes only its own writes. Its
        // statements are prepared once (rusqlite's `savepoint()` parses its
        // SQL anew for every job: a measurable share of the writer's time).
        tx.prepare_cached("SAVEPOINT job")?.execute([])?;
        if job.run(&tx, now) {
            tx.prepare_cached("RELEASE job")?.execute([])?;
            continue;
        }
        // Some errors (I/O, full disk) make SQLite roll the whole
        // transaction back; later statements would then autocommit one by
        // one, so stop and fail the batch instead.
        if tx.is_autocommit() {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("transaction rolled back by sqlite".into()),
            ));
        }
        tx.prepare_cached("ROLLBACK TO job")?.execute([])?;
        tx.prepare_cached("RELEASE job")?.execute([])?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(v: i64) -> impl FnOnce(&Connection, i64) -> Result<i64, StoreError> + Send {
        move |conn, _| {
            conn.execute("INSERT INTO t (v) VALUES (?1)", [v])
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            Ok(v)
        }
    }

    fn count(conn: &Connection) -> Result<i64, StoreError> {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .map_err(|e| StoreError::Unavailable(e.to_string()))
    }

    #[test]
    fn queued_jobs_share_one_transaction_and_a_failing_job_only_undoes_itself() {
        let dir = std::env::temp_dir().join(format!("idemgate-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("batch.db");
        let _ = std::fs::remove_file(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER)")
            .unwrap();

        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let mut replies = Vec::new();
        for v in 0..10 {
            let (job, reply) = Task::job(insert(v));
            tx.send(job).unwrap();
            replies.push(reply);
        }
        let (job, failed) = Task::job(|conn: &Connection, _| -> Result<(), StoreError> {
            conn.execute("INSERT INTO t (v) VALUES (100)", []).unwrap();
            Err(StoreError::Fenced)
        });
        tx.send(job).unwrap();
        // Inside the batch: this connection sees 10 rows, another sees none
        // (nothing committed yet), so the batch is one transaction.
        let observer = path.clone();
        let (job, seen) = Task::job(move |conn: &Connection, _| {
            let other = Connection::open(&observer).unwrap();
            Ok((count(conn)?, count(&other)?))
        });
        tx.send(job).unwrap();
        drop(tx);

        run(conn, rx, Arc::new(SystemTime::now));
        for (v, reply) in replies.into_iter().enumerate() {
            assert_eq!(reply.blocking_recv().unwrap().unwrap(), v as i64);
        }
        assert!(matches!(
            failed.blocking_recv().unwrap(),
            Err(StoreError::Fenced)
        ));
        assert_eq!(seen.blocking_recv().unwrap().unwrap(), (10, 0));
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 10);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
