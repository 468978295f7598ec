//! Webhook routes through the real binary: a sender's signature is checked
//! before anything is reserved, then its event id deduplicates redeliveries.
//! Deliveries are signed here with each sender's published algorithm
//! (HMAC-SHA256 over the documented content, via the `hmac` crate), which
//! `this_files_signer_agrees_with_the_senders_libraries` holds to what the
//! senders' own libraries make; `deliveries_signed_by_the_senders_own_libraries_verify`
//! sends those libraries' deliveries as they made them (tests/webhook_vectors).

mod common;
mod webhook_vectors;

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::config::{Config, Route, Upstream, Value, raw};
use common::{GatewayProcess, MockUpstream, Reply, TestDir};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// `webhook = { ... }` of a route: `scheme`, then the rest as written.
fn webhook(scheme: &str, rest: &str) -> Value {
    raw(&format!("{{ scheme = \"{scheme}\", {rest} }}"))
}

/// The senders' routes in this order (`check` names them `routes[i]`).
fn config() -> Config {
    let route = |name: &str, prefix: &str| Route::new(name, "consumer").path_prefix(prefix);
    Config::new()
        .server("max_request_body", "4KiB")
        .admin_token_env("IDEMGATE_ADMIN_TOKEN")
        .upstream(Upstream::new("consumer", "{upstream}").timeout("5s"))
        .defaults("lock_timeout", "10s")
        .route(route("standard", "/hook/standard").set(
            "webhook",
            webhook(
                "standard",
                r#"secrets_env = ["STANDARD_SECRET", "STANDARD_SECRET_OLD"]"#,
            ),
        ))
        .route(route("stripe", "/hook/stripe").set(
            "webhook",
            webhook(
                "stripe",
                r#"secrets_env = ["STRIPE_WHSEC", "STRIPE_WHSEC_OLD"], tolerance = "5m""#,
            ),
        ))
        .route(route("github", "/hook/github").set(
            "webhook",
            webhook("github", r#"secrets_env = "GITHUB_SECRET""#),
        ))
        .route(route("shopify", "/hook/shopify").set(
            "webhook",
            webhook("shopify", r#"secrets_env = ["SHOPIFY_SECRET"]"#),
        ))
}

/// `config()` rendered with fixed addresses, for `check` and a `serve`
/// that must refuse it.
fn fixed(config: &Config, listen: &str, admin: &str, db: &str) -> String {
    config
        .toml()
        .replace("{listen}", listen)
        .replace("{admin}", admin)
        .replace("{db}", db)
        .replace("{upstream}", "http://127.0.0.1:3000")
}

const ADMIN_TOKEN: &str = "webhook-test-admin-token";

/// Secrets as each sender hands them out.
const STANDARD_SECRET: &str = "whsec_c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5"; // "standard-new-key-0123456789"
const STANDARD_SECRET_OLD: &str = "whsec_c3RhbmRhcmQtb2xkLWtleQ=="; // "standard-old-key"
const STRIPE_WHSEC: &str = "whsec_stripe_new_0123456789abcdef";
const STRIPE_WHSEC_OLD: &str = "whsec_stripe_old_fedcba9876543210";
const GITHUB_SECRET: &str = "It's a Secret to Everybody";
const SHOPIFY_SECRET: &str = "shpss_shopify_client_secret";

const ENV: [(&str, &str); 7] = [
    ("STANDARD_SECRET", STANDARD_SECRET),
    ("STANDARD_SECRET_OLD", STANDARD_SECRET_OLD),
    ("STRIPE_WHSEC", STRIPE_WHSEC),
    ("STRIPE_WHSEC_OLD", STRIPE_WHSEC_OLD),
    ("GITHUB_SECRET", GITHUB_SECRET),
    ("SHOPIFY_SECRET", SHOPIFY_SECRET),
    ("IDEMGATE_ADMIN_TOKEN", ADMIN_TOKEN),
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sender {
    Standard,
    Stripe,
    Github,
    Shopify,
}

const SENDERS: [Sender; 4] = [
    Sender::Standard,
    Sender::Stripe,
    Sender::Github,
    Sender::Shopify,
];

impl Sender {
    fn name(self) -> &'static str {
        match self {
            Sender::Standard => "standard",
            Sender::Stripe => "stripe",
            Sender::Github => "github",
            Sender::Shopify => "shopify",
        }
    }

    fn path(self) -> String {
        format!("/hook/{}", self.name())
    }

    fn secret(self) -> &'static str {
        match self {
            Sender::Standard => STANDARD_SECRET,
            Sender::Stripe => STRIPE_WHSEC,
            Sender::Github => GITHUB_SECRET,
            Sender::Shopify => SHOPIFY_SECRET,
        }
    }

    fn old_secret(self) -> Option<&'static str> {
        match self {
            Sender::Standard => Some(STANDARD_SECRET_OLD),
            Sender::Stripe => Some(STRIPE_WHSEC_OLD),
            _ => None,
        }
    }

    fn signature_header(self) -> &'static str {
        match self {
            Sender::Standard => "webhook-signature",
            Sender::Stripe => "stripe-signature",
            Sender::Github => "x-hub-signature-256",
            Sender::Shopify => "x-shopify-hmac-sha256",
        }
    }

    fn timestamped(self) -> bool {
        matches!(self, Sender::Standard | Sender::Stripe)
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn hmac_sha256(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

/// A delivery of event `id` as `sender` makes it, signed with `secret` at
/// `timestamp`: its headers and its body.
struct Delivery {
    headers: Vec<(String, String)>,
    body: String,
}

impl Delivery {
    fn body_for(id: &str) -> String {
        format!(r#"{{"id":"{id}","type":"order.created","data":{{"amount":1200}}}}"#)
    }

    fn new(sender: Sender, secret: &str, id: &str, timestamp: i64) -> Self {
        let body = Self::body_for(id);
        let headers = Self::sign(sender, secret, id, timestamp, &body);
        Delivery { headers, body }
    }

    /// Each sender's published algorithm.
    fn sign(
        sender: Sender,
        secret: &str,
        id: &str,
        timestamp: i64,
        body: &str,
    ) -> Vec<(String, String)> {
        let header = |name: &str, value: String| (name.to_owned(), value);
        let mut headers = vec![header("content-type", "application/json".into())];
        match sender {
            Sender::Standard => {
                // Standard Webhooks: base64 after `whsec_` is the key; the
                // content is `{id}.{timestamp}.{body}`; base64 signature.
                let key = BASE64.decode(secret.trim_start_matches("whsec_")).unwrap();
                let content = format!("{id}.{timestamp}.{body}");
                let signature = BASE64.encode(hmac_sha256(&key, content.as_bytes()));
                headers.push(header("webhook-id", id.into()));
                headers.push(header("webhook-timestamp", timestamp.to_string()));
                headers.push(header("webhook-signature", format!("v1,{signature}")));
            }
            Sender::Stripe => {
                // Stripe: the whole `whsec_...` is the key; `{t}.{body}`; hex.
                let content = format!("{timestamp}.{body}");
                let signature = hex::encode(hmac_sha256(secret.as_bytes(), content.as_bytes()));
                headers.push(header(
                    "stripe-signature",
                    format!("t={timestamp},v1={signature}"),
                ));
            }
            Sender::Github => {
                let signature = hex::encode(hmac_sha256(secret.as_bytes(), body.as_bytes()));
                headers.push(header("x-github-event", "push".into()));
                headers.push(header("x-github-delivery", id.into()));
                headers.push(header("x-hub-signature-256", format!("sha256={signature}")));
            }
            Sender::Shopify => {
                let signature = BASE64.encode(hmac_sha256(secret.as_bytes(), body.as_bytes()));
                headers.push(header("x-shopify-topic", "orders/create".into()));
                headers.push(header("x-shopify-webhook-id", id.into()));
                headers.push(header("x-shopify-hmac-sha256", signature));
            }
        }
        headers
    }

    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| n != name);
        self
    }

    fn with_body(mut self, body: String) -> Self {
        self.body = body;
        self
    }

    fn header(&self, name: &str) -> &str {
        &self.headers.iter().find(|(n, _)| n == name).unwrap().1
    }

    async fn send(&self, gateway: &GatewayProcess, method: &str, path: &str) -> Reply {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        gateway
            .client()
            .send(method, path, &headers, self.body.clone())
            .await
    }

    async fn post(&self, gateway: &GatewayProcess, sender: Sender) -> Reply {
        self.send(gateway, "POST", &sender.path()).await
    }
}

async fn start(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    let dir = TestDir::new(name);
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config(), &ENV);
    (dir, upstream, gateway)
}

