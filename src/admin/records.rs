//! One key's records as operators see them, shared by `/admin/keys/...` and
//! `idemgate keys show|purge`.

use std::time::SystemTime;

use http::{Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use crate::body::{self, Body};
use crate::client_info::ClientInfo;
use crate::error::GatewayError;
use crate::store::{RecordInfo, RecordState, Store};

/// A route as an `/admin/keys/...` path names it, percent-decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteName {
    /// Looked up whatever the running config says: a renamed route keeps
    /// its records.
    Named(String),
    /// A name no route can have: empty, not UTF-8, or holding a NUL (which
    /// Postgres text cannot hold either: asked for, it would fail as if the
    /// store were down). Answered as a name the running config lacks, after
    /// the same checks, with no look-up.
    Impossible,
}

/// `/admin/keys/{route}/{key}` → (route, key bytes), percent-decoded. The key
/// is the rest of the path, so a key containing `/` can be sent as is or as
/// `%2F`. Its bytes are the key as stored ([`crate::key::as_stored`]):
/// `a%20b` is the key `a b`, `%22ab%22` the key `"ab"`.
pub fn parse_key_path(path: &str) -> Option<(RouteName, Vec<u8>)> {
    let rest = path.strip_prefix("/admin/keys/")?;
    let (route, key) = rest.split_once('/')?;
    let key: Vec<u8> = percent_decode_str(key).collect();
    (!key.is_empty()).then(|| (route_name(route), key))
}

/// A route's path segment, percent-decoded.
pub fn route_name(segment: &str) -> RouteName {
    match percent_decode_str(segment).decode_utf8() {
        Ok(route) if !route.is_empty() && !route.contains('\0') => {
            RouteName::Named(route.into_owned())
        }
        _ => RouteName::Impossible,
    }
}

/// Whether a record still stands at `now`: a completed one until its
/// retention ends, an in-flight one until it is swept or purged. A
/// completed record past its retention only awaits the sweep: the data
/// plane runs the key's next request as a new one, so it is no record of
/// the key here either. An in-flight one whose lease ran out still refuses
/// every other request under its key (its holder may have run its own), so
/// an operator looking into a 422 must find it.
pub fn stands(record: &RecordInfo, now: SystemTime) -> bool {
    match record.state {
        RecordState::InFlight => true,
        RecordState::Completed | RecordState::OutcomeUnknown => {
            record.expires_at.is_some_and(|until| until > now)
        }
    }
}

/// The key's records that still stand ([`stands`]), as `keys show` and
/// `GET /admin/keys/{route}/{key}` show them.
pub async fn standing(
    store: &dyn Store,
    route: &str,
    key: &str,
) -> Result<Vec<RecordInfo>, crate::store::StoreError> {
    let mut records = store.records(route, key).await?;
    let now = SystemTime::now();
    records.retain(|record| stands(record, now));
    Ok(records)
}

pub fn to_json(records: &[RecordInfo]) -> Value {
    Value::Array(records.iter().map(record_json).collect())
}

fn record_json(record: &RecordInfo) -> Value {
    json!({
        "scope": record.scope,
        "state": record.state.as_str(),
        "fingerprint": record.fingerprint,
        "status": record.status,
        "created_at": rfc3339(Some(record.created_at)),
        "completed_at": rfc3339(record.completed_at),
        // docs/operating.md names the fields null while in flight (status,
        // completed_at), and expires_at is not one: an in-flight record
        // holds its key for any request until its lease runs out (the same
        // request then takes it over), so that is when it expires.
        "expires_at": rfc3339(record.expires_at.or(match record.state {
            RecordState::InFlight => record.lease_expires_at,
            RecordState::Completed | RecordState::OutcomeUnknown => None,
        })),
        "lease_expires_at": rfc3339(record.lease_expires_at),
    })
}

pub(crate) fn rfc3339(time: Option<SystemTime>) -> Value {
    match time {
        Some(time) => Value::String(humantime::format_rfc3339_millis(time).to_string()),
        None => Value::Null,
    }
}

pub async fn show(
    store: &dyn Store,
    route: &str,
    key: &str,
) -> Result<Response<Body>, GatewayError> {
    let records = standing(store, route, key).await.map_err(unavailable)?;
    if records.is_empty() {
        return Err(GatewayError::NotFound);
    }
    Ok(super::json(
        StatusCode::OK,
        "application/json",
        &to_json(&records),
    ))
}

