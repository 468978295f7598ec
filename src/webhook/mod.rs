//! Webhook senders' signatures: a webhook route checks every request's
//! signature before anything is reserved, so a forged delivery can neither
//! reach the consumer nor use up a real event id (docs/webhooks.md).
//!
//! One file per scheme; each reads its headers, rebuilds the signed content
//! and asks [`mac`] whether any signature in the request is its HMAC-SHA256
//! under any of the route's secrets (rotation).

mod github;
mod headers;
mod mac;
mod shopify;
mod standard;
mod stripe;
mod timestamp;

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use crate::config::{WebhookConfig, WebhookScheme};

/// Why a request's signature was refused. Told to the sender in the 401's
/// `detail` (it names headers and the rule, never a secret or a signature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the {0} header is sent more than once")]
    RepeatedHeader(&'static str),
    /// Two headers that name the same thing and disagree (which was signed?).
    #[error("the {0} and {1} headers differ")]
    Conflicting(&'static str, &'static str),
    #[error("the {0} header is malformed")]
    Malformed(&'static str),
    #[error("no signature matches the request under the route's secrets")]
    NoMatch,
    #[error("the signed timestamp is older than the route's tolerance")]
    TooOld,
    #[error("the signed timestamp is further ahead than the route's tolerance")]
    TooNew,
}

/// A request refused by a webhook route: which scheme (for
/// `WWW-Authenticate`) and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidSignature {
    pub scheme: WebhookScheme,
    pub rejection: Rejection,
}

/// A webhook route's check, built once per loaded config.
pub struct Verifier {
    scheme: WebhookScheme,
    /// HMAC keys, in the order of `secrets_env`.
    keys: Vec<Vec<u8>>,
    tolerance: Duration,
    /// Most body bytes read for the check (`server.max_request_body`).
    pub max_body: u64,
}

/// Counts the keys, never shows them: a route (and the route table that
/// holds it) may be debug-printed, and the config's secrets are redacted
/// for that same reason.
impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("keys", &format_args!("<{} redacted>", self.keys.len()))
            .field("tolerance", &self.tolerance)
            .field("max_body", &self.max_body)
            .finish()
    }
}

impl Verifier {
    pub fn new(config: &WebhookConfig, max_body: u64) -> Self {
        Self {
            scheme: config.scheme,
            keys: config.secrets.iter().map(|s| s.key.clone()).collect(),
            tolerance: config.tolerance,
            max_body,
        }
    }

    pub fn scheme(&self) -> WebhookScheme {
        self.scheme
    }

    /// Whether `name` is one of the headers this route's signature covers or
    /// carries: they reach the consumer unchanged, so it can verify again,
    /// even where `forward_key = false` would drop the key's header.
    pub fn signs(&self, name: &http::HeaderName) -> bool {
        let signed = match self.scheme {
            WebhookScheme::Standard => standard::SIGNED,
            WebhookScheme::Stripe => stripe::SIGNED,
            WebhookScheme::Github => github::SIGNED,
            WebhookScheme::Shopify => shopify::SIGNED,
        };
        signed.iter().any(|signed| name.as_str() == *signed)
    }

    /// Checks a request's signature headers against its whole body, at `now`.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), InvalidSignature> {
        let window = timestamp::Window::around(now, self.tolerance);
        let checked = match self.scheme {
            WebhookScheme::Standard => standard::verify(headers, body, &self.keys, window),
            WebhookScheme::Stripe => stripe::verify(headers, body, &self.keys, window),
            WebhookScheme::Github => github::verify(headers, body, &self.keys),
            WebhookScheme::Shopify => shopify::verify(headers, body, &self.keys),
        };
        checked.map_err(|rejection| InvalidSignature {
            scheme: self.scheme,
            rejection,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebhookSecret;

    #[test]
    fn a_verifier_debugs_without_its_keys() {
        let key = b"hush-hush".to_vec();
        let config = WebhookConfig {
            scheme: WebhookScheme::Shopify,
            secrets: vec![WebhookSecret {
                env: "SHOPIFY_CLIENT_SECRET".into(),
                key: key.clone(),
            }],
            tolerance: Duration::from_secs(300),
        };
        let shown = format!("{:?}", Verifier::new(&config, 1024));
        assert!(!shown.contains(&format!("{key:?}")), "{shown}");
        assert!(!shown.contains("hush"), "{shown}");
        assert!(shown.contains("Shopify"), "{shown}");
    }
}
