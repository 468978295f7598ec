//! Noticing commits another process made to the file a gateway serves
//! (`idemgate keys purge` beside it), so that the gateway's copies of
//! replayed answers (`store::replay_cache`) are dropped at once instead of
//! being served for up to their 5 s after the purge.
//!
//! SQLite's `PRAGMA data_version` on the writer's connection changes only
//! when another connection has committed; this process's other connection
//! (`reader`) never writes, so a change is another process's. The writer
//! reads it in every batch's transaction, where it costs one step, and
//! while idle every [`IDLE_CHECK`]. What changed is not told: every copy is
//! dropped, which only costs reads of the store until they are made again.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::statements::Statements;

/// How long an idle gateway can go without looking.
pub(super) const IDLE_CHECK: Duration = Duration::from_millis(10);

/// How long a purge made beside a serving gateway waits before it returns,
/// so that the gateway has looked by then (several of its idle checks, or
/// a batch) and the retry that follows the purge finds no copy.
pub(super) const SETTLE: Duration = Duration::from_millis(60);

/// What to call when another process has committed.
pub type WrittenElsewhere = Box<dyn Fn() + Send + Sync>;

/// The writer's side: the version last read, and whom to tell.
pub(super) struct Watch {
    hook: Arc<OnceLock<WrittenElsewhere>>,
    seen: Option<i64>,
}

impl Watch {
    /// Tells the hook `hook` will hold once set (`EmbeddedStore::on_written_elsewhere`).
    pub(super) fn new(hook: Arc<OnceLock<WrittenElsewhere>>) -> Self {
        Self { hook, seen: None }
    }

    /// How long the writer may wait for a job before it looks: not at all
    /// while nobody is to be told (`keys`, `sweep`, a test's store).
    pub(super) fn idle_wait(&self) -> Option<Duration> {
        self.hook.get().map(|_| IDLE_CHECK)
    }

    /// Reads the version on the writer's connection (in a batch's
    /// transaction, or alone while idle) and tells of a change.
    pub(super) fn look(&mut self, statements: &mut Statements<'_>) -> rusqlite::Result<()> {
        let Some(hook) = self.hook.get() else {
            return Ok(());
        };
        let version: i64 = statements
            .get("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        if self
            .seen
            .replace(version)
            .is_some_and(|seen| seen != version)
        {
            hook();
        }
        Ok(())
    }
}
