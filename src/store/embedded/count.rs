//! `idemgate_records{route,state}` on the embedded store, at a cost that
//! stops growing with the file (docs/tuning-retention.md, "The count"), on
//! the reader's connection (`reader`), in one read transaction:
//!
//! - Routes: one descent of an index per route (a loose index scan
//!   written as a recursive query).
//! - `in_flight` and `outcome_unknown`: exact, one range of the listing
//!   index per route each; a lease that ran out is not in flight (the
//!   sweep deletes it).
//! - `completed`: exact up to `CountLimits::exact_completed` per route, the
//!   route's range of the listing index newest first (an expired backlog is
//!   the oldest), cut off one record past the limit. A route with more is
//!   estimated from a sample of the table: records looked up by rowid at
//!   fixed positions over the rowid range (below), each standing for
//!   `stride` rowids.
//!
//! Counting every index entry would read the whole index, once per
//! `sweep_interval`: on 10 million records 1.3 s warm, 43 s from disk
//! (docs/tuning-retention.md).

use rusqlite::{Connection, OptionalExtension, params};

use super::db_error::db;
use crate::store::StoreError;
use crate::store::count::{CountLimits, RouteCount, merged};
use crate::store::listing::Count;

/// Every route: one descent of an index that starts with the route, each.
const ROUTES: &str = concat!(
    super::schema::with_routes!(),
    "SELECT route FROM routes WHERE route IS NOT NULL"
);

/// One route's exact counts; the completed ones up to `?3` (one past the
/// limit: reaching it means "estimate"), newest first.
///
/// `?1 route, ?2 now (ms), ?3 completed records counted at most`.
const EXACT: &str = "
SELECT
    (SELECT count(*) FROM records INDEXED BY records_listing
     WHERE route = ?1 AND state = 0 AND lease_expires_at > ?2),
    (SELECT count(*) FROM records INDEXED BY records_listing
     WHERE route = ?1 AND state = 1 AND outcome_unknown = 1 AND expires_at > ?2),
    (SELECT count(*) FROM (
        SELECT 1 FROM records INDEXED BY records_listing
        WHERE route = ?1 AND state = 1 AND outcome_unknown = 0 AND expires_at > ?2
        ORDER BY created_at DESC
        LIMIT ?3))";

/// Each its own statement: SQLite reads one end of the table for a lone
/// `min()` or `max()`, but scans an index for both in one.
const LOWEST_ROWID: &str = "SELECT min(rowid) FROM records";
const HIGHEST_ROWID: &str = "SELECT max(rowid) FROM records";

/// The route of the record at one sampled rowid, if it is an unexpired
/// completed one (`?1 rowid, ?2 now`).
const PROBE: &str = "
SELECT route FROM records
WHERE rowid = ?1 AND state = 1 AND outcome_unknown = 0 AND expires_at > ?2";

pub(super) fn count(
    conn: &Connection,
    now: i64,
    limits: CountLimits,
) -> Result<Vec<Count>, StoreError> {
    // One snapshot for every statement below; read-only, it takes no lock
    // the writer waits for (WAL).
    let txn = conn.unchecked_transaction().map_err(db)?;
    let routes: Vec<String> = {
        let mut stmt = txn.prepare_cached(ROUTES).map_err(db)?;
        let rows = stmt.query_map([], |row| row.get(0)).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)?
    };
    let upto = i64::from(limits.exact_completed) + 1;
    let mut exact = Vec::with_capacity(routes.len());
    let mut stmt = txn.prepare_cached(EXACT).map_err(db)?;
    for route in routes {
        let (in_flight, unknown, completed) = stmt
            .query_row(params![route, now, upto], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .map_err(db)?;
        exact.push(RouteCount {
            route,
            in_flight: unsigned(in_flight),
            outcome_unknown: unsigned(unknown),
            completed: RouteCount::completed_upto(unsigned(completed), limits),
        });
    }
    drop(stmt);
    let sampled = if exact.iter().any(|route| route.completed.is_none()) {
        sample(&txn, now, limits)?
    } else {
        Vec::new()
    };
    txn.commit().map_err(db)?;
    Ok(merged(exact, &sampled, limits))
}