fn assert_refused(reply: &Reply, sender: Sender, why: &str) {
    assert_eq!(
        reply.status,
        401,
        "{} {why}: {}",
        sender.name(),
        reply.text()
    );
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(reply.json()["code"], "invalid-signature", "{why}");
    let challenge = format!("Webhook scheme=\"{}\"", sender.name());
    assert_eq!(
        reply.header("www-authenticate"),
        Some(challenge.as_str()),
        "{why}"
    );
    assert_eq!(reply.header("idempotent-replayed"), None, "{why}");
    // The body was read to verify it: the connection carries the next one.
    assert_eq!(reply.header("connection"), None, "{why}");
}

async fn metrics(gateway: &GatewayProcess) -> String {
    gateway.admin_client().get("/metrics").await.text()
}

#[tokio::test]
async fn every_senders_genuine_delivery_runs_once_and_its_redelivery_replays() {
    let (_dir, upstream, gateway) = start("webhook-genuine").await;
    for (n, sender) in SENDERS.into_iter().enumerate() {
        let id = format!("evt_{}_1", sender.name());
        let first = Delivery::new(sender, sender.secret(), &id, now());
        let fresh = first.post(&gateway, sender).await;
        assert_eq!(fresh.status, 201, "{sender:?}: {}", fresh.text());
        assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
        assert_eq!(upstream.total(), n as u64 + 1, "{sender:?}");
        // The signature headers reach the consumer as they were sent.
        let sent = first.header(sender.signature_header());
        assert_eq!(
            upstream.last_header(sender.signature_header()).as_deref(),
            Some(sent)
        );

        // A redelivery is signed anew (a later timestamp where there is one).
        let again = Delivery::new(sender, sender.secret(), &id, now() + 1);
        let replay = again.post(&gateway, sender).await;
        assert_eq!(replay.status, 201, "{sender:?}: {}", replay.text());
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.body, fresh.body, "{sender:?}");
        assert_eq!(upstream.total(), n as u64 + 1, "{sender:?} ran twice");
    }
}

