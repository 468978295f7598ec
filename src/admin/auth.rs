//! Who may use the operator API (`/admin/*`): whoever sends the bearer
//! token `[admin]` configures, compared in constant time. The probes and
//! `/metrics` ask for none.

use http::HeaderMap;
use http::header;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::GatewayError;

/// `/admin/*` without a configured token is disabled (404 `not-found`);
/// with one, a missing bearer token is 401 and a wrong one 403.
pub fn check(expected: Option<&str>, headers: &HeaderMap) -> Result<(), GatewayError> {
    let Some(expected) = expected.filter(|t| !t.is_empty()) else {
        return Err(GatewayError::AdminDisabled);
    };
    let mut fields = headers.get_all(header::AUTHORIZATION).iter();
    let presented = match (fields.next(), fields.next()) {
        (Some(value), None) => value.to_str().ok().and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        }),
        // Two lines are one field `a, b` (RFC 9110 §5.3), never one bearer
        // token, whichever line holds the right one.
        _ => None,
    };
    match presented {
        None => Err(GatewayError::Unauthorized),
        Some(token) if same_token(token, expected) => Ok(()),
        Some(_) => Err(GatewayError::Forbidden),
    }
}

/// Compares digests, without an early exit: the time taken tells neither
/// how much of a guess was right nor the token's length (`ct_eq` on the
/// tokens themselves returns at once when the lengths differ).
fn same_token(presented: &str, expected: &str) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    bool::from(presented.as_slice().ct_eq(expected.as_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn token_matrix() {
        assert_eq!(
            check(None, &headers(Some("Bearer x"))),
            Err(GatewayError::AdminDisabled)
        );
        assert_eq!(
            check(Some(""), &headers(None)),
            Err(GatewayError::AdminDisabled)
        );
        assert_eq!(
            check(Some("s3cret"), &headers(None)),
            Err(GatewayError::Unauthorized)
        );
        assert_eq!(
            check(Some("s3cret"), &headers(Some("Basic abc"))),
            Err(GatewayError::Unauthorized)
        );
        assert_eq!(
            check(Some("s3cret"), &headers(Some("Bearer s3cre"))),
            Err(GatewayError::Forbidden)
        );
        assert_eq!(
            check(Some("s3cret"), &headers(Some("Bearer s3cret0"))),
            Err(GatewayError::Forbidden)
        );
        assert_eq!(
            check(Some("s3cret"), &headers(Some("bearer s3cret"))),
            Ok(())
        );
        let mut twice = headers(Some("Bearer s3cret"));
        twice.append(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(
            check(Some("s3cret"), &twice),
            Err(GatewayError::Unauthorized)
        );
    }
}
