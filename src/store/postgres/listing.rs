//! Listing records for operators, through the `idemgate_records_listing`
//! index (route, state, outcome_unknown, created_at, key, scope; expires_at
//! included): a page is one range of it per state, all read in one
//! statement. Counting them is `count`.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::pool::db_error;
use super::rows::record_state;
use crate::store::listing::{ListQuery, Listed, Page};
use crate::store::{RecordState, StoreError};

/// Each asked state's records after the cursor, oldest first, up to `$7`
/// per state; records past their retention or lease (awaiting the sweep)
/// are skipped. An in-flight record's expiry is its lease's. Key and scope
/// compare in byte order, as the index keeps them.
///
/// One statement, so one snapshot for every state: with a statement per
/// state, a record completing between them was listed twice on one page
/// (in flight by the first, completed by the next). Each state is still one
/// range of the listing index (a lateral subquery per `($2[i], $3[i])`).
///
/// `$1 route, $2 states, $3 outcome unknown (one per state), $4..$6 cursor,
/// $7 rows per state`.
pub(super) const PAGE: &str = r#"
SELECT p.*
FROM unnest($2::smallint[], $3::boolean[]) AS asked(state, outcome_unknown)
CROSS JOIN LATERAL (
    SELECT r.key, r.scope, r.state, r.outcome_unknown, r.status, r.created_at,
           r.completed_at,
           CASE r.state WHEN 0 THEN r.lease_expires_at ELSE r.expires_at END AS expires_at
    FROM idemgate_records r
    WHERE r.route = $1 AND r.state = asked.state
      AND r.outcome_unknown = asked.outcome_unknown
      AND (CASE r.state WHEN 0 THEN r.lease_expires_at ELSE r.expires_at END) > now()
      AND (r.created_at, r.key COLLATE "C", r.scope COLLATE "C")
          > ($4, $5 COLLATE "C", $6 COLLATE "C")
    ORDER BY r.created_at, r.key COLLATE "C", r.scope COLLATE "C"
    LIMIT $7
) p"#;

fn columns(state: RecordState) -> (i16, bool) {
    match state {
        RecordState::InFlight => (0, false),
        RecordState::Completed => (1, false),
        RecordState::OutcomeUnknown => (1, true),
    }
}

pub(super) async fn list(store: &PostgresStore, query: &ListQuery) -> Result<Page, StoreError> {
    let states: &[RecordState] = match &query.state {
        Some(state) => std::slice::from_ref(state),
        None => &RecordState::ALL,
    };
    let (states, outcome_unknown): (Vec<i16>, Vec<bool>) =
        states.iter().map(|&state| columns(state)).unzip();
    // No cursor: before every row (none is created at the epoch).
    let (after, key, scope): (SystemTime, &str, &str) = match &query.after {
        Some(cursor) => (cursor.created_at(), &cursor.key, &cursor.scope),
        None => (UNIX_EPOCH, "", ""),
    };
    // Every state's next `limit + 1` rows, merged (byte order, as the
    // statement's): the extra row says whether a next page exists.
    let rows_per_state = i64::from(query.limit) + 1;
    let params: [&(dyn ToSql + Sync); 7] = [
        &query.route,
        &states,
        &outcome_unknown,
        &after,
        &key,
        &scope,
        &rows_per_state,
    ];
    let mut rows = store
        .read(PAGE, &params)
        .await?
        .iter()
        .map(listed)
        .collect::<Result<Vec<_>, _>>()?;
    rows.sort_by(|a, b| (a.created_at, &a.key, &a.scope).cmp(&(b.created_at, &b.key, &b.scope)));
    Ok(Page::from_rows(rows, query.limit))
}

fn listed(row: &Row) -> Result<Listed, StoreError> {
    let status: Option<i32> = row.try_get("status").map_err(db_error)?;
    Ok(Listed {
        key: row.try_get("key").map_err(db_error)?,
        scope: row.try_get("scope").map_err(db_error)?,
        state: record_state(
            row.try_get("state").map_err(db_error)?,
            row.try_get("outcome_unknown").map_err(db_error)?,
        ),
        status: status.and_then(|s| u16::try_from(s).ok()),
        created_at: row.try_get("created_at").map_err(db_error)?,
        completed_at: row.try_get("completed_at").map_err(db_error)?,
        expires_at: row.try_get("expires_at").map_err(db_error)?,
    })
}