/// `forward_key = false` keeps the key from the upstream, but a webhook
/// route's key is one of the headers its signature covers: the consumer gets
/// every one of them, so it can verify the delivery again.
#[tokio::test]
async fn signed_headers_reach_the_consumer_even_without_forward_key() {
    let dir = TestDir::new("webhook-forward-key");
    let upstream = MockUpstream::start().await;
    let config = config().defaults("forward_key", false);
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config, &ENV);
    for sender in SENDERS {
        let id = format!("evt_{}_unforwarded", sender.name());
        let delivery = Delivery::new(sender, sender.secret(), &id, now());
        let fresh = delivery.post(&gateway, sender).await;
        assert_eq!(fresh.status, 201, "{sender:?}: {}", fresh.text());
        let signed: &[&str] = match sender {
            Sender::Standard => &["webhook-id", "webhook-timestamp", "webhook-signature"],
            _ => &[sender.signature_header()],
        };
        for name in signed {
            assert_eq!(
                upstream.last_header(name).as_deref(),
                Some(delivery.header(name)),
                "{sender:?}: {name} did not reach the consumer unchanged"
            );
        }
        // A key header the signature does not cover stays behind, as asked.
        let unsigned_key = match sender {
            Sender::Github => Some("x-github-delivery"),
            Sender::Shopify => Some("x-shopify-webhook-id"),
            _ => None,
        };
        if let Some(name) = unsigned_key {
            assert_eq!(upstream.last_header(name), None, "{sender:?}: {name}");
        }
    }
}

/// Svix sends the Standard Webhooks headers under its own names (`svix-id`,
/// `svix-timestamp`, `svix-signature`) unless they are white-labelled: a
/// `standard` route verifies them alike and, with no key of its own,
/// deduplicates by `svix-id` when there is no `webhook-id`.
#[tokio::test]
async fn a_delivery_with_svix_headers_is_verified_and_deduplicated() {
    let dir = TestDir::new("webhook-svix");
    let upstream = MockUpstream::start().await;
    let svix_route = Route::new("svix", "consumer")
        .path_prefix("/hook/svix")
        .set(
            "webhook",
            webhook("standard", r#"secrets_env = "STANDARD_SECRET""#),
        )
        .set("forward_key", false);
    let config = config().route(svix_route);
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config, &ENV);
    let as_svix = |delivery: Delivery| Delivery {
        headers: (delivery.headers.into_iter())
            .map(|(name, value)| match name.strip_prefix("webhook-") {
                Some(rest) => (format!("svix-{rest}"), value),
                None => (name, value),
            })
            .collect(),
        body: delivery.body,
    };
    let signed =
        |id: &str, secret: &str| as_svix(Delivery::new(Sender::Standard, secret, id, now()));

    let first = signed("msg_svix_1", STANDARD_SECRET);
    let fresh = first.send(&gateway, "POST", "/hook/svix").await;
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
    for name in ["svix-id", "svix-timestamp", "svix-signature"] {
        assert_eq!(
            upstream.last_header(name).as_deref(),
            Some(first.header(name)),
            "{name} did not reach the consumer unchanged"
        );
    }
    let replay = signed("msg_svix_1", STANDARD_SECRET)
        .send(&gateway, "POST", "/hook/svix")
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.total(), 1);

    let forged = signed("msg_svix_2", STANDARD_SECRET_OLD)
        .send(&gateway, "POST", "/hook/svix")
        .await;
    assert_refused(
        &forged,
        Sender::Standard,
        "svix headers, a secret not listed",
    );
    let stale = as_svix(Delivery::new(
        Sender::Standard,
        STANDARD_SECRET,
        "msg_svix_3",
        now() - 600,
    ))
    .send(&gateway, "POST", "/hook/svix")
    .await;
    assert_refused(&stale, Sender::Standard, "svix headers, stale");
    // A genuine `webhook-` delivery with another `svix-id` must not run again
    // under that id.
    let mut rekeyed = Delivery::new(Sender::Standard, STANDARD_SECRET, "msg_svix_1", now());
    rekeyed
        .headers
        .push(("svix-id".into(), "msg_svix_chosen".into()));
    let reply = rekeyed.send(&gateway, "POST", "/hook/svix").await;
    assert_refused(&reply, Sender::Standard, "two ids");
    assert!(
        reply
            .text()
            .contains("the webhook-id and svix-id headers differ")
    );
    // Both sets for one event: a consumer verifying with Svix's library
    // reads the `svix-` one, so it is checked as well as the `webhook-` one.
    let both = |svix_signature: Option<&str>| {
        let mut delivery = Delivery::new(Sender::Standard, STANDARD_SECRET, "msg_svix_4", now());
        let svix: Vec<(String, String)> = (delivery.headers.iter())
            .filter_map(|(name, value)| {
                let rest = name.strip_prefix("webhook-")?;
                let value = match (rest, svix_signature) {
                    ("signature", Some(forged)) => forged.to_owned(),
                    _ => value.clone(),
                };
                Some((format!("svix-{rest}"), value))
            })
            .collect();
        delivery.headers.extend(svix);
        delivery
    };
    let reply = both(Some("v1,Zm9yZ2Vk"))
        .send(&gateway, "POST", "/hook/svix")
        .await;
    assert_refused(&reply, Sender::Standard, "both sets, the svix- one forged");
    assert_eq!(
        upstream.total(),
        1,
        "a refused delivery reached the consumer"
    );
    let reply = both(None).send(&gateway, "POST", "/hook/svix").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.total(), 2);
}

