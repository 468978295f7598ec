//! Answers under a key: a fresh one (marker `false`) or a stored one replayed
//! (marker `true`), byte for byte but for `Date`.

use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};

use crate::body::{self, Body};
use crate::route::RoutePolicy;
use crate::store::StoredResponse;
use crate::wire::fields;

const REPLAY_OMITTED: HeaderName = HeaderName::from_static("idempotency-replay");
pub(super) const DEGRADED: HeaderName = HeaderName::from_static("idempotency-degraded");

/// The gateway's own fields about a key, besides the marker.
const GATEWAY_FIELDS: [HeaderName; 2] = [REPLAY_OMITTED, DEGRADED];

/// A stored answer as a replay. The route's `replay_exclude_headers` and
/// `replay_headers` as they are at the replay apply: a header excluded (or
/// no longer allowed) after an answer was stored is not replayed either ("never stored nor
/// replayed").
///
/// The gateway's own outcome-unknown problem is replayed whole: its headers
/// (`Content-Type`, the problem's `Link`) are the gateway's, not an
/// upstream's that those lists choose from.
pub fn replayed(stored: &StoredResponse, policy: &RoutePolicy) -> Response<Body> {
    let kept = if stored.outcome_unknown {
        Kept::ALL
    } else {
        Kept {
            exclude: &policy.replay_exclude_headers,
            only: &policy.replay_headers,
        }
    };
    from_stored(
        stored,
        policy.replay_header.name(),
        kept,
        &policy.replay_values.replayed,
    )
}

/// A stored answer given to the request that produced it (an outcome-unknown
/// problem is stored first, then answered like this).
pub fn fresh_from_stored(stored: &StoredResponse, policy: &RoutePolicy) -> Response<Body> {
    from_stored(
        stored,
        policy.replay_header.name(),
        Kept::ALL,
        &policy.replay_values.fresh,
    )
}

/// Which answer headers are stored and replayed: `replay_headers` (when
/// not empty: only those, and `Content-Type` and `Content-Encoding`, without
/// which the stored bytes cannot be read), less `replay_exclude_headers`.
#[derive(Clone, Copy)]
pub struct Kept<'a> {
    pub exclude: &'a [HeaderName],
    pub only: &'a [HeaderName],
}

impl Kept<'_> {
    pub const ALL: Kept<'static> = Kept {
        exclude: &[],
        only: &[],
    };

    pub fn keeps(&self, name: &HeaderName) -> bool {
        !self.exclude.contains(name)
            && (self.only.is_empty()
                || *name == header::CONTENT_TYPE
                || *name == header::CONTENT_ENCODING
                || self.only.contains(name))
    }
}

fn from_stored(
    stored: &StoredResponse,
    marker: &HeaderName,
    kept: Kept<'_>,
    marker_value: &HeaderValue,
) -> Response<Body> {
    let body = if stored.body_omitted {
        body::empty()
    } else {
        body::full(stored.body.clone())
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    // Room for the stored headers and the marker at once, not grown twice.
    headers.reserve(stored.headers.len() + 2);
    for (name, value) in stored.headers.iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(value.clone()),
        ) && kept.keeps(&name)
        {
            headers.append(name, value);
        }
    }
    if stored.body_omitted {
        // The original length no longer describes the (empty) body sent.
        headers.remove(header::CONTENT_LENGTH);
        headers.insert(REPLAY_OMITTED, HeaderValue::from_static("omitted"));
    } else if stale_length(stored, headers) {
        // A stored length that does not describe the body (one beside
        // `Transfer-Encoding`, or a 204's, as records of earlier versions
        // may hold) goes: HTTP/2 clients refuse such an answer. Each writer
        // sets the body's own length.
        headers.remove(header::CONTENT_LENGTH);
    }
    mark(headers, marker, marker_value);
    response
}

