//! A webhook route's signature check on arbitrary headers and body: never a
//! panic, and a request is accepted only when one of its signature headers
//! holds the HMAC-SHA256 of the signed content under one of the route's
//! keys, computed here apart from the verifier, with a timestamp inside the
//! tolerance.
//!
//! Input: a scheme byte (Standard, Stripe, GitHub, Shopify), then header
//! lines `name:value` separated by `\n`, a blank line, the body.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate::config::{WebhookConfig, WebhookScheme, WebhookSecret};
use idemgate::webhook::Verifier;
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;

/// The route's keys (rotation: either signs). The seeds in
/// `corpus/webhook_signature/` are signed with them.
const KEYS: [&[u8]; 2] = [b"whsec_old", b"fuzz-secret"];
/// Now, for the timestamp schemes; the seeds are signed at this time.
const NOW: u64 = 1_614_265_330;
const TOLERANCE: i64 = 300;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let scheme = match selector % 4 {
        0 => WebhookScheme::Standard,
        1 => WebhookScheme::Stripe,
        2 => WebhookScheme::Github,
        _ => WebhookScheme::Shopify,
    };
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (rest, &b""[..]),
    };
    let mut headers = HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(&line[colon + 1..]),
        ) {
            headers.append(name, value);
        }
    }
    let config = WebhookConfig {
        scheme,
        secrets: KEYS
            .iter()
            .map(|key| WebhookSecret {
                env: "FUZZ_SECRET".into(),
                key: key.to_vec(),
            })
            .collect(),
        tolerance: Duration::from_secs(TOLERANCE as u64),
    };
    let verifier = Verifier::new(&config, 1 << 20);
    let verdict = verifier.verify(&headers, body, UNIX_EPOCH + Duration::from_secs(NOW));
    if let Err(refused) = verdict {
        // Told to the sender: never a key.
        let told = refused.rejection.to_string();
        assert!(
            KEYS.iter()
                .all(|key| !told.as_bytes().windows(key.len()).any(|w| w == *key))
        );
        return;
    }
    match scheme {
        WebhookScheme::Github => {
            let value = text(&headers, "x-hub-signature-256");
            assert!(
                macs(&[body]).any(|mac| value.contains(&hex::encode(mac))),
                "accepted without the body's MAC: {value:?}"
            );
        }
        WebhookScheme::Shopify => {
            let value = text(&headers, "x-shopify-hmac-sha256");
            assert!(
                macs(&[body]).any(|mac| value.contains(&STANDARD.encode(mac))),
                "accepted without the body's MAC: {value:?}"
            );
        }
        WebhookScheme::Stripe => {
            let value = text(&headers, "stripe-signature");
            let signed = timestamps(&value).any(|at| {
                let at = at.to_string();
                macs(&[at.as_bytes(), b".", body]).any(|mac| value.contains(&hex::encode(mac)))
            });
            assert!(
                signed,
                "accepted without a MAC of a timestamp in the window: {value:?}"
            );
        }
        WebhookScheme::Standard => {
            // Each set of headers sent is checked on its own.
            let mut sets = 0;
            for prefix in ["webhook-", "svix-"] {
                let id = format!("{prefix}id");
                if !headers.contains_key(&id) {
                    continue;
                }
                sets += 1;
                let id = text(&headers, &id);
                let at = text(&headers, &format!("{prefix}timestamp"));
                let signature = text(&headers, &format!("{prefix}signature"));
                let at: i64 = at.parse().expect("an accepted timestamp is a number");
                assert!(
                    (NOW as i64 - at).abs() <= TOLERANCE,
                    "{at} accepted at {NOW}"
                );
                let at = at.to_string();
                let signed = macs(&[id.as_bytes(), b".", at.as_bytes(), b".", body])
                    .any(|mac| signature.contains(&STANDARD.encode(mac)));
                assert!(
                    signed,
                    "{prefix} set accepted without its MAC: {signature:?}"
                );
            }
            assert!(sets > 0, "accepted without an id");
        }
    }
});

/// The one value of a header an accepted request carries, trimmed; hex in
/// lower case, since either case decodes.
fn text(headers: &HeaderMap, name: &str) -> String {
    let mut values = headers.get_all(name).iter();
    let value = values.next().expect("an accepted request has the header");
    assert!(values.next().is_none(), "{name} twice, accepted");
    let value = value.to_str().expect("an accepted header is text").trim();
    if name == "stripe-signature" || name == "x-hub-signature-256" {
        value.to_ascii_lowercase()
    } else {
        value.to_owned()
    }
}

/// Every run of digits in a Stripe header that is a time inside the window.
fn timestamps(value: &str) -> impl Iterator<Item = i64> + '_ {
    value
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|digits| digits.parse::<i64>().ok())
        .filter(|at| (NOW as i64 - at).abs() <= TOLERANCE)
}

/// The MAC of `parts` under each key.
fn macs<'a>(parts: &'a [&'a [u8]]) -> impl Iterator<Item = Vec<u8>> + 'a {
    KEYS.iter().map(move |key| {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    })
}
