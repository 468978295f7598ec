//! Standard Webhooks: `webhook-signature` holds space-separated
//! `v1,<base64 HMAC-SHA256>` entries over `{webhook-id}.{webhook-timestamp}.{body}`;
//! `webhook-timestamp` must be within the tolerance.
//!
//! Svix, where the scheme comes from, sends the same three headers as
//! `svix-id`, `svix-timestamp` and `svix-signature` unless an account has
//! them white-labelled, and its libraries read either; so do we, and a
//! request carrying both sets must verify under each.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;

use super::headers::single;
use super::timestamp::{self, Window};
use super::{Rejection, mac};

const ID: &str = "webhook-id";
const TIMESTAMP: &str = "webhook-timestamp";
const SIGNATURE: &str = "webhook-signature";
const SVIX_ID: &str = "svix-id";
const SVIX_TIMESTAMP: &str = "svix-timestamp";
const SVIX_SIGNATURE: &str = "svix-signature";
/// Every header the signature covers or carries.
pub const SIGNED: &[&str] = &[
    ID,
    TIMESTAMP,
    SIGNATURE,
    SVIX_ID,
    SVIX_TIMESTAMP,
    SVIX_SIGNATURE,
];

const STANDARD_SET: [&str; 3] = [ID, TIMESTAMP, SIGNATURE];
const SVIX_SET: [&str; 3] = [SVIX_ID, SVIX_TIMESTAMP, SVIX_SIGNATURE];

/// The sets of id, timestamp and signature headers the request was signed
/// with: `webhook-`, `svix-`, or both. Both are each checked, since the
/// consumer may verify again with either reading: the Standard Webhooks
/// libraries read the `webhook-` set, Svix's the `svix-` one when present.
fn sets(headers: &HeaderMap) -> Result<&'static [[&'static str; 3]], Rejection> {
    if !headers.contains_key(SVIX_ID) {
        return Ok(&[STANDARD_SET]);
    }
    if !headers.contains_key(ID) {
        return Ok(&[SVIX_SET]);
    }
    // Both: a route may key by either id, so they must name one event.
    if let (Ok(id), Ok(svix_id)) = (single(headers, ID), single(headers, SVIX_ID))
        && id != svix_id
    {
        return Err(Rejection::Conflicting(ID, SVIX_ID));
    }
    Ok(&[STANDARD_SET, SVIX_SET])
}

pub fn verify(
    headers: &HeaderMap,
    body: &[u8],
    keys: &[Vec<u8>],
    window: Window,
) -> Result<(), Rejection> {
    sets(headers)?
        .iter()
        .try_for_each(|names| verify_set(headers, *names, body, keys, window))
}

fn verify_set(
    headers: &HeaderMap,
    [id_name, timestamp_name, signature_name]: [&'static str; 3],
    body: &[u8],
    keys: &[Vec<u8>],
    window: Window,
) -> Result<(), Rejection> {
    let id = single(headers, id_name)?;
    let signed_at = timestamp::parse(single(headers, timestamp_name)?)
        .ok_or(Rejection::Malformed(timestamp_name))?;
    let signatures: Vec<Vec<u8>> = single(headers, signature_name)?
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

    /// The Standard Webhooks specification's example delivery; its
    /// signature is also what standardwebhooks 1.3.0's `Webhook.sign` makes.
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

    /// The example delivery as Svix sends it by default.
    fn svix(headers: &HeaderMap) -> HeaderMap {
        let mut svix = HeaderMap::new();
        for (from, to) in [
            (ID, SVIX_ID),
            (TIMESTAMP, SVIX_TIMESTAMP),
            (SIGNATURE, SVIX_SIGNATURE),
        ] {
            svix.insert(to, headers[from].clone());
        }
        svix
    }

    #[test]
    fn svix_headers_verify_alike() {
        let now = at(1614265330);
        let svix_only = svix(&example(GOOD));
        assert_eq!(verify(&svix_only, BODY, &key(), now), Ok(()));
        assert_eq!(
            verify(&svix_only, b"{}", &key(), now),
            Err(Rejection::NoMatch)
        );
        assert_eq!(
            verify(&svix_only, BODY, &key(), at(1614265330 + 301)),
            Err(Rejection::TooOld)
        );
        // Both sets for one event: each is checked, since a consumer's
        // Standard Webhooks library reads the `webhook-` one and Svix's
        // libraries the `svix-` one.
        let mut both = example(GOOD);
        both.extend(svix(&example(GOOD)));
        assert_eq!(verify(&both, BODY, &key(), now), Ok(()));
        let mut forged_svix = example(GOOD);
        forged_svix.extend(svix(&example("v1,Zm9yZ2Vk")));
        assert_eq!(
            verify(&forged_svix, BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
        let mut forged_standard = svix(&example(GOOD));
        forged_standard.extend(example("v1,Zm9yZ2Vk"));
        assert_eq!(
            verify(&forged_standard, BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
        // A `svix-timestamp` out of the window is refused like any other.
        let mut stale_svix = example(GOOD);
        stale_svix.extend(svix(&example(GOOD)));
        stale_svix.insert(SVIX_TIMESTAMP, "1614264000".parse().unwrap());
        assert_eq!(
            verify(&stale_svix, BODY, &key(), now),
            Err(Rejection::NoMatch)
        );
        // Two ids: a route keyed by the unchecked one would run a recorded
        // delivery again under any id.
        let mut other_id = example(GOOD);
        other_id.extend(svix(&example(GOOD)));
        other_id.insert(SVIX_ID, "msg_other".parse().unwrap());
        assert_eq!(
            verify(&other_id, BODY, &key(), now),
            Err(Rejection::Conflicting(ID, SVIX_ID))
        );
        // Half of each set is no set.
        let mut mixed = svix(&example(GOOD));
        mixed.remove(SVIX_SIGNATURE);
        mixed.insert(SIGNATURE, GOOD.parse().unwrap());
        assert_eq!(
            verify(&mixed, BODY, &key(), now),
            Err(Rejection::MissingHeader(SVIX_SIGNATURE))
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
