//! Webhook deliveries as the senders' own libraries sign them, held as fixed
//! text so the tests need no package registry. Made by
//! scripts/webhook-vectors/generate.py (Python: standardwebhooks 1.3.0,
//! svix 2.9.1, stripe 16.1.0) and scripts/webhook-vectors/generate.mjs
//! (Node: standardwebhooks 1.3.0, svix 1.99.1, stripe 23.2.0,
//! @octokit/webhooks-methods 6.0.0), which agree byte for byte where both
//! sign; each composed header (several signatures) was accepted by the
//! libraries' own verifiers. The secrets are tests/webhooks.rs's.
//!
//! The timestamps are fixed, so a route that takes these deliveries sets a
//! `tolerance` that reaches back to them (`VECTOR_TOLERANCE`).

/// When every vector was signed: 2026-01-01T00:00:00Z.
pub const SIGNED_AT: i64 = 1_767_225_600;
/// The sender's redelivery of the same event, an hour later.
pub const RETRIED_AT: i64 = SIGNED_AT + 3600;
/// A route tolerance that reaches back to `SIGNED_AT` for a century.
pub const VECTOR_TOLERANCE: &str = "36500d";

pub mod standard {
    /// `webhook-id` (and `svix-id`) of every Standard Webhooks vector.
    pub const ID: &str = "msg_vec_1";
    pub const BODY: &str = r#"{"id":"msg_vec_1","type":"order.created","data":{"amount":1200}}"#;
    /// `Webhook("whsec_c3RhbmRhcmQtbmV3LWtleS0wMTIzNDU2Nzg5").sign(ID, SIGNED_AT, BODY)`,
    /// standardwebhooks 1.3.0 (Python and Node) and svix 2.9.1 / 1.99.1 alike;
    /// also what the secret gives without its `whsec_` prefix.
    pub const FIRST: &str = "v1,yyPBx6Kw/Ry35nDCLxA3kSUvHOxEtqa/atogi85G3EA=";
    /// The same event re-signed at `RETRIED_AT`.
    pub const RETRY: &str = "v1,SGoX4iKe5QW3+Qm7hCqsJTZJysvOCm7odE7vsegb0T8=";
    /// At `SIGNED_AT` under the old secret `whsec_c3RhbmRhcmQtb2xkLWtleQ==`.
    pub const OLD_SECRET: &str = "v1,WwU8CJI0b+qKAtEojLglZEZ5NRYAVIdplBxYhvh5s5w=";
    /// A sender signing with both secrets and an asymmetric `v1a` entry, the
    /// entries space-separated (accepted by standardwebhooks and svix).
    pub const SEVERAL: &str = "v1a,AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw== v1,WwU8CJI0b+qKAtEojLglZEZ5NRYAVIdplBxYhvh5s5w= v1,yyPBx6Kw/Ry35nDCLxA3kSUvHOxEtqa/atogi85G3EA=";
}

pub mod stripe {
    pub const BODY: &str = r#"{"id":"evt_vec_1","type":"order.created","data":{"amount":1200}}"#;
    /// stripe-python 16.1.0 `WebhookSignature.generate_signature_header(BODY,
    /// "whsec_stripe_new_0123456789abcdef", timestamp=SIGNED_AT)`; stripe-node
    /// 23.2.0 `webhooks.generateTestHeaderString` alike.
    pub const FIRST: &str =
        "t=1767225600,v1=013a85cdb6f0beb724adbdeebfc419facadcda0ab8fe81f7db5af1849a8b7e36";
    /// The same event re-signed at `RETRIED_AT`.
    pub const RETRY: &str =
        "t=1767229200,v1=db132a8cacfaeaf9ffe0be755ae38f2a8cb7094f407af32f6ee393ba81e64784";
    /// At `SIGNED_AT` under the old secret `whsec_stripe_old_fedcba9876543210`.
    pub const OLD_SECRET: &str =
        "t=1767225600,v1=d19fbc9a2845fe89537b4c323d6e6e5d875bf6fc6fd04a4d4c2ed0569363d6dd";
    /// A rolled secret: one `v1` per secret, then a test-mode `v0` (accepted
    /// by both libraries' `verify_header` under either secret).
    pub const ROLLED: &str = "t=1767225600,v1=d19fbc9a2845fe89537b4c323d6e6e5d875bf6fc6fd04a4d4c2ed0569363d6dd,v1=013a85cdb6f0beb724adbdeebfc419facadcda0ab8fe81f7db5af1849a8b7e36,v0=a5b9d008c0652d59195e18a7fc8b531d8e201492cf5c7bb813abd868d49fbbe3";
}

pub mod github {
    /// `X-GitHub-Delivery` sent with it (GitHub signs the body only).
    pub const DELIVERY: &str = "evt_vec_gh";
    pub const BODY: &str = r#"{"id":"evt_vec_gh","type":"order.created","data":{"amount":1200}}"#;
    /// @octokit/webhooks-methods 6.0.0 `sign("It's a Secret to Everybody", BODY)`.
    pub const SHA256: &str =
        "sha256=0ed38bbefb4576d23a98cbd66187f1e6fc8cd04caac7ad2350774ae11c05af4b";
    /// The legacy `X-Hub-Signature` (HMAC-SHA1) GitHub also sends.
    pub const SHA1: &str = "sha1=ca46686437baebc005142fe883a9bc3ae51a502e";
}

pub mod shopify {
    /// `X-Shopify-Webhook-Id` sent with it.
    pub const WEBHOOK_ID: &str = "evt_vec_shop";
    pub const BODY: &str = r#"{"id":"evt_vec_shop","type":"order.created","data":{"amount":1200}}"#;
    /// Shopify's documented check (Python `hmac` + `base64`, no Shopify
    /// library signs): base64 of the body's HMAC-SHA256 under
    /// "shpss_shopify_client_secret".
    pub const HMAC: &str = "FIEqDcXyGG9YnPkDfRADFTK0w03pOGFh6dul6wi9ulI=";
}