#[tokio::test]
async fn bad_signatures_get_401_and_reach_nothing() {
    let (_dir, upstream, gateway) = start("webhook-refused").await;
    for sender in SENDERS {
        let id = format!("evt_{}_bad", sender.name());
        let genuine = || Delivery::new(sender, sender.secret(), &id, now());
        let mut cases = vec![
            (
                "forged (another body's signature)",
                genuine().with_body(Delivery::body_for("evt_other")),
            ),
            (
                "wrong secret",
                Delivery::new(sender, "whsec_d3Jvbmcta2V5", &id, now()),
            ),
            (
                "missing signature header",
                genuine().without(sender.signature_header()),
            ),
        ];
        if sender.timestamped() {
            cases.push((
                "stale timestamp",
                Delivery::new(sender, sender.secret(), &id, now() - 600),
            ));
            cases.push((
                "future timestamp",
                Delivery::new(sender, sender.secret(), &id, now() + 600),
            ));
        }
        let count = cases.len();
        for (why, delivery) in cases {
            assert_refused(&delivery.post(&gateway, sender).await, sender, why);
        }
        assert_eq!(
            upstream.total(),
            0,
            "{sender:?}: a refused delivery was forwarded"
        );
        let counted = format!(
            "idemgate_requests_total{{outcome=\"invalid_signature\",route=\"{}\"}} {count}",
            sender.name()
        );
        let metrics = metrics(&gateway).await;
        assert!(metrics.contains(&counted), "{counted}\n{metrics}");
    }
}

#[tokio::test]
async fn a_forged_delivery_cannot_use_up_a_real_event_id() {
    let (_dir, upstream, gateway) = start("webhook-forged-first").await;
    for (n, sender) in SENDERS.into_iter().enumerate() {
        let id = format!("evt_{}_real", sender.name());
        let forged = Delivery::new(sender, "whsec_YXR0YWNrZXItZ3Vlc3M=", &id, now());
        assert_refused(&forged.post(&gateway, sender).await, sender, "forged");
        let genuine = Delivery::new(sender, sender.secret(), &id, now());
        let reply = genuine.post(&gateway, sender).await;
        assert_eq!(reply.status, 201, "{sender:?}: {}", reply.text());
        assert_eq!(
            reply.header("idempotent-replayed"),
            Some("false"),
            "{sender:?}: the genuine delivery must run"
        );
        assert_eq!(upstream.total(), n as u64 + 1);
    }
}

