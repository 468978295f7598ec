//! Whole-file tests of `webhook = { ... }`: defaults, precedence, secrets.

use std::path::Path;
use std::time::Duration;

use crate::config::{
    Config, ConfigErrors, KeySource, WebhookScheme, WebhookSecret, describe, parse,
};

const STRIPE: &str = r#"
[upstreams.consumer]
url = "http://127.0.0.1:3000"

[[routes]]
name = "stripe-events"
upstream = "consumer"
match = { path = "/webhooks/stripe" }
webhook = { scheme = "stripe", secrets_env = ["STRIPE_WHSEC", "STRIPE_WHSEC_OLD"] }
"#;

fn env(name: &str) -> Option<String> {
    match name {
        "STRIPE_WHSEC" => Some("whsec_new_secret_value".into()),
        "STRIPE_WHSEC_OLD" => Some("  whsec_old_secret_value\n".into()),
        "STANDARD_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        "GITHUB_SECRET" => Some("It's a Secret to Everybody".into()),
        "NOT_BASE64" => Some("whsec_sup3r-s3cret!".into()),
        "BLANK" => Some("   ".into()),
        _ => None,
    }
}

fn header(name: &'static str) -> KeySource {
    KeySource::Header(http::HeaderName::from_static(name))
}

fn ok(text: &str) -> Config {
    match parse(text, Path::new("t.toml"), &env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, Path::new("t.toml"), &env) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn with_webhook(webhook: &str) -> String {
    STRIPE.replace(
        r#"webhook = { scheme = "stripe", secrets_env = ["STRIPE_WHSEC", "STRIPE_WHSEC_OLD"] }"#,
        webhook,
    )
}

#[test]
fn a_webhook_route_takes_the_webhook_defaults() {
    let config = ok(STRIPE);
    let route = &config.routes[0];
    let webhook = route.webhook.as_ref().expect("webhook");
    assert_eq!(webhook.scheme, WebhookScheme::Stripe);
    assert_eq!(webhook.tolerance, Duration::from_secs(300));
    // In the order written; the value as the sender shows it, whitespace trimmed.
    let expected = [
        ("STRIPE_WHSEC", &b"whsec_new_secret_value"[..]),
        ("STRIPE_WHSEC_OLD", &b"whsec_old_secret_value"[..]),
    ];
    for (secret, (name, key)) in webhook.secrets.iter().zip(expected) {
        assert_eq!(secret.env, name);
        assert_eq!(secret.key, key);
    }
    let policy = &route.policy;
    assert_eq!(policy.methods, ["POST"]);
    assert_eq!(policy.key, [KeySource::JsonPointer("/id".into())]);
    assert!(policy.required);
    assert!(policy.scope.is_empty());
    assert_eq!(policy.release_statuses, super::DEFAULT_RELEASE_STATUSES);
    assert_eq!(policy.release_classes, super::DEFAULT_RELEASE_CLASSES);
    // The rest still comes from the built-in defaults.
    assert_eq!(policy.retention, Duration::from_secs(24 * 3600));
}

#[test]
fn each_scheme_keys_by_its_event_id() {
    let cases = [
        (
            "standard",
            "STANDARD_SECRET",
            vec![header("webhook-id"), header("svix-id")],
        ),
        ("github", "GITHUB_SECRET", vec![header("x-github-delivery")]),
        (
            "shopify",
            "GITHUB_SECRET",
            vec![header("x-shopify-webhook-id")],
        ),
        (
            "stripe",
            "GITHUB_SECRET",
            vec![KeySource::JsonPointer("/id".into())],
        ),
    ];
    for (scheme, variable, key) in cases {
        let config = ok(&with_webhook(&format!(
            "webhook = {{ scheme = \"{scheme}\", secrets_env = \"{variable}\" }}"
        )));
        assert_eq!(config.routes[0].policy.key, key, "{scheme}");
        let webhook = config.routes[0].webhook.as_ref().unwrap();
        assert_eq!(webhook.scheme.as_str(), scheme);
        assert_eq!(webhook.secrets.len(), 1);
    }
}

#[test]
fn a_standard_secret_is_decoded_from_base64() {
    let config = ok(&with_webhook(
        r#"webhook = { scheme = "standard", secrets_env = ["STANDARD_SECRET"], tolerance = "30s" }"#,
    ));
    let webhook = config.routes[0].webhook.as_ref().unwrap();
    assert_eq!(webhook.tolerance, Duration::from_secs(30));
    assert_eq!(webhook.secrets[0].key.len(), 24, "24 bytes behind whsec_");
}

#[test]
fn the_routes_own_fields_beat_the_webhook_defaults_which_beat_defaults() {
    let text = STRIPE.replace(
        "[[routes]]",
        r#"[defaults]
methods = ["PATCH"]
required = false
key = { header = "X-Key" }
scope = ["header:X-Tenant"]
release_statuses = [503]
retention = "72h"

[[routes]]"#,
    );
    let policy = ok(&text).routes[0].policy.clone();
    assert_eq!(policy.methods, ["POST"]);
    assert!(policy.required);
    assert_eq!(policy.key, [KeySource::JsonPointer("/id".into())]);
    assert!(policy.scope.is_empty());
    assert_eq!(policy.release_statuses, super::DEFAULT_RELEASE_STATUSES);
    assert_eq!(policy.release_classes, super::DEFAULT_RELEASE_CLASSES);
    assert_eq!(
        policy.retention,
        Duration::from_secs(72 * 3600),
        "from [defaults]"
    );

    let own = text.replace(
        "match = { path = \"/webhooks/stripe\" }",
        "match = { path = \"/webhooks/stripe\" }\nmethods = [\"POST\", \"PUT\"]\nrequired = false\n\
         key = { header = \"Stripe-Event\" }\nscope = [\"header:X-Account\"]\nrelease_statuses = [502]",
    );
    let policy = ok(&own).routes[0].policy.clone();
    assert_eq!(policy.methods, ["POST", "PUT"]);
    assert!(!policy.required);
    assert_eq!(
        policy.key,
        [KeySource::Header(http::HeaderName::from_static(
            "stripe-event"
        ))]
    );
    assert_eq!(policy.release_statuses, [502]);
    assert!(
        policy.release_classes.is_empty(),
        "a route's own list replaces both"
    );
    assert_eq!(policy.scope.len(), 1);
}

#[test]
fn a_route_without_webhook_is_as_before() {
    let text = STRIPE.replace(
        "webhook = { scheme = \"stripe\", secrets_env = [\"STRIPE_WHSEC\", \"STRIPE_WHSEC_OLD\"] }",
        "",
    );
    let route = &ok(&text).routes[0];
    assert_eq!(route.webhook, None);
    assert_eq!(route.policy.methods, ["POST", "PATCH"]);
    assert_eq!(route.policy.release_statuses, [429, 503]);
}

#[test]
fn an_unset_or_empty_secret_variable_is_named_never_the_secret() {
    let errors = errors(&with_webhook(
        r#"webhook = { scheme = "stripe", secrets_env = ["STRIPE_WHSEC", "STRIPE_WHSEC_GONE", "BLANK"] }"#,
    ));
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0].starts_with("t.toml:9:63: routes[0].webhook.secrets_env[1]: "),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains("STRIPE_WHSEC_GONE is not set or empty"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("routes[0].webhook.secrets_env[2]"),
        "{}",
        errors[1]
    );
    assert!(
        errors[1].contains("BLANK is not set or empty"),
        "{}",
        errors[1]
    );
    for error in &errors {
        assert!(!error.contains("new_secret_value"), "{error}");
    }
    let single = errors_of(r#"webhook = { scheme = "github", secrets_env = "GITHUB_GONE" }"#);
    assert!(
        single.contains("routes[0].webhook.secrets_env: "),
        "{single}"
    );
    assert!(
        single.contains("GITHUB_GONE is not set or empty"),
        "{single}"
    );
}

fn errors_of(webhook: &str) -> String {
    let errors = errors(&with_webhook(webhook));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors[0].clone()
}

#[test]
fn a_standard_secret_that_is_not_base64_is_refused_unquoted() {
    let error = errors_of(r#"webhook = { scheme = "standard", secrets_env = "NOT_BASE64" }"#);
    assert!(error.contains("routes[0].webhook.secrets_env: "), "{error}");
    assert!(
        error.contains("NOT_BASE64 does not hold a Standard Webhooks secret"),
        "{error}"
    );
    assert!(!error.contains("sup3r"), "{error}");
}

#[test]
fn scheme_is_required_and_known() {
    let error = errors_of(r#"webhook = { scheme = "paypal", secrets_env = "GITHUB_SECRET" }"#);
    assert!(
        error.starts_with("t.toml:9:22: routes[0].webhook.scheme: "),
        "{error}"
    );
    assert!(error.contains("unknown scheme \"paypal\""), "{error}");
    assert!(
        error.contains("\"standard\", \"stripe\", \"github\", \"shopify\""),
        "{error}"
    );
    let error = errors_of(r#"webhook = { secrets_env = "GITHUB_SECRET" }"#);
    assert!(
        error.contains("routes[0].webhook.scheme: scheme is required"),
        "{error}"
    );
    let error = errors_of(r#"webhook = { scheme = "github" }"#);
    assert!(
        error.contains("routes[0].webhook.secrets_env: secrets_env is required"),
        "{error}"
    );
    let error = errors_of(r#"webhook = { scheme = "github", secrets_env = [] }"#);
    assert!(
        error.contains("routes[0].webhook.secrets_env: empty"),
        "{error}"
    );
    let error = errors_of(
        r#"webhook = { scheme = "github", secrets_env = ["GITHUB_SECRET", "GITHUB_SECRET"] }"#,
    );
    assert!(
        error.contains("secrets_env[1]: GITHUB_SECRET is listed twice"),
        "{error}"
    );
}

/// A tolerance on a sender that signs no timestamp bounds nothing: a
/// warning, not a refusal, so that one webhook block written for every
/// sender still starts.
#[test]
fn tolerance_is_positive_and_only_bounds_a_signed_timestamp() {
    for scheme in ["github", "shopify"] {
        let config = ok(&with_webhook(&format!(
            r#"webhook = {{ scheme = "{scheme}", secrets_env = "GITHUB_SECRET", tolerance = "5m" }}"#
        )));
        let warnings = config.warnings;
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].contains(&format!(
                "routes[0].webhook.tolerance: the {scheme} scheme signs no timestamp"
            )),
            "{warnings:#?}"
        );
    }
    let error = errors_of(
        r#"webhook = { scheme = "github", secrets_env = "GITHUB_SECRET", tolerance = "soon" }"#,
    );
    assert!(error.contains("routes[0].webhook.tolerance: "), "{error}");
    let error = errors_of(
        r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC", tolerance = "0s" }"#,
    );
    assert!(
        error.contains("routes[0].webhook.tolerance: must be greater than zero"),
        "{error}"
    );
    for tolerance in ["500ms", "1500ms"] {
        let error = errors_of(&format!(
            r#"webhook = {{ scheme = "stripe", secrets_env = "STRIPE_WHSEC", tolerance = "{tolerance}" }}"#
        ));
        assert!(
            error.contains(&format!(
                "routes[0].webhook.tolerance: signed timestamps are whole seconds: give a \
                 whole number of seconds, at least 1s (got {tolerance})"
            )),
            "{error}"
        );
    }
    let config = ok(&with_webhook(
        r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC", tolerance = "2000ms" }"#,
    ));
    let webhook = config.routes[0].webhook.as_ref().expect("webhook");
    assert_eq!(webhook.tolerance, Duration::from_secs(2));
}

#[test]
fn unknown_webhook_fields_are_errors() {
    let errors = errors(&with_webhook(
        r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC", secret = "x" }"#,
    ));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].contains("unknown field `secret`"),
        "{}",
        errors[0]
    );
}

#[test]
fn check_shows_the_scheme_and_variables_never_the_secrets() {
    let shown = describe(&ok(STRIPE));
    assert!(
        shown.contains(
            "  webhook   stripe, secrets from STRIPE_WHSEC,STRIPE_WHSEC_OLD, tolerance 5m"
        ),
        "{shown}"
    );
    assert!(!shown.contains("secret_value"), "{shown}");
    let debug = format!("{:?}", ok(STRIPE));
    assert!(!debug.contains("secret_value"), "{debug}");
    let _: &WebhookSecret = &ok(STRIPE).routes[0].webhook.clone().unwrap().secrets[0];
}

/// `match.methods` on a webhook route hands the other methods on its path to
/// the next route that takes them, unverified: said, naming that route.
#[test]
fn methods_left_to_a_later_route_are_warned_about() {
    let catch_all = r#"
[[routes]]
name = "rest"
upstream = "consumer"
match = { path_prefix = "/" }
idempotency = false
"#;
    let narrowed = with_webhook(r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC" }"#)
        .replace(
            r#"match = { path = "/webhooks/stripe" }"#,
            r#"match = { path = "/webhooks/stripe", methods = ["POST"] }"#,
        );
    let warnings = ok(&format!("{narrowed}{catch_all}")).warnings;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("t.toml:8:48: routes[0].match.methods: this stripe webhook route"),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[0].contains(r#"goes to route "rest" (routes[1]) without its signature checked"#),
        "{}",
        warnings[0]
    );
    // Nothing after it takes the path: other methods get 404, nothing to say.
    assert!(ok(&narrowed).warnings.is_empty());
    // Without match.methods the webhook route takes (and verifies) every method.
    let whole = with_webhook(r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC" }"#);
    assert!(ok(&format!("{whole}{catch_all}")).warnings.is_empty());
    // A later route that only takes the methods already matched gets none of them.
    let post_only = catch_all.replace(
        r#"match = { path_prefix = "/" }"#,
        r#"match = { path_prefix = "/", methods = ["POST"] }"#,
    );
    assert!(ok(&format!("{narrowed}{post_only}")).warnings.is_empty());
    // A later webhook route on the path takes (and verifies) the rest.
    let verified_rest = r#"
[[routes]]
name = "stripe-other-methods"
upstream = "consumer"
match = { path_prefix = "/webhooks" }
webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC" }
"#;
    let config = ok(&format!("{narrowed}{verified_rest}{catch_all}"));
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
}

/// The other way round: an earlier route that takes the webhook route's
/// path for some methods forwards those unverified.
#[test]
fn methods_taken_by_an_earlier_route_are_warned_about() {
    let before = |methods: &str| {
        format!(
            r#"
[upstreams.consumer]
url = "http://127.0.0.1:3000"

[[routes]]
name = "puts"
upstream = "consumer"
match = {{ path_prefix = "/webhooks", methods = {methods} }}
idempotency = false
{}"#,
            with_webhook(r#"webhook = { scheme = "stripe", secrets_env = "STRIPE_WHSEC" }"#)
                .replace(
                    "[upstreams.consumer]\nurl = \"http://127.0.0.1:3000\"\n",
                    ""
                )
        )
    };
    let warnings = ok(&before(r#"["PUT"]"#)).warnings;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(
            "t.toml:8:48: routes[0].match.methods: this route takes PUT on the path of \
             webhook route \"stripe-events\" (routes[1]) before it"
        ),
        "{}",
        warnings[0]
    );
    // Every method the webhook route matches: it is shadowed, said once.
    let shadowed = before(r#"["PUT", "POST"]"#).replace(
        r#"match = { path = "/webhooks/stripe" }"#,
        r#"match = { path = "/webhooks/stripe", methods = ["POST"] }"#,
    );
    let warnings = ok(&shadowed).warnings;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("is shadowed"), "{}", warnings[0]);
}

/// A sender's redelivery of one event carries a new timestamp and so a new
/// signature: a fingerprint that names those headers makes every
/// redelivery after a stored answer a 422 mismatch, never a replay.
#[test]
fn a_fingerprint_naming_a_header_each_redelivery_changes_is_warned_of() {
    let config = ok(&with_webhook(
        "webhook = { scheme = \"stripe\", secrets_env = \"STRIPE_WHSEC\" }\n\
         fingerprint = [\"method\", \"body\", \"header:Stripe-Signature\"]",
    ));
    assert_eq!(config.warnings.len(), 1, "{:#?}", config.warnings);
    assert!(
        config.warnings[0].contains(
            "routes[0].fingerprint: header:stripe-signature changes with each redelivery \
             of an event (stripe signs a new timestamp each time)"
        ),
        "{:#?}",
        config.warnings
    );
    let config = ok(&with_webhook(
        "webhook = { scheme = \"standard\", secrets_env = \"STANDARD_SECRET\" }\n\
         fingerprint = [\"body\", \"header:webhook-timestamp\", \"header:svix-signature\"]",
    ));
    assert_eq!(config.warnings.len(), 2, "{:#?}", config.warnings);
    // A sender without a timestamp signs a redelivery alike.
    let config = ok(&with_webhook(
        "webhook = { scheme = \"github\", secrets_env = \"GITHUB_SECRET\" }\n\
         fingerprint = [\"body\", \"header:x-hub-signature-256\"]",
    ));
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
}
