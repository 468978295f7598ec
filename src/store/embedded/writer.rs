//! The one thread that owns the SQLite connection, with group commit: it takes
//! every queued job, runs them all in one write transaction and commits once,
//! so N concurrent reservations cost one fsync instead of N.
//!
//! **One write per job.** Every job makes at most one writing statement
//! (`ops`: a reservation is one `INSERT`, or one `UPDATE` of a row it took
//! over; a completion one `UPDATE`), and SQLite undoes a failed statement's
//! own changes. So a failing job leaves nothing behind in the shared
//! transaction without a savepoint of its own (which cost two more statements
//! per job). A job that failed *after* writing would break that: the batch
//! then fails as a whole rather than commit its partial writes.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::SystemTime;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::codec::to_ms;
use super::replies::Replies;
use super::tokens::Tokens;
use crate::store::StoreError;

/// Bounds one transaction so a flood cannot hold the write lock (and delay the
/// first replies) indefinitely.
const MAX_BATCH: usize = 512;

pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The batch's open transaction, as one job sees it.
pub(super) struct Txn<'a> {
    pub conn: &'a Connection,
    /// The job's "now", in unix milliseconds.
    pub now: i64,
    tokens: &'a mut Tokens,
}

impl Txn<'_> {
    /// The fencing token a reservation would get: unique across the store's
    /// life once `spend_token` records that a row carries it.
    pub fn next_token(&mut self) -> Result<i64, StoreError> {
        self.tokens.peek(self.conn)
    }

    pub fn spend_token(&mut self, token: i64) {
        self.tokens.spend(token);
    }
}

/// One store operation travelling to the writer thread.
pub(super) trait Job: Send {
    /// Runs the operation on the open transaction, keeping its result for
    /// `finish`; returns whether it succeeded.
    fn run(&mut self, txn: &mut Txn<'_>) -> bool;
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
    F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
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
    F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, txn: &mut Txn<'_>) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = work(txn);
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
pub(super) fn run(conn: Connection, jobs: Receiver<Box<dyn Job>>, clock: Clock, replies: Replies) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let outcome = execute(&conn, &mut batch, &clock);
        let error = outcome.err().map(|e| format!("sqlite: {e}"));
        if let Some(err) = &error {
            tracing::error!(error = %err, jobs = batch.len(), "store transaction failed");
        }
        replies.send(batch, error);
    }
}

fn execute(
    conn: &Connection,
    batch: &mut [Box<dyn Job>],
    clock: &Clock,
) -> Result<(), rusqlite::Error> {
    let tx = Batch::begin(conn)?;
    let mut tokens = Tokens::default();
    for job in batch.iter_mut() {
        let written_before = conn.total_changes();
        let mut txn = Txn {
            conn,
            now: to_ms(clock()),
            tokens: &mut tokens,
        };
        if job.run(&mut txn) {
            continue;
        }
        // Some errors (I/O, full disk) make SQLite roll the whole
        // transaction back; later statements would then autocommit one by
        // one, so stop and fail the batch instead.
        if conn.is_autocommit() {
            return Err(abort("transaction rolled back by sqlite"));
        }
        if conn.total_changes() != written_before {
            return Err(abort("a failed operation had written; batch rolled back"));
        }
    }
    tokens.save(conn)?;
    tx.commit()
}

/// The batch's write transaction. `BEGIN IMMEDIATE` and `COMMIT` run as
/// prepared statements (rusqlite's `Transaction` parses them as SQL text for
/// every batch); dropped uncommitted, it rolls back.
struct Batch<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Batch<'c> {
    fn begin(conn: &'c Connection) -> Result<Batch<'c>, rusqlite::Error> {
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout
        // for another process) so no statement inside fails with SQLITE_BUSY.
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Batch { conn, open: true })
    }

    fn commit(mut self) -> Result<(), rusqlite::Error> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let rolled_back =
                (self.conn.prepare_cached("ROLLBACK")).and_then(|mut stmt| stmt.execute([]));
            if let Err(err) = rolled_back {
                tracing::error!(error = %err, "rolling back a store batch failed");
            }
        }
    }
}

fn abort(message: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some(message.into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(e: rusqlite::Error) -> StoreError {
        StoreError::Unavailable(e.to_string())
    }

    fn insert(v: i64) -> impl FnOnce(&mut Txn<'_>) -> Result<i64, StoreError> + Send {
        move |txn| {
            txn.conn
                .execute("INSERT INTO t (v) VALUES (?1)", [v])
                .map_err(unavailable)?;
            Ok(v)
        }
    }

    fn count(conn: &Connection) -> Result<i64, StoreError> {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .map_err(unavailable)
    }

    /// Removes a test's directory when the test ends, passed or not.
    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh file with table `t`, whose CHECK refuses v >= 100.
    fn open(name: &str) -> (TempDir, std::path::PathBuf, Connection) {
        let dir =
            std::env::temp_dir().join(format!("idemgate-writer-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER CHECK (v < 100))")
            .unwrap();
        (TempDir(dir), path, conn)
    }

    #[test]
    fn queued_jobs_share_one_transaction_and_a_failing_statement_only_undoes_itself() {
        let (_dir, path, conn) = open("batch.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let mut replies = Vec::new();
        for v in 0..10 {
            let (job, reply) = Task::job(insert(v));
            tx.send(job).unwrap();
            replies.push(reply);
        }
        // Refused by the CHECK: SQLite undoes that statement alone.
        let (job, refused) = Task::job(insert(100));
        tx.send(job).unwrap();
        // Inside the batch: this connection sees 10 rows, another sees none
        // (nothing committed yet), so the batch is one transaction.
        let observer = path.clone();
        let (job, seen) = Task::job(move |txn: &mut Txn<'_>| {
            let other = Connection::open(&observer).map_err(unavailable)?;
            Ok((count(txn.conn)?, count(&other)?))
        });
        tx.send(job).unwrap();
        drop(tx);

        run(conn, rx, Arc::new(SystemTime::now), Replies::start());
        for (v, reply) in replies.into_iter().enumerate() {
            assert_eq!(reply.blocking_recv().unwrap().unwrap(), v as i64);
        }
        assert!(matches!(
            refused.blocking_recv().unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(seen.blocking_recv().unwrap().unwrap(), (10, 0));
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 10);
    }

    #[test]
    fn a_job_that_fails_after_writing_fails_its_whole_batch() {
        let (_dir, path, conn) = open("wrote-then-failed.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let (job, innocent) = Task::job(insert(1));
        tx.send(job).unwrap();
        let (job, culprit) = Task::job(|txn: &mut Txn<'_>| -> Result<(), StoreError> {
            insert(2)(txn)?;
            Err(StoreError::Fenced)
        });
        tx.send(job).unwrap();
        drop(tx);

        run(conn, rx, Arc::new(SystemTime::now), Replies::start());
        for reply in [
            innocent.blocking_recv().unwrap().map(|_| ()),
            culprit.blocking_recv().unwrap(),
        ] {
            assert!(
                matches!(reply, Err(StoreError::Unavailable(_))),
                "{reply:?}"
            );
        }
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 0, "nothing of the batch committed");
    }
}