/// Rotation: both secrets verify while both are listed; a reload re-reads
/// the list, so once the old one is dropped its signatures are refused.
#[tokio::test]
async fn the_old_secret_verifies_during_rotation_until_a_reload_drops_it() {
    let (_dir, upstream, gateway) = start("webhook-rotation").await;
    for sender in [Sender::Standard, Sender::Stripe] {
        let old = sender.old_secret().unwrap();
        for (i, secret) in [old, sender.secret()].into_iter().enumerate() {
            let id = format!("evt_{}_rot_{i}", sender.name());
            let reply = Delivery::new(sender, secret, &id, now())
                .post(&gateway, sender)
                .await;
            assert_eq!(reply.status, 201, "{sender:?} secret {i}: {}", reply.text());
        }
    }
    assert_eq!(upstream.total(), 4);

    let before = std::fs::read_to_string(gateway.config_path()).unwrap();
    let rotated = config()
        .with_route("standard", |r| {
            r.set(
                "webhook",
                webhook("standard", r#"secrets_env = "STANDARD_SECRET""#),
            )
        })
        .with_route("stripe", |r| {
            r.set(
                "webhook",
                webhook(
                    "stripe",
                    r#"secrets_env = ["STRIPE_WHSEC"], tolerance = "5m""#,
                ),
            )
        });
    gateway.write_config(&rotated);
    assert_ne!(
        std::fs::read_to_string(gateway.config_path()).unwrap(),
        before
    );
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let reload = gateway
        .admin_client()
        .send("POST", "/admin/reload", &[("authorization", &auth)], "")
        .await;
    assert_eq!(reload.status, 200, "{}", reload.text());

    for sender in [Sender::Standard, Sender::Stripe] {
        let id = format!("evt_{}_after", sender.name());
        let old = Delivery::new(sender, sender.old_secret().unwrap(), &id, now());
        assert_refused(
            &old.post(&gateway, sender).await,
            sender,
            "old secret dropped",
        );
        let new = Delivery::new(sender, sender.secret(), &id, now());
        assert_eq!(new.post(&gateway, sender).await.status, 201, "{sender:?}");
    }
    assert_eq!(upstream.total(), 6);
}

/// 5xx (and 429) are released by default: the sender's redelivery runs
/// again; a success is stored and replayed.
#[tokio::test]
async fn a_consumer_failure_lets_the_redelivery_run_and_a_success_is_replayed() {
    let (_dir, upstream, gateway) = start("webhook-release").await;
    for (n, sender) in SENDERS.into_iter().enumerate() {
        let base = 3 * n as u64;
        let id = format!("evt_{}_flaky", sender.name());
        let failing = format!("{}?status=500", sender.path());
        for attempt in 1..=2u64 {
            let delivery = Delivery::new(sender, sender.secret(), &id, now());
            let reply = delivery.send(&gateway, "POST", &failing).await;
            assert_eq!(reply.status, 500, "{sender:?}");
            assert_eq!(reply.header("idempotent-replayed"), Some("false"));
            assert_eq!(
                upstream.total(),
                base + attempt,
                "{sender:?}: 500 must be released"
            );
        }
        let succeeding = format!("{}?status=201", sender.path());
        for replayed in ["false", "true"] {
            let delivery = Delivery::new(sender, sender.secret(), &id, now());
            let reply = delivery.send(&gateway, "POST", &succeeding).await;
            assert_eq!(reply.status, 201, "{sender:?}");
            assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
        }
        assert_eq!(upstream.total(), base + 3, "{sender:?}");
    }
}

#[tokio::test]
async fn an_oversized_body_gets_413_and_reaches_nothing() {
    let (_dir, upstream, gateway) = start("webhook-too-large").await;
    for sender in SENDERS {
        let id = format!("evt_{}_big", sender.name());
        let body = format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(5000));
        let headers = Delivery::sign(sender, sender.secret(), &id, now(), &body);
        let delivery = Delivery { headers, body };
        let reply = delivery.post(&gateway, sender).await;
        assert_eq!(reply.status, 413, "{sender:?}: {}", reply.text());
        assert_eq!(reply.json()["code"], "body-too-large");
        // A method that is not deduplicated has no key, but its body is
        // still read whole for the signature: the detail says so.
        let reply = delivery.send(&gateway, "PUT", &sender.path()).await;
        assert_eq!(reply.status, 413, "{sender:?}: {}", reply.text());
        let detail = reply.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(detail.contains("webhook route"), "{sender:?}: {detail}");
    }
    assert_eq!(upstream.total(), 0);
}

/// Every request on a webhook route is verified, whatever its method;
/// `methods` only decides which are deduplicated.
#[tokio::test]
async fn every_method_is_verified_and_only_post_is_deduplicated() {
    let (_dir, upstream, gateway) = start("webhook-methods").await;
    let sender = Sender::Github;
    // Announced at 0, so an alert on its first increase fires.
    let zero = "idemgate_requests_total{outcome=\"invalid_signature\",route=\"github\"} 0";
    assert!(metrics(&gateway).await.contains(zero));
    let unsigned = gateway.client().get(&sender.path()).await;
    assert_refused(&unsigned, sender, "unsigned GET");
    assert_eq!(upstream.total(), 0);

    let signed = Delivery::new(sender, sender.secret(), "evt_get", now());
    for n in 1..=2 {
        let reply = signed.send(&gateway, "PUT", &sender.path()).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), None, "passed through");
        assert_eq!(upstream.total(), n);
    }
}

