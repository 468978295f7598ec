//! Phase "key": find the request's idempotency key, reading (and bounding)
//! the body where the key or the fingerprint needs it.

use std::time::Duration;

use crate::body::ClientBody;
use bytes::Bytes;
use http::header;
use http::request::Parts;
use http_body_util::{BodyExt, Limited};

use crate::body::{self, Body};
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

/// `body_idle` bounds the wait for each next piece of a body read here.
pub async fn extract(
    policy: &RoutePolicy,
    parts: &Parts,
    incoming: ClientBody,
    body_idle: Duration,
) -> Result<KeyedRequest, GatewayError> {
    // The common route, one key header: nothing else is looked at.
    let [KeySource::Header(name)] = policy.key.as_slice() else {
        return extract_any(policy, parts, incoming, body_idle).await;
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
    let body = read_body(policy, parts, incoming, body_idle).await?;
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
    body_idle: Duration,
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
            let body = read_body(policy, parts, incoming, body_idle).await?;
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
    let body = read_body(policy, parts, incoming, body_idle).await?;
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
/// sending for `idle` is answered 408: the head's timeout is behind it, and
/// nothing else would end the wait (a slow-body attack on keyed routes).
async fn read_body(
    policy: &RoutePolicy,
    parts: &Parts,
    incoming: ClientBody,
    idle: Duration,
) -> Result<Bytes, GatewayError> {
    read_whole(policy.max_request_body, parts, incoming, idle).await
}

/// [`read_body`] with its limit given: a webhook route reads every body.
pub(super) async fn read_whole(
    limit: u64,
    parts: &Parts,
    incoming: ClientBody,
    idle: Duration,
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
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body::IdleLimit::new(incoming, idle), limit)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large),
        Err(error) if body::is_stalled(&error) => Err(GatewayError::RequestTimeout { idle }),
        Err(_) => Err(INCOMPLETE_BODY),
    }
}
