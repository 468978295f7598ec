//! Who may use the operator API (`/admin/*`): whoever sends one of the
//! bearer tokens `[admin]` configures (several while one is rotated),
//! compared in constant time. The probes and `/metrics` ask for none.

use http::HeaderMap;
use http::header;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::client_info::ClientInfo;
use crate::config::AdminToken;
use crate::error::GatewayError;
use crate::log_limit::LogLimit;

/// `/admin/*` without a configured token is disabled (404 `not-found`);
/// with some, a missing bearer token is 401 and one matching none 403.
pub fn check(tokens: &[AdminToken], headers: &HeaderMap) -> Result<(), GatewayError> {
    if tokens.is_empty() {
        return Err(GatewayError::AdminDisabled);
    }
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
        Some(token) if any_token(token, tokens) => Ok(()),
        Some(_) => Err(GatewayError::Forbidden),
    }
}

/// A refused caller is logged, so that someone guessing tokens, or a
/// script left on a rotated-out one, shows: the reason and the client,
/// never the token nor the path (it may name a key). Once per reason and
/// interval (crate::log_limit): a guesser sends as fast as it likes.
pub fn log_refusal(error: &GatewayError, client: &ClientInfo) {
    static LIMIT: LogLimit = LogLimit::uncounted();
    let reason = match error {
        GatewayError::Unauthorized => "no bearer token",
        GatewayError::Forbidden => "the bearer token matches none configured",
        // A disabled API says why at start and on each reload.
        _ => return,
    };
    if let Some(left_out) = LIMIT.admit(reason) {
        tracing::warn!(
            reason,
            client = %client.addr,
            client_cert = client.cert_subject.as_deref(),
            not_logged = left_out.count(),
            "admin request refused{left_out}"
        );
    }
}

/// Compares digests, each of them, without an early exit: the time taken
/// tells neither how much of a guess was right, nor the tokens' lengths
/// (`ct_eq` on the tokens themselves returns at once when the lengths
/// differ), nor which token matched.
fn any_token(presented: &str, tokens: &[AdminToken]) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    let matched = tokens.iter().fold(Choice::from(0), |matched, token| {
        let expected = Sha256::digest(token.secret.as_bytes());
        matched | presented.as_slice().ct_eq(expected.as_slice())
    });
    bool::from(matched)
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

    fn tokens(secrets: &[&str]) -> Vec<AdminToken> {
        (secrets.iter().enumerate())
            .map(|(i, secret)| AdminToken {
                source: crate::config::TokenSource::Env(format!("TOKEN_{i}")),
                secret: (*secret).to_owned(),
            })
            .collect()
    }

    #[test]
    fn token_matrix() {
        let one = tokens(&["s3cret"]);
        assert_eq!(
            check(&[], &headers(Some("Bearer x"))),
            Err(GatewayError::AdminDisabled)
        );
        assert_eq!(check(&[], &headers(None)), Err(GatewayError::AdminDisabled));
        assert_eq!(check(&one, &headers(None)), Err(GatewayError::Unauthorized));
        assert_eq!(
            check(&one, &headers(Some("Basic abc"))),
            Err(GatewayError::Unauthorized)
        );
        assert_eq!(
            check(&one, &headers(Some("Bearer s3cre"))),
            Err(GatewayError::Forbidden)
        );
        assert_eq!(
            check(&one, &headers(Some("Bearer s3cret0"))),
            Err(GatewayError::Forbidden)
        );
        assert_eq!(check(&one, &headers(Some("bearer s3cret"))), Ok(()));
        let mut twice = headers(Some("Bearer s3cret"));
        twice.append(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert_eq!(check(&one, &twice), Err(GatewayError::Unauthorized));
    }

    /// While a token is rotated each listed one is accepted, whichever its
    /// place; a token matching none is refused, and so is one that two
    /// lines would make from both.
    #[test]
    fn any_of_several_tokens_is_accepted() {
        let several = tokens(&["n3w-token", "0ld-token", "third-token"]);
        for token in ["n3w-token", "0ld-token", "third-token"] {
            let presented = headers(Some(&format!("Bearer {token}")));
            assert_eq!(check(&several, &presented), Ok(()), "{token}");
        }
        for wrong in ["n3w-token0ld-token", "0ld-toke", "n3w-token 0ld-token", "x"] {
            let presented = headers(Some(&format!("Bearer {wrong}")));
            assert_eq!(
                check(&several, &presented),
                Err(GatewayError::Forbidden),
                "{wrong}"
            );
        }
        let mut both = headers(Some("Bearer n3w-token"));
        both.append(header::AUTHORIZATION, "Bearer 0ld-token".parse().unwrap());
        assert_eq!(check(&several, &both), Err(GatewayError::Unauthorized));
        assert_eq!(
            check(&several, &headers(None)),
            Err(GatewayError::Unauthorized)
        );
    }
}