/// Whether the stored `Content-Length` is not the stored body's: any on a
/// 204, or another number beside a body (an empty body keeps it: a HEAD
/// answer's length describes the representation, not the body).
fn stale_length(stored: &StoredResponse, headers: &HeaderMap) -> bool {
    let Some(length) = headers.get(header::CONTENT_LENGTH) else {
        return false;
    };
    stored.status == 204
        || (!stored.body.is_empty()
            && length
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<usize>().ok())
                != Some(stored.body.len()))
}

/// Removes a marker the upstream may have sent from an answer given under no
/// key (pass-through, or forwarded without a record): docs/behaviour.md: those carry
/// none, and a client must not read an upstream's field of that name as ours.
/// The gateway's other fields go too (see [`drop_gateway_fields`]).
pub fn unmark(headers: &mut HeaderMap, marker: &HeaderName) {
    fields::remove_where(headers, |name| {
        name == marker || GATEWAY_FIELDS.contains(name)
    });
}

/// Removes what an upstream sent under the names of the gateway's own fields
/// (`Idempotency-Replay`, `Idempotency-Degraded`), before an answer is stored
/// or given: only the gateway says a body was omitted or a record not kept.
pub fn drop_gateway_fields(headers: &mut HeaderMap) {
    fields::remove_where(headers, |name| GATEWAY_FIELDS.contains(name));
}

/// Sets the replay marker (one of the route's `replay_values`), replacing
/// any the upstream may have sent.
pub fn mark(headers: &mut HeaderMap, marker: &HeaderName, value: &HeaderValue) {
    headers.insert(marker.clone(), value.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn replay_of(status: u16, length: &str, body: &'static [u8]) -> Response<Body> {
        let stored = StoredResponse {
            status,
            headers: vec![("content-length".to_owned(), Bytes::from(length.to_owned()))].into(),
            body: Bytes::from_static(body),
            body_omitted: false,
            outcome_unknown: false,
        };
        from_stored(
            &stored,
            &HeaderName::from_static("idempotent-replayed"),
            Kept::ALL,
            &HeaderValue::from_static("true"),
        )
    }

    /// A stored length (as records of earlier versions may hold) is not
    /// replayed when it does not describe the body.
    #[test]
    fn a_stale_stored_length_is_not_replayed() {
        let stale = replay_of(201, "99", b"{}");
        assert!(stale.headers().get(header::CONTENT_LENGTH).is_none());
        let no_content = replay_of(204, "0", b"");
        assert!(no_content.headers().get(header::CONTENT_LENGTH).is_none());
        let right = replay_of(201, "2", b"{}");
        assert_eq!(right.headers()[header::CONTENT_LENGTH], "2");
        let head = replay_of(200, "42", b"");
        assert_eq!(head.headers()[header::CONTENT_LENGTH], "42");
    }

    /// Every line of the marker and of the gateway's own fields goes, and
    /// nothing else: the rest of the answer is as the upstream sent it.
    #[test]
    fn unmark_removes_the_gateway_fields_and_only_them() {
        let marker = HeaderName::from_static("idempotent-replayed");
        let mut headers = HeaderMap::new();
        headers.append("location", HeaderValue::from_static("/v1/charges/1"));
        headers.append(&marker, HeaderValue::from_static("true"));
        headers.append(&marker, HeaderValue::from_static("false"));
        headers.append(REPLAY_OMITTED, HeaderValue::from_static("omitted"));
        headers.append(DEGRADED, HeaderValue::from_static("true"));
        headers.append("x-idempotent", HeaderValue::from_static("kept"));
        let mut unmarked = headers.clone();
        unmark(&mut unmarked, &marker);
        let names: Vec<&str> = unmarked.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["location", "x-idempotent"]);

        drop_gateway_fields(&mut headers);
        assert_eq!(
            headers.get_all(&marker).iter().count(),
            2,
            "the marker is not theirs"
        );
        assert!(!headers.contains_key(REPLAY_OMITTED) && !headers.contains_key(DEGRADED));

        let mut plain = HeaderMap::new();
        plain.append("content-type", HeaderValue::from_static("application/json"));
        unmark(&mut plain, &marker);
        assert_eq!(plain.len(), 1);
    }
}