/// Unexpired completed records per route, estimated from the records at
/// `Sample::positions` over the table's rowid range.
fn sample(
    conn: &Connection,
    now: i64,
    limits: CountLimits,
) -> Result<Vec<(String, u64)>, StoreError> {
    let end = |sql: &str| -> Result<Option<i64>, StoreError> {
        conn.query_row(sql, [], |row| row.get(0)).map_err(db)
    };
    let (low, high) = (end(LOWEST_ROWID)?, end(HIGHEST_ROWID)?);
    let (Some(low), Some(high)) = (low, high) else {
        return Ok(Vec::new());
    };
    let sample = Sample::over(low, high, limits.sample_pages);
    let mut found: Vec<(String, u64)> = Vec::new();
    let mut probe = conn.prepare_cached(PROBE).map_err(db)?;
    for rowid in sample.positions() {
        let route: Option<String> = probe
            .query_row(params![rowid, now], |row| row.get(0))
            .optional()
            .map_err(db)?;
        let Some(route) = route else { continue };
        match found.iter_mut().find(|(name, _)| *name == route) {
            Some((_, hits)) => *hits += sample.stride,
            None => found.push((route, sample.stride)),
        }
    }
    Ok(found)
}

fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Where the estimate looks: one rowid in each block of `stride` rowids
/// (block `m` covers `m * stride ..`), at an offset drawn from `m` alone.
///
/// - `stride` is a power of two chosen so that between `pages` and twice
///   as many blocks cover the range: it changes only when the table halves
///   or doubles, so every count in between reads the same rowids, whose
///   pages stay cached (drawn afresh, each was a random read from disk),
///   and the gauge moves when the records do, not with the draw.
/// - The offset varies from block to block: at a fixed offset, routes
///   taking turns in a regular pattern (every fourth record, say) would be
///   sampled all of one route.
///
/// Rowids grow with each insert (SQLite takes the largest plus one), so
/// the range runs from the oldest record to the newest; rowids of deleted
/// records are holes, found empty like expired records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    low: i64,
    high: i64,
    stride: u64,
}

impl Sample {
    fn over(low: i64, high: i64, pages: u32) -> Sample {
        let span = u64::try_from(high.saturating_sub(low)).unwrap_or(0) + 1;
        let blocks = u64::from(pages.max(1));
        // The largest power of two with at least `blocks` blocks of it in
        // `span`; 1 (every rowid) for a range of fewer rowids.
        let stride = match span / blocks {
            0 => 1,
            per_block => 1 << per_block.ilog2(),
        };
        Sample { low, high, stride }
    }

    fn positions(self) -> impl Iterator<Item = i64> {
        let stride = self.stride as i64;
        let first = self.low.div_euclid(stride);
        let last = self.high.div_euclid(stride);
        (first..=last)
            .map(move |block| block * stride + (mix(block as u64) % self.stride) as i64)
            .filter(move |rowid| (self.low..=self.high).contains(rowid))
    }
}

/// SplitMix64's output function: a fixed, well-spread offset per block.
fn mix(block: u64) -> u64 {
    let mut z = block.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stride_gives_between_pages_and_twice_as_many_positions() {
        for (low, high) in [(1, 10_000_000), (5_000_001, 15_000_000), (1, 4_096 * 3 - 1)] {
            let sample = Sample::over(low, high, 4_096);
            assert!(sample.stride.is_power_of_two());
            let positions = sample.positions().count() as u64;
            assert!(
                (4_096..=2 * 4_096 + 1).contains(&positions),
                "{low}..={high}: {positions} positions at stride {}",
                sample.stride
            );
        }
    }

    #[test]
    fn a_small_range_is_read_whole() {
        let sample = Sample::over(3, 100, 4_096);
        assert_eq!(sample.stride, 1);
        assert_eq!(
            sample.positions().collect::<Vec<_>>(),
            (3..=100).collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_same_rowids_until_the_range_doubles() {
        let before: Vec<i64> = Sample::over(1, 1_000_000, 4_096).positions().collect();
        let grown: Vec<i64> = Sample::over(1_001, 1_040_000, 4_096).positions().collect();
        assert_eq!(
            Sample::over(1_001, 1_040_000, 4_096).stride,
            Sample::over(1, 1_000_000, 4_096).stride
        );
        let shared = grown.iter().filter(|rowid| before.contains(rowid)).count();
        assert!(
            shared * 100 >= before.len() * 99,
            "{shared} of {} kept",
            before.len()
        );
    }

    #[test]
    fn offsets_do_not_follow_a_regular_pattern_of_routes() {
        // Four routes taking turns: each rowid's route is rowid % 4.
        let sample = Sample::over(1, 4_000_000, 4_096);
        let mut per_route = [0u64; 4];
        for rowid in sample.positions() {
            per_route[(rowid % 4) as usize] += 1;
        }
        let total: u64 = per_route.iter().sum();
        for hits in per_route {
            let share = hits as f64 / total as f64;
            assert!((0.2..0.3).contains(&share), "{per_route:?}");
        }
    }
}