/// `GET /admin/routes` shows each sender's route with the webhook
/// defaults, as docs/webhooks.md words them: `release_statuses` is `["5xx", 429]`.
#[tokio::test]
async fn admin_routes_shows_the_webhook_defaults() {
    let (_dir, _upstream, gateway) = start("webhook-admin-routes").await;
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let reply = gateway
        .admin_client()
        .send("GET", "/admin/routes", &[("authorization", &auth)], "")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let routes = reply.json();
    let keys = [
        (
            "standard",
            serde_json::json!([{ "header": "webhook-id" }, { "header": "svix-id" }]),
        ),
        ("stripe", serde_json::json!([{ "json_pointer": "/id" }])),
        (
            "github",
            serde_json::json!([{ "header": "x-github-delivery" }]),
        ),
        (
            "shopify",
            serde_json::json!([{ "header": "x-shopify-webhook-id" }]),
        ),
    ];
    for (name, key) in keys {
        let route = routes
            .as_array()
            .and_then(|routes| routes.iter().find(|route| route["name"] == name))
            .unwrap_or_else(|| panic!("no route {name}: {routes}"));
        assert_eq!(route["webhook"]["scheme"], name);
        assert_eq!(route["methods"], serde_json::json!(["POST"]), "{name}");
        assert_eq!(route["required"], true, "{name}");
        assert_eq!(route["scope"], serde_json::json!([]), "{name}");
        assert_eq!(
            route["release_statuses"],
            serde_json::json!(["5xx", 429]),
            "{name}"
        );
        assert_eq!(route["key"], key, "{name}");
    }
}

fn idemgate_check(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    command.args(["check", "-c"]).arg(config).env_clear();
    command.envs(env.iter().copied());
    let out = command.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn check_refuses_an_unset_secret_and_an_unknown_scheme() {
    let dir = TestDir::new("webhook-check");
    let config = dir.path("idemgate.toml");
    let file = |config: &Config| fixed(config, "127.0.0.1:18080", "127.0.0.1:19090", "store.db");
    std::fs::write(&config, file(&self::config())).unwrap();

    let (ok, text) = idemgate_check(&config, &ENV);
    assert!(ok, "{text}");
    assert!(
        text.contains("webhook   stripe, secrets from STRIPE_WHSEC,STRIPE_WHSEC_OLD, tolerance 5m"),
        "{text}"
    );

    let without_old: Vec<(&str, &str)> = ENV
        .iter()
        .copied()
        .filter(|(name, _)| *name != "STRIPE_WHSEC_OLD")
        .collect();
    let (ok, text) = idemgate_check(&config, &without_old);
    assert!(!ok, "{text}");
    assert!(text.contains("routes[1].webhook.secrets_env[1]"), "{text}");
    assert!(
        text.contains("STRIPE_WHSEC_OLD is not set or empty"),
        "{text}"
    );
    assert!(!text.contains(STRIPE_WHSEC), "a secret leaked: {text}");

    let paypal = self::config().with_route("shopify", |r| {
        r.set(
            "webhook",
            webhook("paypal", r#"secrets_env = ["SHOPIFY_SECRET"]"#),
        )
    });
    std::fs::write(&config, file(&paypal)).unwrap();
    let (ok, text) = idemgate_check(&config, &ENV);
    assert!(!ok, "{text}");
    assert!(text.contains("routes[3].webhook.scheme"), "{text}");
    assert!(text.contains("unknown scheme \"paypal\""), "{text}");
}

#[tokio::test]
async fn serve_refuses_an_empty_secret() {
    let dir = TestDir::new("webhook-serve-refused");
    std::fs::write(
        dir.path("idemgate.toml"),
        fixed(
            &config(),
            "127.0.0.1:0",
            "127.0.0.1:1",
            &dir.path("store.db").display().to_string(),
        ),
    )
    .unwrap();
    let mut env: Vec<(&str, &str)> = ENV.to_vec();
    env.retain(|(name, _)| *name != "GITHUB_SECRET");
    env.push(("GITHUB_SECRET", ""));
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "-c"])
        .arg(dir.path("idemgate.toml"))
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("routes[2].webhook.secrets_env"), "{stderr}");
    assert!(
        stderr.contains("GITHUB_SECRET is not set or empty"),
        "{stderr}"
    );
}

/// A delivery with `headers` (and a JSON content type) and `body`, as given.
fn delivery(headers: &[(&str, &str)], body: &str) -> Delivery {
    let mut list = vec![("content-type".to_owned(), "application/json".to_owned())];
    list.extend(
        headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned())),
    );
    Delivery {
        headers: list,
        body: body.to_owned(),
    }
}

/// The value of `name` in the headers this file's signer makes.
fn signed_value(sender: Sender, secret: &str, id: &str, at: i64, body: &str, name: &str) -> String {
    let headers = Delivery::sign(sender, secret, id, at, body);
    headers.into_iter().find(|(n, _)| n == name).unwrap().1
}

