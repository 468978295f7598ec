//! `GET /admin/keys/{route}?state=&limit=&after=`: one page of a route's
//! records, oldest first, shared with `idemgate keys list`.

use http::{Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use super::records::{RouteName, rfc3339, unavailable};
use crate::body::Body;
use crate::error::GatewayError;
use crate::store::listing::{DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::{Cursor, ListQuery, Listed, Page, RecordState, Store};

/// `/admin/keys/{route}` (no key after it) → the route, percent-decoded.
pub fn parse_list_path(path: &str) -> Option<RouteName> {
    let route = path.strip_prefix("/admin/keys/")?;
    if route.is_empty() || route.contains('/') {
        return None;
    }
    Some(super::records::route_name(route))
}

/// The query string's parameters; anything unknown, repeated or malformed
/// is refused with what was wrong.
pub fn parse_query(route: String, query: Option<&str>) -> Result<ListQuery, GatewayError> {
    let mut list = ListQuery {
        route,
        state: None,
        limit: DEFAULT_LIMIT,
        after: None,
    };
    let mut seen: Vec<String> = Vec::new();
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        // Names decode as values do: a client may encode either.
        let decode = |text: &str| {
            percent_decode_str(&text.replace('+', " "))
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| GatewayError::InvalidQuery("a query parameter is not UTF-8"))
        };
        let (name, value) = (decode(name)?, decode(value)?);
        let name = name.as_str();
        if seen.iter().any(|s| s == name) {
            return Err(GatewayError::InvalidQuery(
                "a query parameter is given twice",
            ));
        }
        seen.push(name.to_owned());
        match name {
            "state" => {
                list.state = Some(RecordState::parse(&value).ok_or(GatewayError::InvalidQuery(
                    "state must be in_flight, completed or outcome_unknown",
                ))?);
            }
            "limit" => {
                // Digits only: `parse` would also take a sign (`%2B5`),
                // which the form decoding of `+5` (a space) never reaches.
                list.limit = Some(&value)
                    .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u32>().ok())
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or(GatewayError::InvalidQuery(
                        "limit must be an integer from 1 to 1000",
                    ))?;
            }
            // Read once the state filter is known: a cursor names its listing.
            "after" => after = Some(value),
            _ => {
                return Err(GatewayError::InvalidQuery(
                    "the known query parameters are state, limit and after",
                ));
            }
        }
    }
    if let Some(text) = after {
        let cursor = Cursor::decode(&text, &list.route, list.state).map_err(|_| {
            GatewayError::InvalidQuery(
                "after must be a cursor from the `next` of an earlier page of this listing \
                 (the same route and state)",
            )
        })?;
        list.after = Some(cursor);
    }
    Ok(list)
}

/// The page of the listing of `route` in `state`, which its `next` names.
pub fn to_json(page: &Page, route: &str, state: Option<RecordState>) -> Value {
    json!({
        "records": page.records.iter().map(record_json).collect::<Vec<_>>(),
        "next": page.next.as_ref().map(|next| next.encode(route, state)),
    })
}

fn record_json(record: &Listed) -> Value {
    json!({
        "key": record.key,
        "scope": record.scope,
        "state": record.state.as_str(),
        "status": record.status,
        "created_at": rfc3339(Some(record.created_at)),
        "completed_at": rfc3339(record.completed_at),
        "expires_at": rfc3339(record.expires_at),
    })
}

/// `known_route`: the running config has a route of this name. Any name is
/// listed (a renamed route keeps its records until they expire), but a
/// first page empty on a name it lacks is most likely a misspelt one, said
/// so (404) as `idemgate keys list` says it, rather than an empty page that
/// a script reads as nothing to reconcile.
pub async fn list(
    store: &dyn Store,
    query: &ListQuery,
    known_route: bool,
) -> Result<Response<Body>, GatewayError> {
    let page = store.list(query).await.map_err(unavailable)?;
    if page.records.is_empty() && query.after.is_none() && !known_route {
        return Err(GatewayError::NoSuchRoute);
    }
    Ok(super::json(
        StatusCode::OK,
        "application/json",
        &to_json(&page, &query.route, query.state),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<ListQuery, &'static str> {
        parse_query("charges".into(), Some(query)).map_err(|e| e.code())
    }

    #[test]
    fn list_paths() {
        let named = |name: &str| Some(RouteName::Named(name.into()));
        assert_eq!(parse_list_path("/admin/keys/charges"), named("charges"));
        assert_eq!(parse_list_path("/admin/keys/a%2Eb"), named("a.b"));
        assert_eq!(parse_list_path("/admin/keys/charges/k1"), None);
        assert_eq!(parse_list_path("/admin/keys/"), None);
        for impossible in ["char%00ges", "%FF"] {
            let path = format!("/admin/keys/{impossible}");
            assert_eq!(parse_list_path(&path), Some(RouteName::Impossible));
        }
    }

    /// The refusal names the bound the store holds a page to: a script that
    /// asked for more learns how many it may ask for.
    #[test]
    fn a_limit_past_the_maximum_is_refused_naming_it() {
        let error = parse_query("r".into(), Some(&format!("limit={}", MAX_LIMIT + 1)));
        let Err(GatewayError::InvalidQuery(why)) = error else {
            panic!("{error:?}")
        };
        assert!(why.ends_with(&format!(" from 1 to {MAX_LIMIT}")), "{why}");
        assert!(parse_query("r".into(), Some(&format!("limit={MAX_LIMIT}"))).is_ok());
    }

    #[test]
    fn queries_parse_or_are_refused_with_a_code() {
        let all = parse("").unwrap();
        assert_eq!((all.state, all.limit, all.after), (None, 100, None));
        let cursor = Cursor {
            created_at_us: 5,
            key: "k".into(),
            scope: "s".into(),
        };
        let unknown = Some(RecordState::OutcomeUnknown);
        // The cursor read with the state that comes after it.
        let some = parse(&format!(
            "after={}&state=outcome_unknown&limit=1000",
            cursor.encode("charges", unknown)
        ))
        .unwrap();
        assert_eq!(some.state, unknown);
        assert_eq!(some.limit, 1000);
        assert_eq!(some.after, Some(cursor.clone()));
        // A name percent-encoded reads as written plainly.
        assert_eq!(
            parse("l%69mit=5&%73tate=completed").map(|q| (q.limit, q.state)),
            Ok((5, Some(RecordState::Completed)))
        );
        let elsewhere = format!("after={}", cursor.encode("charges", unknown));
        assert_eq!(parse(&elsewhere).map(drop), Err("invalid-query"));
        for bad in [
            "state=done",
            "state=",
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=ten",
            "limit=%2B5",
            "limit=+5",
            "limit=%205",
            "after=zz",
            "after=",
            "page=2",
            "limit=1&limit=2",
        ] {
            assert_eq!(parse(bad).map(drop), Err("invalid-query"), "{bad}");
        }
    }
}
