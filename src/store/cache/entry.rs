//! What one Redis value holds: a completed answer and the fingerprint it was
//! given for, so a hit can be checked without asking Postgres.
//!
//! Layout (big-endian): `u8 version`, `u32 len + fingerprint`, `u16 status`,
//! `u8 body_omitted`, `u32 len + headers` (the embedded store's header codec),
//! then the body to the end. Any value that does not parse is treated as a
//! miss, never as an answer.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::store::embedded::codec::{decode_headers, encode_headers};
use crate::store::{RecordId, StoredResponse};

const VERSION: u8 = 1;

/// `prefix` + `a:` + hex SHA-256 of the record id: bounded length whatever
/// the key, and no raw idempotency key in Redis.
pub fn key(prefix: &str, id: &RecordId) -> String {
    format!("{prefix}a:{}", hex::encode(id_hash(id)))
}

fn id_hash(id: &RecordId) -> [u8; 32] {
    let mut hash = Sha256::new();
    // Length-prefixed parts: ("ab","c") and ("a","bc") hash differently.
    for part in [&id.route, &id.scope, &id.key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

pub fn encode(fingerprint: &str, response: &StoredResponse) -> Vec<u8> {
    let headers = encode_headers(&response.headers);
    let mut out = Vec::with_capacity(12 + fingerprint.len() + headers.len() + response.body.len());
    out.push(VERSION);
    put_bytes(&mut out, fingerprint.as_bytes());
    out.extend_from_slice(&response.status.to_be_bytes());
    out.push(u8::from(response.body_omitted));
    put_bytes(&mut out, &headers);
    out.extend_from_slice(&response.body);
    out
}

/// `(fingerprint, answer)`, or `None` for anything malformed.
pub fn decode(buf: &[u8]) -> Option<(String, StoredResponse)> {
    let (&version, rest) = buf.split_first()?;
    if version != VERSION {
        return None;
    }
    let (fingerprint, rest) = take_bytes(rest)?;
    let (status, rest) = rest.split_first_chunk::<2>()?;
    let (&omitted, rest) = rest.split_first()?;
    let (headers, body) = take_bytes(rest)?;
    Some((
        String::from_utf8(fingerprint.to_vec()).ok()?,
        StoredResponse {
            status: u16::from_be_bytes(*status),
            headers: decode_headers(headers).ok()?,
            body: Bytes::copy_from_slice(body),
            body_omitted: omitted != 0,
        },
    ))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Fingerprints and header blocks are far below 4 GiB; saturate, never wrap
    // (a saturated length then fails to decode: a miss).
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

fn take_bytes(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = buf.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![
                ("location".into(), b"/x".to_vec()),
                ("x-bin".into(), vec![0, 255]),
            ],
            body: Bytes::from_static(b"{\"a\":1}\0\xff"),
            body_omitted: false,
        }
    }

    #[test]
    fn round_trips_byte_identical() {
        let (fp, got) = decode(&encode("fp-1", &answer())).unwrap();
        assert_eq!(fp, "fp-1");
        assert_eq!(got, answer());
        let omitted = StoredResponse {
            body: Bytes::new(),
            body_omitted: true,
            ..answer()
        };
        assert_eq!(decode(&encode("", &omitted)).unwrap().1, omitted);
    }

    #[test]
    fn malformed_values_are_misses() {
        let good = encode("fp", &answer());
        assert!(decode(&[]).is_none());
        assert!(decode(&[2]).is_none());
        for cut in 1..12 {
            assert!(decode(&good[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn keys_are_prefixed_hashes_distinct_per_part() {
        let id = |route: &str, scope: &str, key: &str| RecordId {
            route: route.into(),
            scope: scope.into(),
            key: key.into(),
        };
        let k = key("p:", &id("r", "s", "k"));
        assert!(k.starts_with("p:a:") && k.len() == 4 + 64, "{k}");
        assert_ne!(k, key("p:", &id("r", "sk", "")));
        assert_ne!(k, key("p:", &id("rs", "", "k")));
    }
}
