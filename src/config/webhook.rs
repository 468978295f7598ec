//! A webhook route's resolved settings (`webhook = { ... }`): which sender's
//! signature scheme, the secrets it may be signed with, and how far a signed
//! timestamp may be from now. See docs/webhooks.md.

use std::fmt;
use std::time::Duration;

/// Whose signature a webhook route checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookScheme {
    /// Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    Standard,
    Stripe,
    Github,
    Shopify,
}

impl WebhookScheme {
    pub const ALL: [WebhookScheme; 4] = [
        WebhookScheme::Standard,
        WebhookScheme::Stripe,
        WebhookScheme::Github,
        WebhookScheme::Shopify,
    ];

    /// The name written in the config and sent in `WWW-Authenticate`.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookScheme::Standard => "standard",
            WebhookScheme::Stripe => "stripe",
            WebhookScheme::Github => "github",
            WebhookScheme::Shopify => "shopify",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scheme| scheme.as_str() == text)
    }

    /// Whether the scheme signs a timestamp, which `tolerance` bounds.
    pub fn has_timestamp(self) -> bool {
        matches!(self, WebhookScheme::Standard | WebhookScheme::Stripe)
    }

    /// The headers (lower case) a sender sets anew on each redelivery of
    /// one event: the signed timestamp and the signature over it.
    pub fn redelivery_headers(self) -> &'static [&'static str] {
        match self {
            WebhookScheme::Standard => &[
                "webhook-timestamp",
                "webhook-signature",
                "svix-timestamp",
                "svix-signature",
            ],
            WebhookScheme::Stripe => &["stripe-signature"],
            WebhookScheme::Github | WebhookScheme::Shopify => &[],
        }
    }
}

/// `tolerance` when the route does not say.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, PartialEq)]
pub struct WebhookConfig {
    pub scheme: WebhookScheme,
    /// In the order of `secrets_env`; a signature made with any of them is
    /// accepted (rotation). Never empty.
    pub secrets: Vec<WebhookSecret>,
    /// How far the signed timestamp may be from now, either way (schemes
    /// with a timestamp only).
    pub tolerance: Duration,
}

/// One HMAC key, read from an environment variable and already decoded as
/// the scheme wants it (a Standard Webhooks `whsec_` secret is base64).
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    /// The variable it was read from, for messages.
    pub env: String,
    pub key: Vec<u8>,
}

/// Names the variable only: the key must never reach a log or `check`.
impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSecret")
            .field("env", &self.env)
            .field("key", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_debugs_without_its_key() {
        let secret = WebhookSecret {
            env: "STRIPE_WHSEC".into(),
            key: b"whsec_top_secret".to_vec(),
        };
        let shown = format!("{secret:?}");
        assert!(shown.contains("STRIPE_WHSEC"));
        assert!(!shown.contains("top_secret"), "{shown}");
    }

    #[test]
    fn schemes_parse_by_their_config_name() {
        for scheme in WebhookScheme::ALL {
            assert_eq!(WebhookScheme::parse(scheme.as_str()), Some(scheme));
        }
        assert_eq!(WebhookScheme::parse("Stripe"), None);
    }
}
