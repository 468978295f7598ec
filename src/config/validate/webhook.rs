//! `webhook = { scheme, secrets_env, tolerance }` on a route: the sender's
//! scheme, its secrets read from the environment (and decoded as the scheme
//! wants them), the timestamp tolerance; and the policy a webhook route
//! starts from before its own fields (docs/webhooks.md).

use std::time::Duration;

use base64::Engine as _;
use toml::Spanned;

use super::context::{Ctx, Secrets};
use super::env_list::Listed;
use super::server::{env_name, positive_duration};
use crate::config::file::{EnvNamesFile, WebhookFile};
use crate::config::quoted;
use crate::config::{
    DEFAULT_TOLERANCE, FingerprintPart, KeySource, Policy, StatusClass, WebhookConfig,
    WebhookScheme, WebhookSecret,
};
use http::{HeaderName, Method};

/// What a webhook route releases by default: any 5xx and 429, so a
/// consumer's failure lets the sender's redelivery run again, while a
/// success is stored and replayed and the sender stops (`["5xx", 429]`).
pub const DEFAULT_RELEASE_STATUSES: [u16; 1] = [429];
pub const DEFAULT_RELEASE_CLASSES: [StatusClass; 1] = [StatusClass::ServerError];

/// Where each scheme's senders put the event id. Svix sends the Standard
/// Webhooks headers as `svix-...` unless the account has them
/// white-labelled, so a standard route falls back to `svix-id`: a request
/// carrying both must carry one id in both (webhook/standard.rs).
fn default_key(scheme: WebhookScheme) -> Vec<KeySource> {
    let header = |name: &'static str| KeySource::Header(HeaderName::from_static(name));
    match scheme {
        WebhookScheme::Standard => vec![header("webhook-id"), header("svix-id")],
        WebhookScheme::Stripe => vec![KeySource::JsonPointer("/id".into())],
        WebhookScheme::Github => vec![header("x-github-delivery")],
        WebhookScheme::Shopify => vec![header("x-shopify-webhook-id")],
    }
}

/// The policy a webhook route inherits: `[defaults]` (`inherited`) with the
/// webhook defaults on top; the route's own fields then go on top of this.
pub fn route_defaults(inherited: &Policy, scheme: WebhookScheme) -> Policy {
    Policy {
        methods: vec![Method::POST],
        key: default_key(scheme),
        required: true,
        // One sender per route: its event ids are its only namespace.
        scope: Vec::new(),
        release_statuses: DEFAULT_RELEASE_STATUSES.to_vec(),
        release_classes: DEFAULT_RELEASE_CLASSES.to_vec(),
        ..inherited.clone()
    }
}

/// Warns of a fingerprint naming a header the sender sets anew on each
/// redelivery: after a stored answer, every redelivery of the event would
/// be a 422 mismatch instead of its replay.
pub fn redelivery_fingerprint(
    ctx: &mut Ctx<'_>,
    scheme: WebhookScheme,
    fingerprint: &[FingerprintPart],
    span: Option<std::ops::Range<usize>>,
    field: &str,
) {
    for part in fingerprint {
        if let FingerprintPart::Header(name) = part
            && scheme.redelivery_headers().contains(&name.as_str())
        {
            ctx.warn(
                span.clone(),
                field,
                format!(
                    "{part} changes with each redelivery of an event ({} signs a new \
                     timestamp each time): every redelivery after a stored answer would be \
                     refused 422 fingerprint-mismatch instead of replayed; leave it out",
                    scheme.as_str()
                ),
            );
        }
    }
}

/// Resolves the route's `webhook` table; `None` (with the errors recorded)
/// when it cannot be used.
pub fn webhook(
    ctx: &mut Ctx<'_>,
    written: &Spanned<WebhookFile>,
    prefix: &str,
) -> Option<WebhookConfig> {
    let prefix = format!("{prefix}.webhook");
    let file = written.get_ref();
    let scheme = match &file.scheme {
        Some(scheme) => ctx.value(Some(scheme), &format!("{prefix}.scheme"), None, |name| {
            WebhookScheme::parse(name).map(Some).ok_or_else(|| {
                let known: Vec<String> = WebhookScheme::ALL
                    .iter()
                    .map(|s| format!("{:?}", s.as_str()))
                    .collect();
                format!(
                    "unknown scheme {} (known: {})",
                    quoted(name),
                    known.join(", ")
                )
            })
        }),
        None => {
            ctx.error(
                Some(written.span()),
                format!("{prefix}.scheme"),
                "scheme is required",
            );
            None
        }
    };
    let tolerance = ctx.value(
        file.tolerance.as_ref(),
        &format!("{prefix}.tolerance"),
        DEFAULT_TOLERANCE,
        whole_seconds,
    );
    // Bounds nothing: said, not refused, so that one webhook block written
    // for every sender still starts.
    if let (Some(written), Some(scheme)) = (&file.tolerance, scheme)
        && !scheme.has_timestamp()
    {
        ctx.warn(
            Some(written.span()),
            format!("{prefix}.tolerance"),
            format!(
                "the {} scheme signs no timestamp, so this tolerance bounds nothing \
                 (deliveries are not checked for age): it can be removed",
                scheme.as_str()
            ),
        );
    }
    let secrets = match &file.secrets_env {
        Some(names) => secrets(ctx, names, scheme, &format!("{prefix}.secrets_env")),
        None => {
            ctx.error(
                Some(written.span()),
                format!("{prefix}.secrets_env"),
                "secrets_env is required (the variable, or list of variables, holding the \
                 signing secret)",
            );
            None
        }
    };
    Some(WebhookConfig {
        scheme: scheme?,
        secrets: secrets?,
        tolerance,
    })
}

