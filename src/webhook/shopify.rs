//! Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the body>` under the
//! app's client secret. The body only: neither a timestamp nor
//! `X-Shopify-Webhook-Id` is signed, so a recorded delivery verifies forever
//! (docs/webhooks.md).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::headers::single;
use super::{Rejection, mac};

const SIGNATURE: &str = "x-shopify-hmac-sha256";
/// Every header the signature covers or carries.
pub const SIGNED: &[&str] = &[SIGNATURE];

pub fn verify(headers: &HeaderMap, body: &[u8], keys: &[Vec<u8>]) -> Result<(), Rejection> {
    let signature = STANDARD
        .decode(single(headers, SIGNATURE)?)
        .map_err(|_| Rejection::Malformed(SIGNATURE))?;
    match mac::any_matches(keys, &[body], [signature.as_slice()].into_iter()) {
        true => Ok(()),
        false => Err(Rejection::NoMatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base64_body_hmac_verifies() {
        // Python: base64.b64encode(hmac.new(b"hush", body, hashlib.sha256).digest())
        let body = br#"{"id":820982911946154508}"#;
        let mut headers = HeaderMap::new();
        headers.insert(
            SIGNATURE,
            "qBvrsZF7RfB1iS6BX6IHqJTp5L911P7intnPeTPsH0I="
                .parse()
                .unwrap(),
        );
        assert_eq!(verify(&headers, body, &[b"hush".to_vec()]), Ok(()));
        assert_eq!(
            verify(&headers, b"{}", &[b"hush".to_vec()]),
            Err(Rejection::NoMatch)
        );
        headers.insert(SIGNATURE, "not base64!".parse().unwrap());
        assert_eq!(
            verify(&headers, body, &[b"hush".to_vec()]),
            Err(Rejection::Malformed(SIGNATURE))
        );
    }
}