pub async fn purge(
    store: &dyn Store,
    route: &str,
    key: &str,
    client: &ClientInfo,
) -> Result<Response<Body>, GatewayError> {
    let standing = purge_standing(store, route, key, PurgedBy::AdminApi(client))
        .await
        .map_err(unavailable)?;
    if standing == 0 {
        return Err(GatewayError::NotFound);
    }
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// Deletes the key's records, logs the purge, and says how many of them
/// still stood ([`stands`]). Records past their expiry go too (the sweep
/// would delete them), but they were no record of the key: a purge that
/// took none that stood found nothing (404, "no records"), as `GET` and
/// `keys show` found nothing. The log line counts every record deleted.
pub async fn purge_standing(
    store: &dyn Store,
    route: &str,
    key: &str,
    by: PurgedBy<'_>,
) -> Result<u64, crate::store::StoreError> {
    let all = store.records(route, key).await?;
    let now = SystemTime::now();
    let lapsed = all.iter().filter(|record| !stands(record, now)).count() as u64;
    let purged = store.purge(route, key).await?;
    log_purge(route, key, purged, by);
    Ok(purged.saturating_sub(lapsed))
}

/// Who purged a key, for the log line that says so.
pub enum PurgedBy<'a> {
    /// `DELETE /admin/keys/{route}/{key}`, over this connection.
    AdminApi(&'a ClientInfo),
    /// `idemgate keys purge`.
    Command,
}

/// One info line per purge that deleted records, so that an operator can
/// tell afterwards who freed a key, and when. The key as the data plane
/// logs it (its short hash), never the key itself.
pub fn log_purge(route: &str, key: &str, records: u64, by: PurgedBy<'_>) {
    if records == 0 {
        return;
    }
    let key = crate::key::short_hash(key);
    match by {
        PurgedBy::AdminApi(client) => tracing::info!(
            route,
            %key,
            records,
            by = "admin api",
            client = %client.addr,
            client_cert = client.cert_subject.as_deref(),
            "key purged"
        ),
        PurgedBy::Command => {
            tracing::info!(route, %key, records, by = "idemgate keys purge", "key purged");
        }
    }
}

pub(crate) fn unavailable(error: crate::store::StoreError) -> GatewayError {
    tracing::warn!(%error, "admin request: store unavailable");
    GatewayError::StoreUnavailable {
        retry_after: std::time::Duration::from_secs(1),
        refusal: error.refusal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_stands_until_its_retention_ends_or_for_good_in_flight() {
        use std::time::Duration;
        let now = SystemTime::now();
        let second = Duration::from_secs(1);
        let record = |state, expires_at, lease_expires_at| RecordInfo {
            scope: "s".into(),
            state,
            fingerprint: "f".into(),
            status: None,
            created_at: now - second * 10,
            completed_at: None,
            expires_at,
            lease_expires_at,
        };
        for state in [RecordState::Completed, RecordState::OutcomeUnknown] {
            assert!(stands(&record(state, Some(now + second), None), now));
            assert!(!stands(&record(state, Some(now), None), now));
            assert!(!stands(&record(state, Some(now - second), None), now));
        }
        let in_flight = RecordState::InFlight;
        assert!(stands(&record(in_flight, None, Some(now + second)), now));
        assert!(stands(&record(in_flight, None, Some(now - second)), now));
    }

    #[test]
    fn key_paths() {
        let charges = || RouteName::Named("charges".into());
        assert_eq!(
            parse_key_path("/admin/keys/charges/abc"),
            Some((charges(), b"abc".to_vec()))
        );
        assert_eq!(
            parse_key_path("/admin/keys/charges/a%2Fb/c"),
            Some((charges(), b"a/b/c".to_vec()))
        );
        assert_eq!(
            parse_key_path("/admin/keys/charges/%22k1%22"),
            Some((charges(), b"\"k1\"".to_vec()))
        );
        // Not UTF-8: left for the key rules to refuse (400), not a 404.
        assert_eq!(
            parse_key_path("/admin/keys/charges/%FF"),
            Some((charges(), vec![0xFF]))
        );
        assert_eq!(parse_key_path("/admin/keys/charges/"), None);
        for impossible in ["char%00ges", "%FF", ""] {
            assert_eq!(
                parse_key_path(&format!("/admin/keys/{impossible}/k")),
                Some((RouteName::Impossible, b"k".to_vec())),
                "{impossible}"
            );
        }
        assert_eq!(parse_key_path("/admin/keys/charges"), None);
    }
}