/// This file's signer, which the tests above send with at the current time,
/// makes what the senders' own libraries make, byte for byte.
#[test]
fn this_files_signer_agrees_with_the_senders_libraries() {
    use webhook_vectors::*;
    let standard = |secret, at| {
        let name = "webhook-signature";
        signed_value(
            Sender::Standard,
            secret,
            standard::ID,
            at,
            standard::BODY,
            name,
        )
    };
    assert_eq!(standard(STANDARD_SECRET, SIGNED_AT), standard::FIRST);
    assert_eq!(standard(STANDARD_SECRET, RETRIED_AT), standard::RETRY);
    assert_eq!(
        standard(STANDARD_SECRET_OLD, SIGNED_AT),
        standard::OLD_SECRET
    );
    let stripe = |secret, at| {
        let name = "stripe-signature";
        signed_value(Sender::Stripe, secret, "unused", at, stripe::BODY, name)
    };
    assert_eq!(stripe(STRIPE_WHSEC, SIGNED_AT), stripe::FIRST);
    assert_eq!(stripe(STRIPE_WHSEC, RETRIED_AT), stripe::RETRY);
    assert_eq!(stripe(STRIPE_WHSEC_OLD, SIGNED_AT), stripe::OLD_SECRET);
    let (id, body) = (github::DELIVERY, github::BODY);
    let github = signed_value(
        Sender::Github,
        GITHUB_SECRET,
        id,
        0,
        body,
        "x-hub-signature-256",
    );
    assert_eq!(github, github::SHA256);
    let (id, body) = (shopify::WEBHOOK_ID, shopify::BODY);
    let name = "x-shopify-hmac-sha256";
    let shopify = signed_value(Sender::Shopify, SHOPIFY_SECRET, id, 0, body, name);
    assert_eq!(shopify, shopify::HMAC);
}

