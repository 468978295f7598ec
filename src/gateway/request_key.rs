//! Phase "request_key": find the request's idempotency key, reading (and bounding)
//! the body where the key or the fingerprint needs it.

use crate::body::ClientBody;
use bytes::{Bytes, BytesMut};
use http::header;
use http::request::Parts;
use http_body_util::BodyExt;

use crate::body::{self, Body, BodyBudget};
use crate::error::{GatewayError, INCOMPLETE_BODY};
use crate::key::{self, FoundKey, KeyError, KeySource, RequestView};
use crate::route::RoutePolicy;

/// What the key phase found.
pub enum KeyedRequest {
    /// A usable key and the whole body. `derived`: the gateway made the key
    /// (`derive`); the client is told it, and the upstream gets it.
    Keyed {
        key: String,
        body: Bytes,
        derived: bool,
    },
    /// No key on a route that does not require one: forward untouched. The
    /// body streams, unless the key had to be looked for in it.
    Unkeyed { body: Body },
}

/// How a body is read whole: `limits` bound the wait for each next piece
/// and for all of it, `budget` the bytes held in memory by every request
/// at once.
#[derive(Clone, Copy)]
pub struct Reading<'a> {
    pub limits: body::ReadLimits,
    pub budget: &'a BodyBudget,
}

pub async fn extract(
    policy: &RoutePolicy,
    parts: &Parts,
    incoming: ClientBody,
    reading: Reading<'_>,
) -> Result<KeyedRequest, GatewayError> {
    // The common route, one key header: nothing else is looked at.
    let [KeySource::Header(name)] = policy.key.as_slice() else {
        return extract_any(policy, parts, incoming, reading).await;
    };
    let mut values = parts.headers.get_all(name).iter();
    let key = match (values.next(), values.next()) {
        (None, _) if !policy.required => {
            return Ok(KeyedRequest::Unkeyed {
                body: body::stream(incoming),
            });
        }
        (None, _) => Err(GatewayError::MissingKey),
        // Two lines are one field, `a, b` (RFC 9110 §5.3): never one key.
        (Some(_), Some(_)) => Err(GatewayError::InvalidKey(
            "the key header is sent more than once",
        )),
        (Some(value), None) => key::from_header_value(value.as_bytes()).map_err(key_error),
    };
    // Refused before its body is read: over HTTP/2 the body is
    // still read for a moment after the answer (body::Http2Body).
    let key = key?;
    check_pattern(policy, &key)?;
    let body = read_body(policy, parts, incoming, reading).await?;
    Ok(KeyedRequest::Keyed {
        key,
        body,
        derived: false,
    })
}

/// Any other list of sources, tried in order. Those before the first that
/// needs the body are tried before it is read, so a bad header key is
/// refused without reading a body.
async fn extract_any(
    policy: &RoutePolicy,
    parts: &Parts,
    incoming: ClientBody,
    reading: Reading<'_>,
) -> Result<KeyedRequest, GatewayError> {
    let query = parts.uri.query();
    let authority = parts.uri.authority().map(http::uri::Authority::as_str);
    let first_in_body = policy
        .key
        .iter()
        .position(KeySource::needs_body)
        .unwrap_or(policy.key.len());
    let (before, after) = policy.key.split_at(first_in_body);
    match RequestView::new(&parts.headers, query, None)
        .with_authority(authority)
        .key(before)
    {
        Ok(found) => {
            check_found(policy, &found)?;
            let body = read_body(policy, parts, incoming, reading).await?;
            return Ok(keyed(found, body));
        }
        Err(KeyError::Missing) => {}
        Err(error) => return Err(key_error(error)),
    }
    if after.is_empty() {
        return if policy.required {
            Err(GatewayError::MissingKey)
        } else {
            Ok(KeyedRequest::Unkeyed {
                body: body::stream(incoming),
            })
        };
    }
    let body = read_body(policy, parts, incoming, reading).await?;
    let found = RequestView::new(&parts.headers, query, Some(&body))
        .with_authority(authority)
        .key(after);
    match found {
        Ok(found) => {
            check_found(policy, &found)?;
            Ok(keyed(found, body))
        }
        Err(KeyError::Missing) => missing(policy, body::full(body)),
        Err(error) => Err(key_error(error)),
    }
}

fn keyed(found: FoundKey, body: Bytes) -> KeyedRequest {
    KeyedRequest::Keyed {
        key: found.key,
        body,
        derived: found.derived,
    }
}

/// `key_pattern` holds for the keys clients send; a derived key is the
/// gateway's own.
fn check_found(policy: &RoutePolicy, found: &FoundKey) -> Result<(), GatewayError> {
    if found.derived {
        Ok(())
    } else {
        check_pattern(policy, &found.key)
    }
}

