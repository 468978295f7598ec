//! What one Redis value holds: a completed answer and the fingerprint it was
//! given for, so a hit can be checked without asking Postgres.
//!
//! Layout (big-endian): `u8 version` (4), a SHA-256 digest (of the store's
//! identity, `PostgresStore::identity`; of the record's id, as hashed for
//! the key's name; and of everything after the digest), `u64` expiry in Unix
//! ms, `u64` completion in Unix ms, `u32 len + fingerprint`, `u16 status`,
//! `u8` flags (bit 0 body omitted, bit 1 outcome unknown), `u32 len +
//! headers` (the embedded store's header codec), then the body to the end.
//!
//! The digest makes a damaged value (truncated, edited by hand, a byte
//! flipped) a miss rather than an answer: without it a value cut short in
//! its body would still parse, and replay a shorter body as the record's. The
//! id in it makes a value copied under another record's name a miss too (two
//! keys with the same request have the same fingerprint), and the store's
//! identity one that another deployment wrote under the same name (one Redis
//! and one `key_prefix` shared by mistake; the same webhook event sent to
//! two services): its record is not this store's.
//!
//! Values of earlier versions carry no digest, so they are misses too:
//! Postgres answers and the replay rewrites them in this version. A binary
//! that knows only those reads a version 4 value as a miss and asks
//! Postgres. Any value that does not parse is treated as a miss, never as an
//! answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::store::embedded::codec::{decode_headers, encode_headers};
use crate::store::{RecordId, StoredResponse};

const VERSION: u8 = 4;
const DIGEST: usize = 32;

const BODY_OMITTED: u8 = 1;
const OUTCOME_UNKNOWN: u8 = 2;

/// What a purge leaves under a purged copy's name, for [`PURGED_FOR`]: not
/// an answer (it does not decode: a miss), and a value, so that a replay
/// Postgres served just before the purge committed, written back with `NX`
/// just after, does not land and bring the purged answer back until its TTL.
/// A completion writes over it; a replay of a new record replaces it as it
/// replaces any value it cannot use. Each mark is its own (`purged:` and a
/// random UUID): a replacement that read one purge's mark must not land
/// over a later purge's (compare-and-set).
pub fn purged_mark() -> Vec<u8> {
    format!("purged:{}", uuid::Uuid::new_v4().simple()).into_bytes()
}

/// How long a purge's mark stays: far longer than a write-back takes from
/// its read of Postgres (one Redis call, bounded by its 200 ms deadline).
pub const PURGED_FOR: Duration = Duration::from_secs(60);

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
    /// When the record stops replaying.
    pub expires_at: SystemTime,
    /// When it was completed.
    pub completed_at: SystemTime,
}

pub fn encode(
    store: &str,
    id: &RecordId,
    fingerprint: &str,
    response: &StoredResponse,
    expires_at: SystemTime,
    completed_at: SystemTime,
) -> Vec<u8> {
    let headers = encode_headers(&response.headers);
    let mut out = Vec::with_capacity(
        1 + DIGEST + 27 + fingerprint.len() + headers.len() + response.body.len(),
    );
    out.push(VERSION);
    out.extend_from_slice(&[0; DIGEST]);
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
    let sum = digest(store, id, &out[1 + DIGEST..]);
    out[1..=DIGEST].copy_from_slice(sum.as_ref());
    out
}

/// The entry, or `None` for anything malformed, damaged or of an earlier
/// version.
pub fn decode(store: &str, id: &RecordId, buf: &[u8]) -> Option<Entry> {
    let (&version, rest) = buf.split_first()?;
    if version != VERSION {
        return None;
    }
    let (sum, rest) = rest.split_first_chunk::<DIGEST>()?;
    if digest(store, id, rest).as_ref() != sum.as_slice() {
        return None;
    }
    let (expires_at, rest) = take_instant(rest)?;
    let (completed_at, rest) = take_instant(rest)?;
    let (fingerprint, rest) = take_bytes(rest)?;
    let (status, rest) = rest.split_first_chunk::<2>()?;
    let (&flags, rest) = rest.split_first()?;
    let (headers, body) = take_bytes(rest)?;
    Some(Entry {
        fingerprint: String::from_utf8(fingerprint.to_vec()).ok()?,
        response: StoredResponse {
            status: u16::from_be_bytes(*status),
            headers: decode_headers(headers).ok()?.into(),
            body: Bytes::copy_from_slice(body),
            body_omitted: flags & BODY_OMITTED != 0,
            outcome_unknown: flags & OUTCOME_UNKNOWN != 0,
        },
        expires_at,
        completed_at,
    })
}

