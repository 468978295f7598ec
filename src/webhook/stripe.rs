//! Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]`, each
//! `v1` an HMAC-SHA256 of `{t}.{body}` under the endpoint secret (`whsec_...`
//! as written); `t` must be within the tolerance.

use http::HeaderMap;

use super::headers::single;
use super::timestamp::{self, Window};
use super::{Rejection, mac};

const SIGNATURE: &str = "stripe-signature";
/// Every header the signature covers or carries.
pub const SIGNED: &[&str] = &[SIGNATURE];

pub fn verify(
    headers: &HeaderMap,
    body: &[u8],
    keys: &[Vec<u8>],
    window: Window,
) -> Result<(), Rejection> {
    let mut signed_at = None;
    let mut signatures = Vec::new();
    for item in single(headers, SIGNATURE)?.split(',') {
        let Some((name, value)) = item.trim().split_once('=') else {
            continue;
        };
        match name {
            // Two timestamps: which one was signed?
            "t" if signed_at.is_some() => return Err(Rejection::Malformed(SIGNATURE)),
            "t" => {
                signed_at = Some(timestamp::parse(value).ok_or(Rejection::Malformed(SIGNATURE))?);
            }
            // `v0` (test mode's legacy scheme) and others are not checked.
            "v1" => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let signed_at = signed_at.ok_or(Rejection::Malformed(SIGNATURE))?;
    let signed_at_text = signed_at.to_string();
    let content: [&[u8]; 3] = [signed_at_text.as_bytes(), b".", body];
    if !mac::any_matches(keys, &content, signatures.iter().map(Vec::as_slice)) {
        return Err(Rejection::NoMatch);
    }
    window.check(signed_at)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// Made by stripe-python's `WebhookSignature.generate_signature_header("{}", "whsec_x", 1614265330)`.
    const GOOD: &str = "1a4fdcd98fea6515352a23e260e37db1e55089ae770de286738bd69f21527ac3";

    fn header(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SIGNATURE, value.parse().unwrap());
        headers
    }

    fn at(secs: u64) -> Window {
        Window::around(
            UNIX_EPOCH + Duration::from_secs(secs),
            Duration::from_secs(300),
        )
    }

    fn keys() -> Vec<Vec<u8>> {
        vec![b"whsec_old".to_vec(), b"whsec_x".to_vec()]
    }

    #[test]
    fn a_stripe_header_verifies_with_any_v1_and_any_secret() {
        let now = at(1614265330);
        let plain = format!("t=1614265330,v1={GOOD}");
        assert_eq!(verify(&header(&plain), b"{}", &keys(), now), Ok(()));
        let several = format!("t=1614265330,v1={},v1={GOOD},v0=abc", "0".repeat(64));
        assert_eq!(verify(&header(&several), b"{}", &keys(), now), Ok(()));
        assert_eq!(
            verify(&header(&plain), b"{}", &keys()[..1], now),
            Err(Rejection::NoMatch)
        );
        assert_eq!(
            verify(&header(&plain), b"{ }", &keys(), now),
            Err(Rejection::NoMatch)
        );
        let v0_only = format!("t=1614265330,v0={GOOD}");
        assert_eq!(
            verify(&header(&v0_only), b"{}", &keys(), now),
            Err(Rejection::NoMatch)
        );
    }

    #[test]
    fn the_timestamp_is_signed_and_bounded() {
        let plain = format!("t=1614265330,v1={GOOD}");
        assert_eq!(
            verify(&header(&plain), b"{}", &keys(), at(1614265631)),
            Err(Rejection::TooOld)
        );
        assert_eq!(
            verify(&header(&plain), b"{}", &keys(), at(1614265029)),
            Err(Rejection::TooNew)
        );
        let moved = format!("t=1614265331,v1={GOOD}");
        assert_eq!(
            verify(&header(&moved), b"{}", &keys(), at(1614265330)),
            Err(Rejection::NoMatch)
        );
    }

    #[test]
    fn a_header_without_one_timestamp_is_malformed() {
        let now = at(1614265330);
        let malformed = Err(Rejection::Malformed(SIGNATURE));
        assert_eq!(
            verify(&header(&format!("v1={GOOD}")), b"{}", &keys(), now),
            malformed
        );
        let twice = format!("t=1614265330,t=1614265330,v1={GOOD}");
        assert_eq!(verify(&header(&twice), b"{}", &keys(), now), malformed);
        assert_eq!(
            verify(&HeaderMap::new(), b"{}", &keys(), now),
            Err(Rejection::MissingHeader(SIGNATURE))
        );
    }
}