/// Signed timestamps are whole seconds, compared in whole seconds: a
/// tolerance under one would accept only deliveries signed in the very
/// second they arrive, and a fraction of one would be dropped unsaid.
fn whole_seconds(input: &crate::config::units::DurationInput) -> Result<Duration, String> {
    let tolerance = positive_duration(input)?;
    if tolerance.subsec_nanos() != 0 {
        return Err(format!(
            "signed timestamps are whole seconds: give a whole number of seconds, \
             at least 1s (got {})",
            crate::config::units::format_duration(tolerance)
        ));
    }
    Ok(tolerance)
}

/// Every named variable must hold a usable secret: a route whose secret is
/// missing would refuse every genuine delivery.
fn secrets(
    ctx: &mut Ctx<'_>,
    names: &Spanned<EnvNamesFile>,
    scheme: Option<WebhookScheme>,
    field: &str,
) -> Option<Vec<WebhookSecret>> {
    let listed = super::env_list::listed(names, field);
    if listed.is_empty() {
        ctx.error(
            Some(names.span()),
            field,
            "empty: give at least one variable holding the signing secret",
        );
        return None;
    }
    let mut ok = true;
    let mut secrets: Vec<WebhookSecret> = Vec::new();
    for Listed { name, span, field } in listed {
        let resolved = env_name(&name).and_then(|name| {
            if secrets.iter().any(|s| s.env == name) {
                return Err(format!("{name} is listed twice"));
            }
            if ctx.secrets == Secrets::Skip {
                return Ok(WebhookSecret {
                    env: name,
                    key: Vec::new(),
                });
            }
            let value = (ctx.env)(&name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| super::context::no_value(&name))?;
            let key = match scheme {
                Some(scheme) => secret_key(scheme, &value)
                    .ok_or_else(|| format!("environment variable {name} {}", bad_secret(scheme)))?,
                None => Vec::new(),
            };
            Ok(WebhookSecret { env: name, key })
        });
        match resolved {
            Ok(secret) => secrets.push(secret),
            Err(message) => {
                ok = false;
                ctx.error(Some(span), field, message);
            }
        }
    }
    ok.then_some(secrets)
}

/// The HMAC key a secret stands for. Standard Webhooks secrets are
/// `whsec_` and base64 (the prefix optional, padding too, as the
/// reference library reads them); the other senders sign with the text
/// they show (Stripe's `whsec_...` whole, GitHub's and Shopify's as typed).
fn secret_key(scheme: WebhookScheme, value: &str) -> Option<Vec<u8>> {
    match scheme {
        WebhookScheme::Standard => {
            let encoded = value.strip_prefix("whsec_").unwrap_or(value);
            let lenient = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            lenient.decode(encoded).ok().filter(|key| !key.is_empty())
        }
        WebhookScheme::Stripe | WebhookScheme::Github | WebhookScheme::Shopify => {
            Some(value.as_bytes().to_vec())
        }
    }
}

/// Why a secret was refused; never quotes it.
fn bad_secret(scheme: WebhookScheme) -> &'static str {
    match scheme {
        WebhookScheme::Standard => {
            "does not hold a Standard Webhooks secret (\"whsec_\" followed by base64)"
        }
        _ => "does not hold a usable secret",
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn standard_secrets_are_base64_after_the_prefix() {
        let key = secret_key(
            WebhookScheme::Standard,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        );
        assert_eq!(key.as_deref().map(<[u8]>::len), Some(24));
        // Without the prefix, and unpadded, as the reference library accepts.
        assert_eq!(
            secret_key(WebhookScheme::Standard, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            key
        );
        assert_eq!(
            secret_key(WebhookScheme::Standard, "whsec_aGVsbG8"),
            Some(b"hello".to_vec())
        );
        assert_eq!(
            secret_key(WebhookScheme::Standard, "whsec_not base64!"),
            None
        );
        assert_eq!(secret_key(WebhookScheme::Standard, "whsec_"), None);
    }

    #[test]
    fn other_senders_sign_with_the_secret_as_written() {
        assert_eq!(
            secret_key(WebhookScheme::Stripe, "whsec_abc"),
            Some(b"whsec_abc".to_vec())
        );
        assert_eq!(
            secret_key(WebhookScheme::Github, "It's a Secret to Everybody"),
            Some(b"It's a Secret to Everybody".to_vec())
        );
    }

    #[test]
    fn webhook_release_defaults_are_every_5xx_and_429() {
        let releases = |status: u16| {
            DEFAULT_RELEASE_STATUSES.contains(&status)
                || DEFAULT_RELEASE_CLASSES.iter().any(|c| c.contains(status))
        };
        assert!(releases(500) && releases(599) && releases(429));
        assert!(
            releases(600) && releases(999),
            "invalid statuses read as 5xx"
        );
        assert!(!releases(499) && !releases(200));
    }
}
