//! Listing records for operators, through the `idemgate_records_listing`
//! index (route, state, outcome_unknown, created_at, key, scope; expires_at
//! included): a page is one range of it per state. Counting them is `count`.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::PostgresStore;
use super::pool::db_error;
use super::rows::record_state;
use crate::store::listing::{ListQuery, Listed, Page};
use crate::store::{RecordState, StoreError};

/// One state's records after the cursor, oldest first; records past their
/// retention or lease (awaiting the sweep) are skipped. An in-flight
/// record's expiry is its lease's. Key and scope compare
/// in byte order, as the index keeps them.
///
/// `$1 route, $2 state, $3 outcome unknown, $4..$6 cursor, $7 rows`.
const PAGE: &str = r#"
SELECT key, scope, state, outcome_unknown, status, created_at, completed_at,
       CASE state WHEN 0 THEN lease_expires_at ELSE expires_at END AS expires_at
FROM idemgate_records
WHERE route = $1 AND state = $2 AND outcome_unknown = $3
  AND (CASE state WHEN 0 THEN lease_expires_at ELSE expires_at END) > now()
  AND (created_at, key COLLATE "C", scope COLLATE "C") > ($4, $5 COLLATE "C", $6 COLLATE "C")
ORDER BY created_at, key COLLATE "C", scope COLLATE "C"
LIMIT $7"#;

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
    // Every state's next `limit + 1` rows, merged (byte order, as the
    // statement's): the extra row says whether a next page exists.
    let mut rows = Vec::new();
    for &state in states {
        for row in one_state(store, query, state).await? {
            rows.push(listed(&row)?);
        }
    }
    rows.sort_by(|a, b| (a.created_at, &a.key, &a.scope).cmp(&(b.created_at, &b.key, &b.scope)));
    Ok(Page::from_rows(rows, query.limit))
}

async fn one_state(
    store: &PostgresStore,
    query: &ListQuery,
    state: RecordState,
) -> Result<Vec<Row>, StoreError> {
    let (state, outcome_unknown) = columns(state);
    // No cursor: before every row (none is created at the epoch).
    let (after, key, scope): (SystemTime, &str, &str) = match &query.after {
        Some(cursor) => (cursor.created_at(), &cursor.key, &cursor.scope),
        None => (UNIX_EPOCH, "", ""),
    };
    let rows = i64::from(query.limit) + 1;
    let params: [&(dyn ToSql + Sync); 7] = [
        &query.route,
        &state,
        &outcome_unknown,
        &after,
        &key,
        &scope,
        &rows,
    ];
    store.query(PAGE, &params).await
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
