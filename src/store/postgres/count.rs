//! `idemgate_records{route,state}` on Postgres, at a cost that stops growing
//! with the table (docs/tuning-retention.md, "How listing and counting stay
//! cheap").
//!
//! - Routes: one descent of an index per route (a loose index scan written
//!   as a recursive query), never a read of every row.
//! - `in_flight` and `outcome_unknown`: exact, each one range of the listing
//!   index per route. Both are small sets in a healthy system, and the
//!   outcome-unknown alert needs them exact.
//! - `completed`: exact per route up to `CountLimits::exact_completed`
//!   records (one range of the listing index, cut off one record past it).
//!   A route with more is estimated from a block sample of the table
//!   (`TABLESAMPLE SYSTEM`), sized to read about `sample_pages` pages
//!   whatever the table's size, and scaled back up.
//!
//! So the count reads at most `exact_completed` index entries per route,
//! plus the in-flight and outcome-unknown records, plus `sample_pages` heap
//! pages; a full count would read every unexpired row (5.7–6.5 s warm at 10
//! million, past the default `statement_timeout`; 30–65 s at 100 million).

use tokio_postgres::{IsolationLevel, Row};

use super::PostgresStore;
use super::pool::{db_error, pool_error};
use crate::store::StoreError;
use crate::store::count::{CountLimits, RouteCount, merged};
use crate::store::listing::Count;

/// Every route (a loose index scan: one descent of an index that starts
/// with the route, per route), with its in-flight and outcome-unknown
/// records counted, its unexpired completed records counted up to `$1`
/// (reaching `$1`, one past the exact limit, means: estimate), and the
/// table's size in pages. The completed records are read newest first: the
/// expired ones awaiting the sweep are the oldest, and a backlog of them is
/// then not read before the limit is reached.
///
/// `$1 completed records counted at most`.
const EXACT: &str = concat!(
    super::sql::with_routes!(),
    "
SELECT route,
       (SELECT count(*) FROM idemgate_records r
        WHERE r.route = routes.route AND r.state = 0
          AND r.lease_expires_at > now()) AS in_flight,
       (SELECT count(*) FROM idemgate_records r
        WHERE r.route = routes.route AND r.state = 1 AND r.outcome_unknown
          AND r.expires_at > now()) AS outcome_unknown,
       (SELECT count(*) FROM (
            SELECT FROM idemgate_records r
            WHERE r.route = routes.route AND r.state = 1 AND NOT r.outcome_unknown
              AND r.expires_at > now()
            ORDER BY r.created_at DESC
            LIMIT $1) AS upto) AS completed,
       pg_relation_size('idemgate_records') / current_setting('block_size')::bigint AS pages
FROM routes
WHERE route IS NOT NULL"
);

/// Unexpired completed records per route in a sample of the table's pages,
/// each page taken with probability `$1` percent. The same pages at every
/// count (a fixed seed; a larger table adds its new pages to them): they
/// stay cached, where pages drawn afresh would each be a random read from
/// disk (4,096 of them took 0.2–27 s on a busy disk), every replica reports the
/// same estimate, and the gauge moves when the records do, not with the
/// draw.
///
/// `$1 percent (real)`.
const SAMPLE: &str = "
SELECT route, count(*) AS records
FROM idemgate_records TABLESAMPLE SYSTEM ($1) REPEATABLE (0)
WHERE state = 1 AND NOT outcome_unknown AND expires_at > now()
GROUP BY route";

/// Both statements see one snapshot, in a read-only transaction. Without
/// JIT: the planner prices `EXACT` for a hundred routes of a large table,
/// past `jit_above_cost`, and compiling it took 0.76 s of a count that
/// runs in a fraction of that (docs/tuning-retention.md).
pub(super) async fn count(
    store: &PostgresStore,
    limits: CountLimits,
) -> Result<Vec<Count>, StoreError> {
    store
        .bounded(async {
            let mut client = store.pool.get().await.map_err(pool_error)?;
            let txn = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(db_error)?;
            txn.batch_execute("SET LOCAL jit = off")
                .await
                .map_err(db_error)?;
            let upto = i64::from(limits.exact_completed) + 1;
            let exact_stmt = txn.prepare_cached(EXACT).await.map_err(db_error)?;
            let rows = txn.query(&exact_stmt, &[&upto]).await.map_err(db_error)?;
            let mut pages = 0;
            let mut routes = Vec::with_capacity(rows.len());
            for row in &rows {
                pages = row.try_get::<_, i64>("pages").map_err(db_error)?;
                routes.push(exact(row, limits)?);
            }
            let mut sampled = Vec::new();
            if routes.iter().any(|r| r.completed.is_none()) {
                let percent = sample_percent(pages, limits.sample_pages);
                let sample_stmt = txn.prepare_cached(SAMPLE).await.map_err(db_error)?;
                for row in txn
                    .query(&sample_stmt, &[&percent])
                    .await
                    .map_err(db_error)?
                {
                    let route: String = row.try_get("route").map_err(db_error)?;
                    let records: i64 = row.try_get("records").map_err(db_error)?;
                    sampled.push((route, scaled(records, percent)));
                }
            }
            txn.commit().await.map_err(db_error)?;
            Ok(merged(routes, &sampled, limits))
        })
        .await
}

fn exact(row: &Row, limits: CountLimits) -> Result<RouteCount, StoreError> {
    let number = |column: &str| -> Result<u64, StoreError> {
        let n: i64 = row.try_get(column).map_err(db_error)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let completed = number("completed")?;
    Ok(RouteCount {
        route: row.try_get("route").map_err(db_error)?,
        in_flight: number("in_flight")?,
        outcome_unknown: number("outcome_unknown")?,
        completed: RouteCount::completed_upto(completed, limits),
    })
}

/// The percentage of a table of `pages` pages that samples about
/// `sample_pages` of them: at most all of it, and never 0 (a sample of no
/// page says nothing).
fn sample_percent(pages: i64, sample_pages: u32) -> f32 {
    if pages <= 0 {
        return 100.0;
    }
    let percent = 100.0 * f64::from(sample_pages.max(1)) / pages as f64;
    percent.min(100.0) as f32
}

/// `records` found in a sample of `percent` of the pages, as a number for
/// the whole table.
fn scaled(records: i64, percent: f32) -> u64 {
    let records = u64::try_from(records).unwrap_or(0) as f64;
    (records * 100.0 / f64::from(percent)).round() as u64
}

impl PostgresStore {
    /// `Store::count` within other limits than the default ones (a test of
    /// the estimate on a small table, or an operator's own trade-off).
    pub async fn count_within(&self, limits: CountLimits) -> Result<Vec<Count>, StoreError> {
        count(self, limits).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_reads_about_the_pages_asked_for_and_at_most_the_table() {
        assert_eq!(sample_percent(400_000, 4_000), 1.0);
        assert_eq!(sample_percent(2_000, 4_000), 100.0);
        assert_eq!(sample_percent(0, 4_000), 100.0, "an empty or new table");
        assert!(
            sample_percent(10_000_000, 0) > 0.0,
            "never a sample of nothing"
        );
    }

    #[test]
    fn sampled_records_scale_back_to_the_table() {
        assert_eq!(scaled(250, 1.0), 25_000);
        assert_eq!(scaled(7, 100.0), 7, "a full sample is the count");
        assert_eq!(scaled(3, 0.5), 600);
        assert_eq!(scaled(-1, 1.0), 0);
    }
}
