//! The two headers a region's gateway adds when it forwards, and how a
//! gateway tells them from a client's.

use http::{HeaderMap, HeaderName};
use subtle::ConstantTimeEq;

use super::Regions;
use crate::log_limit::LogLimit;

pub const FORWARDED_FROM: HeaderName = HeaderName::from_static("idempotency-forwarded-from");
pub const REGION_TOKEN: HeaderName = HeaderName::from_static("idempotency-region-token");

/// Whether the request comes from another region's gateway: it carries the
/// valid token (one field, compared in constant time). The token never goes
/// further; `Idempotency-Forwarded-From` stays for the upstream to see.
/// Without the valid token both headers are removed, so a client cannot make
/// its request look forwarded, nor pass a region's name to the upstream.
pub fn admit(regions: &Regions, headers: &mut HeaderMap) -> bool {
    if !headers.contains_key(&REGION_TOKEN) {
        headers.remove(&FORWARDED_FROM);
        return false;
    }
    let mut tokens = headers.get_all(&REGION_TOKEN).iter();
    let valid = match (tokens.next(), tokens.next()) {
        (Some(token), None) => bool::from(token.as_bytes().ct_eq(regions.token.as_bytes())),
        _ => false,
    };
    headers.remove(&REGION_TOKEN);
    if !valid {
        warn_if_a_region_sent_it(regions, headers);
        headers.remove(&FORWARDED_FROM);
    }
    valid
}

/// A refused token that names another region of the list as its sender is
/// most likely that region's gateway holding another token (a rotation done
/// in one region only): harmless while the regions agree on their list (the
/// request is handled here, as a client's), but worth an operator's look.
/// Anything else is a client's and stays at debug.
fn warn_if_a_region_sent_it(regions: &Regions, headers: &HeaderMap) {
    let from = headers
        .get(&FORWARDED_FROM)
        .and_then(|value| value.to_str().ok())
        .and_then(|name| regions.names.iter().find(|known| ***known == *name))
        .filter(|name| **name != regions.this);
    let Some(from) = from else {
        tracing::debug!("region headers without the valid region token removed");
        return;
    };
    static LIMIT: LogLimit = LogLimit::uncounted();
    if let Some(left_out) = LIMIT.admit(from) {
        tracing::warn!(
            from = %from,
            not_logged = left_out.count(),
            "a request forwarded from region {from} carried a region token this gateway does \
             not hold (that region's gateway has another region.token_env value, or a client \
             forged the headers); handled here as a client's request{left_out}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RegionPeerConfig, RegionsConfig};
    use std::collections::BTreeMap;
    use std::time::Duration;

    pub fn regions() -> Regions {
        let peer = |name: &str| RegionPeerConfig {
            name: name.into(),
            gateway: "http://127.0.0.1:9".into(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            ca: None,
            http2: false,
        };
        let mut peers = BTreeMap::new();
        peers.insert("eu".to_owned(), peer("eu"));
        peers.insert("us".to_owned(), peer("us"));
        let config = RegionsConfig {
            name: "eu".into(),
            token_env: "T".into(),
            token: "the-region-token".into(),
            peers,
        };
        Regions::from_config(&config).unwrap()
    }

    fn headers(fields: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer client".parse().unwrap());
        for (name, value) in fields {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_valid_token_admits_and_goes_no_further() {
        let regions = regions();
        let mut h = headers(&[(&REGION_TOKEN, "the-region-token"), (&FORWARDED_FROM, "us")]);
        assert!(admit(&regions, &mut h));
        assert!(!h.contains_key(&REGION_TOKEN));
        assert_eq!(h[&FORWARDED_FROM], "us");
        assert_eq!(h["authorization"], "Bearer client");
    }

    #[test]
    fn forged_headers_are_removed() {
        let regions = regions();
        for forged in [
            headers(&[(&REGION_TOKEN, "guess"), (&FORWARDED_FROM, "us")]),
            headers(&[
                (&REGION_TOKEN, "the-region-token-"),
                (&FORWARDED_FROM, "us"),
            ]),
            headers(&[(&REGION_TOKEN, "the-region-toke")]),
            headers(&[(&FORWARDED_FROM, "us")]),
            headers(&[
                (&REGION_TOKEN, "the-region-token"),
                (&REGION_TOKEN, "the-region-token"),
            ]),
        ] {
            let mut h = forged;
            assert!(!admit(&regions, &mut h), "{h:?}");
            assert!(!h.contains_key(&REGION_TOKEN), "{h:?}");
            assert!(!h.contains_key(&FORWARDED_FROM), "{h:?}");
            assert_eq!(h["authorization"], "Bearer client");
        }
    }
}
