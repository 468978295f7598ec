//! The `Via` entry a region's gateway appends to a request it forwards
//! (RFC 9110 §7.6.3), and how it tells that a request already passed
//! through it. Gateways that disagree about a key's home, and do not take
//! each other's forwards as a region's (the token differs), would otherwise
//! pass a request back and forth until a timeout, each hop holding a
//! connection (docs/multi-region.md, "Forwarding loops").
//!
//! The entry names the gateway by a pseudonym: the first 8 bytes, as hex,
//! of SHA-256 over "idemgate-via-v1" ‖ len(token) ‖ token ‖ len(region) ‖
//! region (each `len` an 8-byte big-endian byte count). It is always a valid `Via` token (a region's name need not be), it
//! shows no region name to the upstreams a request reaches, it cannot be
//! written by a client that lacks the token, and it does not match another
//! deployment's gateways of the same region names. A gateway only ever looks
//! for its own pseudonym, made with its own token, so a token the regions do
//! not share does not hide a loop.

use http::header::VIA;
use http::{HeaderMap, HeaderValue, Version};
use sha2::{Digest, Sha256};

const DOMAIN: &[u8] = b"idemgate-via-v1";

/// `idemgate-` and 16 hex digits.
pub fn pseudonym(token: &str, region: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    for field in [token, region] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    format!("idemgate-{}", hex::encode(&hasher.finalize()[..8]))
}

/// Whether a `Via` entry of the request names `pseudonym`. Read as bytes:
/// a client's line with obs-text in a comment must not hide the entry this
/// gateway appended to it.
pub fn passed_through(headers: &HeaderMap, pseudonym: &str) -> bool {
    headers
        .get_all(VIA)
        .iter()
        .flat_map(|line| line.as_bytes().split(|b| *b == b','))
        .any(|entry| {
            // received-protocol RWS received-by [ RWS comment ]
            let mut words = entry
                .split(u8::is_ascii_whitespace)
                .filter(|word| !word.is_empty());
            words.next();
            words.next() == Some(pseudonym.as_bytes())
        })
}

/// Appends this gateway's entry to the request's `Via`, after the entries
/// it came with (kept, in order), as one field line: some servers read
/// only the first line of a field. `received` is the protocol the request
/// came in over.
pub fn append(headers: &mut HeaderMap, received: Version, pseudonym: &str) {
    let protocol = match received {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    let mut line = Vec::new();
    for value in headers.get_all(VIA) {
        let value = value.as_bytes().trim_ascii();
        if !value.is_empty() {
            line.extend_from_slice(value);
            line.extend_from_slice(b", ");
        }
    }
    line.extend_from_slice(protocol.as_bytes());
    line.push(b' ');
    line.extend_from_slice(pseudonym.as_bytes());
    // Made of field values, ", " and a token: always a field value itself.
    if let Ok(value) = HeaderValue::from_bytes(&line) {
        headers.insert(VIA, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn via(lines: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(VIA, HeaderValue::from_bytes(line).unwrap());
        }
        headers
    }

    #[test]
    fn the_pseudonym_is_pinned_and_depends_on_token_and_name() {
        let eu = pseudonym("the-region-token", "eu");
        assert_eq!(eu.len(), "idemgate-".len() + 16);
        assert!(eu.starts_with("idemgate-"), "{eu}");
        assert_ne!(eu, pseudonym("the-region-token", "us"));
        assert_ne!(eu, pseudonym("another-token", "eu"));
        // Every gateway of a region makes the same one.
        assert_eq!(eu, pseudonym("the-region-token", "eu"));
        // Pinned: replicas of one region running different versions must
        // know each other's entries.
        assert_eq!(eu, "idemgate-8e8c2801e4724c98");
    }

    #[test]
    fn a_client_s_via_is_kept_and_appended_to() {
        let mut headers = via(&[b"1.0 corp-proxy (Squid)", b" 1.1 cdn "]);
        append(&mut headers, Version::HTTP_11, "idemgate-00");
        assert_eq!(headers.get_all(VIA).iter().count(), 1);
        assert_eq!(
            headers[VIA],
            "1.0 corp-proxy (Squid), 1.1 cdn, 1.1 idemgate-00"
        );

        let mut headers = HeaderMap::new();
        append(&mut headers, Version::HTTP_2, "idemgate-00");
        assert_eq!(headers[VIA], "2 idemgate-00");
    }

    #[test]
    fn only_its_own_entry_counts_as_passed_through() {
        let me = "idemgate-0123456789abcdef";
        for (lines, seen) in [
            (&[&b"1.1 idemgate-0123456789abcdef"[..]][..], true),
            (&[b"1.0 corp, 2 idemgate-0123456789abcdef (x)"], true),
            (&[b"1.0 corp", b"HTTP/1.1 idemgate-0123456789abcdef"], true),
            // obs-text elsewhere on the line does not hide it.
            (
                &[b"1.0 corp (caf\xe9), 1.1 idemgate-0123456789abcdef"],
                true,
            ),
            (&[b"1.1 idemgate-0123456789abcdee"], false),
            (&[b"1.1 idemgate-0123456789abcdef0"], false),
            // A comment naming it is not an entry naming it.
            (&[b"1.1 corp (idemgate-0123456789abcdef)"], false),
            (&[b"idemgate-0123456789abcdef"], false),
            (&[], false),
        ] {
            assert_eq!(passed_through(&via(lines), me), seen, "{lines:?}");
        }
    }
}