/// SHA-256 (ring's, which uses the CPU's instructions for it: a hit hashes
/// its whole body).
fn digest(store: &str, id: &RecordId, bytes: &[u8]) -> ring::digest::Digest {
    let mut sum = ring::digest::Context::new(&ring::digest::SHA256);
    sum.update(&(store.len() as u64).to_be_bytes());
    sum.update(store.as_bytes());
    sum.update(&id_hash(id));
    sum.update(bytes);
    sum.finish()
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

    #[test]
    fn a_purge_mark_is_no_answer_and_each_is_its_own() {
        let id = RecordId::new("orders", "scope", "k");
        let mark = purged_mark();
        assert!(decode("store", &id, &mark).is_none());
        assert_ne!(mark, purged_mark());
    }

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

    const STORE: &str = "db/schema/1";

    fn id() -> RecordId {
        RecordId::new("r", "s", "k")
    }

    fn at_ms(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn round_trips_byte_identical() {
        let entry = decode(
            STORE,
            &id(),
            &encode(
                STORE,
                &id(),
                "fp-1",
                &answer(),
                at_ms(1_700_000_000_123),
                at_ms(1_600_000_000_456),
            ),
        )
        .unwrap();
        assert_eq!(entry.fingerprint, "fp-1");
        assert_eq!(entry.response, answer());
        assert_eq!(entry.expires_at, at_ms(1_700_000_000_123));
        assert_eq!(entry.completed_at, at_ms(1_600_000_000_456));
        let omitted = StoredResponse {
            body: Bytes::new(),
            body_omitted: true,
            ..answer()
        };
        assert_eq!(
            decode(
                STORE,
                &id(),
                &encode(STORE, &id(), "", &omitted, at_ms(1), at_ms(0))
            )
            .unwrap()
            .response,
            omitted
        );
        let unknown = StoredResponse {
            status: 504,
            outcome_unknown: true,
            ..answer()
        };
        let decoded = decode(
            STORE,
            &id(),
            &encode(STORE, &id(), "", &unknown, at_ms(1), at_ms(0)),
        )
        .unwrap();
        assert_eq!(decoded.response, unknown);
    }

    /// Every cut is a miss: one inside the body still parses (the body runs
    /// to the end), and without the digest would replay the shorter body.
    #[test]
    fn truncated_or_altered_values_are_misses() {
        let good = encode(STORE, &id(), "fp", &answer(), at_ms(5), at_ms(3));
        assert!(decode(STORE, &id(), &[]).is_none());
        assert!(decode(STORE, &id(), &[VERSION]).is_none());
        for cut in 1..good.len() {
            assert!(decode(STORE, &id(), &good[..cut]).is_none(), "cut at {cut}");
        }
        for at in 1..good.len() {
            let mut altered = good.clone();
            altered[at] ^= 0x20;
            assert!(
                decode(STORE, &id(), &altered).is_none(),
                "byte {at} altered"
            );
        }
        let mut longer = good.clone();
        longer.push(b'!');
        assert!(decode(STORE, &id(), &longer).is_none());
        let another = RecordId::new("r", "s", "k2");
        assert!(
            decode(STORE, &another, &good).is_none(),
            "another record's value"
        );
        assert!(
            decode("db/schema/2", &id(), &good).is_none(),
            "another store's value"
        );
    }

    /// Earlier versions carry no digest: they cannot be told from damaged
    /// ones, so Postgres answers and the value is rewritten.
    #[test]
    fn values_of_earlier_versions_are_misses() {
        let good = encode(STORE, &id(), "fp", &answer(), at_ms(5), at_ms(3));
        for version in 1..VERSION {
            let mut old = good.clone();
            old.drain(1..=DIGEST);
            old[0] = version;
            assert!(decode(STORE, &id(), &old).is_none(), "version {version}");
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
