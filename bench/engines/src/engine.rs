//! What every candidate implements: the store's writes as the embedded
//! store's writer thread makes them (src/store/embedded/writer.rs).

use crate::workload::{Job, Key, Outcome, Prefilled};

pub trait Engine: Send {
    /// Runs a batch of jobs in one transaction and commits it: on return the
    /// batch survives a crash of the process (and a power loss too when
    /// `commit_syncs`). One outcome per job, in order.
    fn run_batch(&mut self, jobs: &[Job], now: i64, out: &mut Vec<Outcome>) -> anyhow::Result<()>;

    /// Makes every committed batch survive a power loss: one fdatasync (or
    /// fsync) per batch. A no-op where the commit itself synced.
    fn sync(&mut self) -> anyhow::Result<()>;

    /// Whether `run_batch` returns only once the batch is synced: its new
    /// leases cannot be answered between commit and sync then.
    fn commit_syncs(&self) -> bool;

    /// Writes completed records in bulk, without a sync per transaction;
    /// synced once at the end.
    fn prefill(&mut self, records: &mut dyn Iterator<Item = Prefilled>) -> anyhow::Result<()>;

    /// Waits until the engine's own background work after a bulk load is
    /// done (an LSM's flushes and compactions), so that a write pass measures
    /// its steady state and not the prefill's debt. Returns at once where
    /// there is none.
    fn settle(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Point reads of existing records in one read transaction, each answer
    /// decoded as a replay would be; returns how many were found.
    fn lookup(&mut self, keys: &[Key]) -> anyhow::Result<usize>;

    /// Deletes up to `limit` records with the earliest expiry, found by the
    /// expiry index, in one durable transaction; returns how many it deleted.
    fn sweep(&mut self, limit: usize) -> anyhow::Result<usize>;
}
