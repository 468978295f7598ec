//! Fields the gateway adds to answers given under a key: the derived key
//! (`Idempotency-Key`) and the record's expiry (`expiry_header`).

use std::time::SystemTime;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::route::RoutePolicy;

/// Where a derived key is told to the client and forwarded to the upstream.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Sets the route's `expiry_header` to the record's expiry as an HTTP-date
/// (RFC 9110 §5.6.7), when the route has one. With no expiry (no record: a
/// released answer, or one not written) the field is removed: one the
/// upstream sent under that name would tell the client of a record that
/// does not exist.
pub fn expiry(headers: &mut HeaderMap, policy: &RoutePolicy, expires_at: Option<SystemTime>) {
    let Some(name) = &policy.expiry_header else {
        return;
    };
    match expires_at.map(httpdate::fmt_http_date) {
        Some(date) => {
            if let Ok(value) = HeaderValue::from_str(&date) {
                headers.insert(name.clone(), value);
            }
        }
        None => {
            headers.remove(name);
        }
    }
}

/// A derived key as a field value (a UUID is always one).
pub fn derived_key(key: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(key).ok()
}