/// Deliveries signed by the senders' own libraries (tests/webhook_vectors)
/// go through the gateway: accepted under any listed secret, with several
/// signatures in one header, with the secret given with or without its
/// `whsec_` prefix; a sender's redelivery (re-signed, same id and body)
/// replays; a changed body is refused.
#[tokio::test]
async fn deliveries_signed_by_the_senders_own_libraries_verify() {
    use webhook_vectors::*;
    let dir = TestDir::new("webhook-vectors");
    let upstream = MockUpstream::start().await;
    let reaching_back = |scheme: &str, secrets: &str| {
        let rest = format!(r#"secrets_env = {secrets}, tolerance = "{VECTOR_TOLERANCE}""#);
        webhook(scheme, &rest)
    };
    let standard_secrets = r#"["STANDARD_SECRET", "STANDARD_SECRET_OLD"]"#;
    let config = config()
        .with_route("standard", |r| {
            r.set("webhook", reaching_back("standard", standard_secrets))
        })
        .with_route("stripe", |r| {
            let secrets = r#"["STRIPE_WHSEC", "STRIPE_WHSEC_OLD"]"#;
            r.set("webhook", reaching_back("stripe", secrets))
        })
        .route(
            Route::new("standard-bare", "consumer")
                .path_prefix("/bare/standard")
                .set(
                    "webhook",
                    reaching_back("standard", r#""STANDARD_SECRET_BARE""#),
                ),
        )
        .route(
            Route::new("svix", "consumer")
                .path_prefix("/hook/svix")
                .set("webhook", reaching_back("standard", standard_secrets))
                .set("key", raw(r#"{ header = "svix-id" }"#)),
        );
    // STANDARD_SECRET as a sender may hand it out: no prefix, no padding.
    let bare = STANDARD_SECRET
        .trim_start_matches("whsec_")
        .trim_end_matches('=');
    let mut env = ENV.to_vec();
    env.push(("STANDARD_SECRET_BARE", bare));
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config, &env);
    let expect = |reply: &Reply, replayed: &str, why: &str| {
        assert_eq!(reply.status, 201, "{why}: {}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed), "{why}");
    };

    let (signed_at, retried_at) = (SIGNED_AT.to_string(), RETRIED_AT.to_string());
    let standard_at = |at: &str, signature: &str| {
        let headers = [
            ("webhook-id", standard::ID),
            ("webhook-timestamp", at),
            ("webhook-signature", signature),
        ];
        delivery(&headers, standard::BODY)
    };
    let post = |d: Delivery, path: &'static str| {
        let gateway = &gateway;
        async move { d.send(gateway, "POST", path).await }
    };
    let first = standard_at(&signed_at, standard::FIRST);
    expect(&post(first, "/hook/standard").await, "false", "standard");
    for (why, at, signature) in [
        ("standard redelivery", &retried_at, standard::RETRY),
        ("standard, old secret", &signed_at, standard::OLD_SECRET),
        (
            "standard, several signatures",
            &signed_at,
            standard::SEVERAL,
        ),
    ] {
        expect(
            &post(standard_at(at, signature), "/hook/standard").await,
            "true",
            why,
        );
    }
    let tampered =
        standard_at(&signed_at, standard::FIRST).with_body(standard::BODY.replace("1200", "1201"));
    assert_refused(
        &post(tampered, "/hook/standard").await,
        Sender::Standard,
        "standard, tampered",
    );
    let bare_route = standard_at(&signed_at, standard::FIRST);
    expect(
        &post(bare_route, "/bare/standard").await,
        "false",
        "secret without whsec_",
    );
    let svix = delivery(
        &[
            ("svix-id", standard::ID),
            ("svix-timestamp", &signed_at),
            ("svix-signature", standard::SEVERAL),
        ],
        standard::BODY,
    );
    expect(&post(svix, "/hook/svix").await, "false", "svix headers");
    assert_eq!(upstream.total(), 3);

    let stripe_with = |signature: &str| delivery(&[("stripe-signature", signature)], stripe::BODY);
    expect(
        &post(stripe_with(stripe::FIRST), "/hook/stripe").await,
        "false",
        "stripe",
    );
    for (why, signature) in [
        ("stripe redelivery", stripe::RETRY),
        ("stripe, old secret", stripe::OLD_SECRET),
        ("stripe, rolled secret", stripe::ROLLED),
    ] {
        expect(
            &post(stripe_with(signature), "/hook/stripe").await,
            "true",
            why,
        );
    }
    let tampered = stripe_with(stripe::FIRST).with_body(stripe::BODY.replace("1200", "1201"));
    assert_refused(
        &post(tampered, "/hook/stripe").await,
        Sender::Stripe,
        "stripe, tampered",
    );
    assert_eq!(upstream.total(), 4);

    let github_with = |headers: &[(&str, &str)]| {
        let mut all = vec![
            ("x-github-event", "push"),
            ("x-github-delivery", github::DELIVERY),
        ];
        all.extend_from_slice(headers);
        delivery(&all, github::BODY)
    };
    // GitHub sends both; only the SHA-256 one is checked.
    let both = github_with(&[
        ("x-hub-signature", github::SHA1),
        ("x-hub-signature-256", github::SHA256),
    ]);
    expect(&post(both, "/hook/github").await, "false", "github");
    let sha256 = github_with(&[("x-hub-signature-256", github::SHA256)]);
    expect(
        &post(sha256, "/hook/github").await,
        "true",
        "github redelivery",
    );
    // The legacy SHA-1 signature alone is not enough.
    let reply = post(
        github_with(&[("x-hub-signature", github::SHA1)]),
        "/hook/github",
    )
    .await;
    assert_refused(&reply, Sender::Github, "github, SHA-1 only");
    assert!(
        reply
            .text()
            .contains("the x-hub-signature-256 header is missing"),
        "{}",
        reply.text()
    );
    assert_eq!(upstream.total(), 5);

    let shopify = delivery(
        &[
            ("x-shopify-topic", "orders/create"),
            ("x-shopify-webhook-id", shopify::WEBHOOK_ID),
            ("x-shopify-hmac-sha256", shopify::HMAC),
        ],
        shopify::BODY,
    );
    expect(&post(shopify, "/hook/shopify").await, "false", "shopify");
    assert_eq!(upstream.total(), 6);
}

/// `tolerance` bounds the signed timestamp both ways, up to and including
/// its edge. The gateway reads its clock a little after this test does, so
/// each side is checked exactly at the edge where that cannot matter, and
/// 2 s inside or past it at the other.
#[tokio::test]
async fn the_tolerance_holds_to_its_edge_both_ways() {
    let (_dir, upstream, gateway) = start("webhook-tolerance").await;
    let tolerance = 300;
    for sender in [Sender::Standard, Sender::Stripe] {
        let at = now();
        let cases = [
            ("oldest accepted", at - tolerance + 2, true),
            ("just too old", at - tolerance - 1, false),
            ("furthest ahead accepted", at + tolerance, true),
            ("just too far ahead", at + tolerance + 3, false),
        ];
        for (n, (why, signed_at, accepted)) in cases.into_iter().enumerate() {
            let id = format!("evt_{}_edge_{n}", sender.name());
            let reply = Delivery::new(sender, sender.secret(), &id, signed_at)
                .post(&gateway, sender)
                .await;
            if accepted {
                assert_eq!(reply.status, 201, "{sender:?} {why}: {}", reply.text());
            } else {
                assert_refused(&reply, sender, why);
            }
        }
    }
    assert_eq!(upstream.total(), 4);
}

/// The check reads an HTTP/2 body as it reads an HTTP/1 one.
#[tokio::test]
async fn a_delivery_over_http2_is_verified_and_deduplicated_alike() {
    let (_dir, upstream, gateway) = start("webhook-h2c").await;
    let client = common::Client::h2c(gateway.addr);
    let sender = Sender::Stripe;
    let send = |delivery: Delivery| {
        let client = client.clone();
        async move {
            let headers: Vec<(&str, &str)> = delivery
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            client
                .send("POST", &sender.path(), &headers, delivery.body.clone())
                .await
        }
    };
    let forged = Delivery::new(sender, "whsec_forged", "evt_h2", now());
    assert_refused(&send(forged).await, sender, "forged over h2");
    for replayed in ["false", "true"] {
        let genuine = Delivery::new(sender, sender.secret(), "evt_h2", now());
        let reply = send(genuine).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
    }
    assert_eq!(upstream.total(), 1);
}