fn check_pattern(policy: &RoutePolicy, key: &str) -> Result<(), GatewayError> {
    match &policy.key_pattern {
        Some(pattern) if !pattern.matches(key) => Err(GatewayError::InvalidKey(
            "it does not have the form this route's keys must have (key_pattern)",
        )),
        _ => Ok(()),
    }
}

fn missing(policy: &RoutePolicy, body: Body) -> Result<KeyedRequest, GatewayError> {
    if policy.required {
        Err(GatewayError::MissingKey)
    } else {
        Ok(KeyedRequest::Unkeyed { body })
    }
}

fn key_error(error: KeyError) -> GatewayError {
    match error {
        KeyError::Missing => GatewayError::MissingKey,
        KeyError::Invalid(why) => GatewayError::InvalidKey(why),
    }
}

/// Reads the whole body, refusing more than `max_request_body` bytes before
/// reading them when `Content-Length` already says so. A client that stops
/// sending for `header_read_timeout`, or has not sent it all within
/// `body_read_timeout`, is answered 408: the head's timeout is behind it,
/// and nothing else would end the wait (a slow-body attack on keyed routes,
/// which would also hold its share of the body budget).
async fn read_body(
    policy: &RoutePolicy,
    parts: &Parts,
    incoming: ClientBody,
    reading: Reading<'_>,
) -> Result<Bytes, GatewayError> {
    read_whole(policy.max_request_body, parts, incoming, reading).await
}

/// [`read_body`] with its limit given: a webhook route reads every body.
/// The bytes read are taken from the budget as they arrive, and the body
/// returned holds them until its last copy is dropped; past the budget, the
/// request is refused 503. Not all at once when `Content-Length` announces
/// them: a client that declares a large body and sends it slowly would hold
/// the whole of it, and a few such clients all of the budget, having sent
/// next to nothing.
pub(super) async fn read_whole(
    limit: u64,
    parts: &Parts,
    incoming: ClientBody,
    reading: Reading<'_>,
) -> Result<Bytes, GatewayError> {
    let too_large = GatewayError::BodyTooLarge { limit };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large);
    }
    // A body that arrived with its head counts too: read ahead behind a
    // pipelined request it may be tens of KiB, held as long as any other.
    // One read whole before (a webhook's, read for its signature) holds its
    // share already.
    let mut share = (!matches!(incoming, ClientBody::Held(_))).then(|| reading.budget.share());
    let mut incoming = body::IdleLimit::within(incoming, reading.limits);
    let capacity = declared.map_or(0, |length| usize::try_from(length).unwrap_or(0));
    let mut whole = Gathered::Empty;
    let mut total: u64 = 0;
    while let Some(frame) = incoming.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                return Err(body::SlowBody::of(&error)
                    .map_or(INCOMPLETE_BODY, GatewayError::RequestTimeout));
            }
        };
        // Trailers are not part of the body the key or fingerprint reads.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total > limit {
            return Err(too_large);
        }
        if let Some(share) = share.as_mut() {
            share
                .take(data.len())
                .map_err(|_| GatewayError::BodiesOverBudget)?;
        }
        whole.push(data, capacity);
    }
    let whole = whole.into_bytes();
    Ok(match share {
        Some(share) => body::budget::hold_with(whole, share),
        None => whole,
    })
}

/// A body gathered frame by frame: one frame is kept as it came (no copy);
/// more are copied into one buffer as they arrive, sized by `Content-Length`
/// when there is one, so a body is never held twice over at its end.
enum Gathered {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Gathered {
    fn push(&mut self, data: Bytes, capacity: usize) {
        *self = match std::mem::replace(self, Gathered::Empty) {
            Gathered::Empty => Gathered::One(data),
            Gathered::One(first) => {
                let mut buffer = BytesMut::with_capacity(capacity.max(first.len() + data.len()));
                buffer.extend_from_slice(&first);
                buffer.extend_from_slice(&data);
                Gathered::Many(buffer)
            }
            Gathered::Many(mut buffer) => {
                buffer.extend_from_slice(&data);
                Gathered::Many(buffer)
            }
        };
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Gathered::Empty => Bytes::new(),
            Gathered::One(bytes) => bytes,
            Gathered::Many(buffer) => buffer.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_gather_into_one_body_and_a_lone_frame_is_not_copied() {
        assert_eq!(Gathered::Empty.into_bytes(), Bytes::new());
        let lone = Bytes::from_static(b"whole");
        let mut one = Gathered::Empty;
        one.push(lone.clone(), 5);
        assert_eq!(one.into_bytes().as_ptr(), lone.as_ptr());
        for capacity in [0, 9, 100] {
            let mut many = Gathered::Empty;
            for frame in ["ab", "cde", "", "fghi"] {
                many.push(Bytes::from_static(frame.as_bytes()), capacity);
            }
            assert_eq!(many.into_bytes(), "abcdefghi", "capacity {capacity}");
        }
    }
}
