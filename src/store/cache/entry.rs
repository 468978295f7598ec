//! What one Redis value holds: a completed answer and the fingerprint it was
//! given for, so a hit can be checked without asking Postgres.
//!
//! Layout (big-endian): `u8 version`, (version 2 and 3) `u64` expiry in Unix
//! ms, (version 3) `u64` completion in Unix ms, `u32 len + fingerprint`,
//! `u16 status`, `u8` flags (bit 0 body omitted, bit 1, version 3: outcome
//! unknown), `u32 len + headers` (the embedded store's header codec), then
//! the body to the end. Version 1 values (no expiry) still decode: a replica
//! kept in memory needs the expiry, so their answers are replayed but not
//! copied; version 2 values replay without a known age. A binary that knows
//! only versions 1 and 2 reads a version 3 value as a miss and asks Postgres.
//! Any value that does not parse is treated as a miss, never as an answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::store::embedded::codec::{decode_headers, encode_headers};
use crate::store::{RecordId, StoredResponse};

const VERSION: u8 = 3;
const VERSION_WITHOUT_COMPLETION: u8 = 2;
const VERSION_WITHOUT_EXPIRY: u8 = 1;

const BODY_OMITTED: u8 = 1;
const OUTCOME_UNKNOWN: u8 = 2;

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

/// What one value decodes to.
pub struct Entry {
    pub fingerprint: String,
    pub response: StoredResponse,
    /// When the record stops replaying (`None` in a version 1 value).
    pub expires_at: Option<SystemTime>,
    /// When it was completed (`None` before version 3).
    pub completed_at: Option<SystemTime>,
}

pub fn encode(
    fingerprint: &str,
    response: &StoredResponse,
    expires_at: SystemTime,
    completed_at: SystemTime,
) -> Vec<u8> {
    let headers = encode_headers(&response.headers);
    let mut out = Vec::with_capacity(28 + fingerprint.len() + headers.len() + response.body.len());
    out.push(VERSION);
    out.extend_from_slice(&unix_ms(expires_at).to_be_bytes());
    out.extend_from_slice(&unix_ms(completed_at).to_be_bytes());
    put_bytes(&mut out, fingerprint.as_bytes());
    out.extend_from_slice(&response.status.to_be_bytes());
    let mut flags = 0;
    if response.body_omitted {
        flags |= BODY_OMITTED;
    }
    if response.outcome_unknown {
        flags |= OUTCOME_UNKNOWN;
    }
    out.push(flags);
    put_bytes(&mut out, &headers);
    out.extend_from_slice(&response.body);
    out
}

/// The entry, or `None` for anything malformed.
pub fn decode(buf: &[u8]) -> Option<Entry> {
    let (&version, rest) = buf.split_first()?;
    let (expires_at, completed_at, rest) = match version {
        VERSION => {
            let (expires, rest) = take_instant(rest)?;
            let (completed, rest) = take_instant(rest)?;
            (Some(expires), Some(completed), rest)
        }
        VERSION_WITHOUT_COMPLETION => {
            let (expires, rest) = take_instant(rest)?;
            (Some(expires), None, rest)
        }
        VERSION_WITHOUT_EXPIRY => (None, None, rest),
        _ => return None,
    };
    let (fingerprint, rest) = take_bytes(rest)?;
    let (status, rest) = rest.split_first_chunk::<2>()?;
    let (&omitted, rest) = rest.split_first()?;
    let (headers, body) = take_bytes(rest)?;
    Some(Entry {
        fingerprint: String::from_utf8(fingerprint.to_vec()).ok()?,
        response: StoredResponse {
            status: u16::from_be_bytes(*status),
            headers: decode_headers(headers).ok()?.into(),
            body: Bytes::copy_from_slice(body),
            body_omitted: omitted & BODY_OMITTED != 0,
            // Only version 3 has the flag; before it every bit but the
            // first was 0 anyway.
            outcome_unknown: version == VERSION && omitted & OUTCOME_UNKNOWN != 0,
        },
        expires_at,
        completed_at,
    })
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn take_instant(buf: &[u8]) -> Option<(SystemTime, &[u8])> {
    let (ms, rest) = buf.split_first_chunk::<8>()?;
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(u64::from_be_bytes(*ms)))?;
    Some((at, rest))
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
            headers: StoredResponse::header_list(vec![
                ("location", b"/x".to_vec()),
                ("x-bin", vec![0, 255]),
            ]),
            body: Bytes::from_static(b"{\"a\":1}\0\xff"),
            body_omitted: false,
            outcome_unknown: false,
        }
    }

    fn at_ms(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn round_trips_byte_identical() {
        let entry = decode(&encode(
            "fp-1",
            &answer(),
            at_ms(1_700_000_000_123),
            at_ms(1_600_000_000_456),
        ))
        .unwrap();
        assert_eq!(entry.fingerprint, "fp-1");
        assert_eq!(entry.response, answer());
        assert_eq!(entry.expires_at, Some(at_ms(1_700_000_000_123)));
        assert_eq!(entry.completed_at, Some(at_ms(1_600_000_000_456)));
        let omitted = StoredResponse {
            body: Bytes::new(),
            body_omitted: true,
            ..answer()
        };
        assert_eq!(
            decode(&encode("", &omitted, at_ms(1), at_ms(0)))
                .unwrap()
                .response,
            omitted
        );
        let unknown = StoredResponse {
            status: 504,
            outcome_unknown: true,
            ..answer()
        };
        let decoded = decode(&encode("", &unknown, at_ms(1), at_ms(0))).unwrap();
        assert_eq!(decoded.response, unknown);
    }

    /// What a binary before version 3 wrote: still replayed, age unknown.
    #[test]
    fn version_2_values_decode_without_completion() {
        let mut v2 = encode("fp", &answer(), at_ms(5), at_ms(3));
        v2.drain(9..17);
        v2[0] = 2;
        let entry = decode(&v2).unwrap();
        assert_eq!(entry.expires_at, Some(at_ms(5)));
        assert_eq!(entry.completed_at, None);
        assert_eq!(entry.response, answer());
    }

    #[test]
    fn version_1_values_decode_without_expiry() {
        let mut v1 = encode("fp", &answer(), at_ms(5), at_ms(3));
        v1.drain(1..17);
        v1[0] = 1;
        let entry = decode(&v1).unwrap();
        assert_eq!((entry.fingerprint.as_str(), entry.expires_at), ("fp", None));
        assert_eq!(entry.response, answer());
    }

    #[test]
    fn malformed_values_are_misses() {
        let good = encode("fp", &answer(), at_ms(5), at_ms(3));
        assert!(decode(&[]).is_none());
        assert!(decode(&[3]).is_none());
        for cut in 1..28 {
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
