//! Standard Webhooks: `webhook-signature` holds space-separated
//! `v1,<base64 HMAC-SHA256>` entries over `{webhook-id}.{webhook-timestamp}.{body}`;
//! `webhook-timestamp` must be within the tolerance.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::headers::single;
use super::timestamp::{self, Window};
use super::{Rejection, mac};

const ID: &str = "webhook-id";
const TIMESTAMP: &str = "webhook-timestamp";
const SIGNATURE: &str = "webhook-signature";
/// Every header the signature covers or carries.
pub const SIGNED: &[&str] = &[ID, TIMESTAMP, SIGNATURE];

pub fn verify(
    headers: &HeaderMap,
    body: &[u8],
    keys: &[Vec<u8>],
    window: Window,
) -> Result<(), Rejection> {
    let id = single(headers, ID)?;
    let signed_at =
        timestamp::parse(single(headers, TIMESTAMP)?).ok_or(Rejection::Malformed(TIMESTAMP))?;
    let signatures: Vec<Vec<u8>> = single(headers, SIGNATURE)?
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        // Other versions (`v1a`, asymmetric) are not this scheme's.
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, signature)| STANDARD.decode(signature).ok())
        .collect();
    // The timestamp as the reference library signs it: its integer value.
    let signed_at_text = signed_at.to_string();
    let content: [&[u8]; 5] = [id.as_bytes(), b".", signed_at_text.as_bytes(), b".", body];
    if !mac::any_matches(keys, &content, signatures.iter().map(Vec::as_slice)) {
        return Err(Rejection::NoMatch);
    }
    window.check(signed_at)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// The Standard Webhooks specification's example delivery.
    fn example(signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ID, "msg_p5jXN8AQM9LWM0D4loKWxJek".parse().unwrap());
        headers.insert(TIMESTAMP, "1614265330".parse().unwrap());
        headers.insert(SIGNATURE, signature.parse().unwrap());
        headers
    }

    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const GOOD: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn key() -> Vec<Vec<u8>> {
        // whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, base64-decoded.
        vec![STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()]
    }

    fn at(secs: u64) -> Window {
        Window::around(
            UNIX_EPOCH + Duration::from_secs(secs),
            Duration::from_secs(300),
        )
    }

    #[test]
    fn the_specification_example_verifies() {
        assert_eq!(verify(&example(GOOD), BODY, &key(), at(1614265330)), Ok(()));
        let several = format!("v1,Zm9yZ2Vk v1a,xyz {GOOD}");
        assert_eq!(
            verify(&example(&several), BODY, &key(), at(1614265330)),
            Ok(())
        );
    }

    #[test]
    fn a_changed_body_id_or_timestamp_does_not() {
        let now = at(1614265330);
        assert_eq!(
            verify(&example(GOOD), b"{}", &key(), now),
            Err(Rejection::NoMatch)
        );
        let mut other_id = example(GOOD);
        other_id.insert(ID, "msg_other".parse().unwrap());
        assert_eq!(
            verify(&other_id, BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
        let mut other_time = example(GOOD);
        other_time.insert(TIMESTAMP, "1614265331".parse().unwrap());
        assert_eq!(
            verify(&other_time, BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
        let v2 = GOOD.replace("v1,", "v2,");
        assert_eq!(
            verify(&example(&v2), BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
    }

    #[test]
    fn the_timestamp_is_bounded_both_ways() {
        let headers = example(GOOD);
        assert_eq!(
            verify(&headers, BODY, &key(), at(1614265330 + 301)),
            Err(Rejection::TooOld)
        );
        assert_eq!(
            verify(&headers, BODY, &key(), at(1614265330 - 301)),
            Err(Rejection::TooNew)
        );
    }

    #[test]
    fn missing_or_malformed_headers_are_named() {
        let now = at(1614265330);
        for name in [ID, TIMESTAMP, SIGNATURE] {
            let mut headers = example(GOOD);
            headers.remove(name);
            assert_eq!(
                verify(&headers, BODY, &key(), now),
                Err(Rejection::MissingHeader(name))
            );
        }
        let mut twice = example(GOOD);
        twice.append(SIGNATURE, GOOD.parse().unwrap());
        assert_eq!(
            verify(&twice, BODY, &key(), now),
            Err(Rejection::RepeatedHeader(SIGNATURE))
        );
        let mut bad_time = example(GOOD);
        bad_time.insert(TIMESTAMP, "soon".parse().unwrap());
        assert_eq!(
            verify(&bad_time, BODY, &key(), now),
            Err(Rejection::Malformed(TIMESTAMP))
        );
    }
}
