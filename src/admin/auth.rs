use http::HeaderMap;
use http::header;

use crate::error::GatewayError;

/// `/admin/*` without a configured token is disabled (404 `not-found`);
/// with one, a missing bearer token is 401 and a wrong one 403.
pub fn check(expected: Option<&str>, headers: &HeaderMap) -> Result<(), GatewayError> {
    let Some(expected) = expected.filter(|t| !t.is_empty()) else {
        return Err(GatewayError::AdminDisabled);
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    match presented {
        None => Err(GatewayError::Unauthorized),
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(GatewayError::Forbidden),
    }
}

/// Compares without an early exit, so the time taken does not tell an
/// attacker how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in a.iter().enumerate() {
        let other = b.get(i % b.len().max(1)).copied().unwrap_or(0);
        difference |= usize::from(byte ^ other);
    }
    difference == 0
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
    }
}
