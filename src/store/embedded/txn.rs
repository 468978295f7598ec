//! What the writer thread runs: a job (`Job`, made by `Task` from a store
//! operation) on the batch's open transaction as the job sees it (`Txn`).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::cause::EmbeddedCause;
use super::db_error::db;
use super::live_leases::LiveLeases;
use super::statements::{Held, Statements};
use super::tokens::Tokens;
use crate::store::StoreError;

/// The batch's open transaction, as one job sees it.
pub(super) struct Txn<'a, 'c> {
    /// The job's "now", in unix milliseconds.
    pub now: i64,
    /// The job's "now" by the monotonic clock, when leases are timed by it.
    steady: Option<Instant>,
    live: &'a mut LiveLeases,
    tokens: &'a mut Tokens,
    statements: &'a mut Statements<'c>,
}

impl<'a, 'c> Txn<'a, 'c> {
    pub fn new(
        (now, steady): (i64, Option<Instant>),
        live: &'a mut LiveLeases,
        tokens: &'a mut Tokens,
        statements: &'a mut Statements<'c>,
    ) -> Self {
        Self {
            now,
            steady,
            live,
            tokens,
            statements,
        }
    }

    /// `token`'s lease, taken by this job, is held here for `lease_for`.
    pub fn hold_lease(&mut self, token: i64, lease_for: Duration) {
        if let Some(now) = self.steady {
            self.live.hold(token, now + lease_for);
        }
    }

    /// `token`'s lease is no longer held here.
    pub fn end_lease(&mut self, token: i64) {
        self.live.end(token);
    }

    /// How long `token`'s lease is still held by this process
    /// (`live_leases`), whatever the wall clock says.
    pub fn lease_held_here(&self, token: i64) -> Option<Duration> {
        self.live.left(token, self.steady?)
    }

    /// `sql` as a statement prepared once for the writer's life
    /// (`statements`); `sql` must be a literal or a `const`.
    pub fn statement(&mut self, sql: &'static str) -> Result<Held<'_, 'c>, StoreError> {
        self.statements.get(sql).map_err(db)
    }

    /// The fencing token a reservation would get: unique across the store's
    /// life once `spend_token` records that a row carries it.
    pub fn next_token(&mut self) -> Result<i64, StoreError> {
        self.tokens.peek(self.statements)
    }

    pub fn spend_token(&mut self, token: i64) {
        self.tokens.spend(token);
    }

    /// The rowid of the row the job's last `INSERT` wrote.
    pub fn last_insert_rowid(&self) -> i64 {
        self.statements.last_insert_rowid()
    }
}

/// One store operation travelling to the writer thread.
pub(super) trait Job: Send {
    /// Runs the operation on the open transaction, keeping its result for
    /// `finish`; returns whether it succeeded.
    fn run(&mut self, txn: &mut Txn<'_, '_>) -> bool;
    /// Sends the kept result, or `Unavailable(batch_error)` when the batch's
    /// transaction did not commit (or its sync failed).
    fn finish(self: Box<Self>, batch_error: Option<&EmbeddedCause>);
    /// Whether the kept result may be answered once committed, before the
    /// batch's sync: only a new lease may (module doc).
    fn answered_before_sync(&self) -> bool;
}

pub(super) struct Task<T, F> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
    before_sync: fn(&T) -> bool,
}

impl<T, F> Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Txn<'_, '_>) -> Result<T, StoreError> + Send + 'static,
{
    /// A job answered after its batch's sync.
    pub(super) fn job(work: F) -> (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>) {
        Self::job_answered_before_sync(work, |_| false)
    }

    /// A job whose successful result is answered before its batch's sync when
    /// `before_sync` says so of it.
    pub(super) fn job_answered_before_sync(
        work: F,
        before_sync: fn(&T) -> bool,
    ) -> (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>) {
        let (reply, rx) = oneshot::channel();
        let task = Task {
            work: Some(work),
            result: None,
            reply,
            before_sync,
        };
        (Box::new(task), rx)
    }
}

impl<T, F> Job for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Txn<'_, '_>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, txn: &mut Txn<'_, '_>) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = work(txn);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn answered_before_sync(&self) -> bool {
        matches!(&self.result, Some(Ok(value)) if (self.before_sync)(value))
    }

    fn finish(self: Box<Self>, batch_error: Option<&EmbeddedCause>) {
        let result = match (batch_error, self.result) {
            (None, Some(result)) => result,
            (Some(err), _) => Err(err.clone().into()),
            (None, None) => Err(StoreError::invariant("operation did not run")),
        };
        // The caller may have gone away (request cancelled); nothing to tell it.
        let _ = self.reply.send(result);
    }
}
