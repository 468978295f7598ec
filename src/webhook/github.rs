//! GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`. GitHub
//! signs the body only, not a timestamp nor `X-GitHub-Delivery`: a recorded
//! delivery verifies forever, and under a new delivery id it is a new key
//! (docs/webhooks.md).

use http::HeaderMap;

use super::headers::single;
use super::{Rejection, mac};

const SIGNATURE: &str = "x-hub-signature-256";
/// Every header the signature covers or carries.
pub const SIGNED: &[&str] = &[SIGNATURE];

pub fn verify(headers: &HeaderMap, body: &[u8], keys: &[Vec<u8>]) -> Result<(), Rejection> {
    let signature = single(headers, SIGNATURE)?
        .strip_prefix("sha256=")
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or(Rejection::Malformed(SIGNATURE))?;
    match mac::any_matches(keys, &[body], [signature.as_slice()].into_iter()) {
        true => Ok(()),
        false => Err(Rejection::NoMatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example ("Validating webhook deliveries"), also
    /// what @octokit/webhooks-methods 6.0.0's `sign` makes.
    #[test]
    fn the_documented_example_verifies() {
        let mut headers = HeaderMap::new();
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        headers.insert(SIGNATURE, good.parse().unwrap());
        let keys = vec![b"It's a Secret to Everybody".to_vec()];
        assert_eq!(verify(&headers, b"Hello, World!", &keys), Ok(()));
        assert_eq!(
            verify(&headers, b"Hello, World?", &keys),
            Err(Rejection::NoMatch)
        );
        assert_eq!(
            verify(&headers, b"Hello, World!", &[b"other".to_vec()]),
            Err(Rejection::NoMatch)
        );
        headers.insert(SIGNATURE, good.replace("sha256=", "sha1=").parse().unwrap());
        assert_eq!(
            verify(&headers, b"Hello, World!", &keys),
            Err(Rejection::Malformed(SIGNATURE))
        );
    }
}
