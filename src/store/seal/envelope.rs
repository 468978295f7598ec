//! The sealed form of a stored answer, and the keys that make and open it.
//!
//! A sealed answer is an ordinary [`StoredResponse`] to every backend, so the
//! embedded file, Postgres and Redis keep it with no code of their own:
//!
//! - `status`, `body_omitted` and `outcome_unknown` stay clear (the admin API
//!   reads the status, and lists and counts outcome-unknown records);
//! - `headers` is one pair, [`SEALED`] → the key id (16 hex digits: the first
//!   8 bytes of SHA-256 over a label and the key, never the key itself). The
//!   name starts with `:`, which no HTTP field name may contain, so no answer
//!   from an upstream can be taken for a sealed one;
//! - `body` is `u8 version (2)`, a 12-byte random nonce, then the AES-256-GCM
//!   ciphertext and tag of `u32 len + headers` (the embedded store's header
//!   codec) followed by the body.
//!
//! The associated data binds the ciphertext to its record (route, scope, key)
//! and to every clear field: the status, `body_omitted` and
//! `outcome_unknown`. A sealed answer copied onto another record, or a clear
//! field altered in the database, does not open. Version 1 (still opened)
//! left `outcome_unknown` out; the version is part of the associated data, so
//! a version 2 answer relabelled 1 does not open either.

use bytes::Bytes;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

use crate::config::StoreKey;
use crate::store::embedded::codec::{decode_headers, encode_headers};
use crate::store::{RecordId, StoredResponse};

/// The one header of a sealed answer; its value is the sealing key's id.
pub const SEALED: &str = ":idemgate-sealed";

/// The envelope sealed now.
const VERSION: u8 = 2;
/// Opened, never sealed: `outcome_unknown` not bound.
const VERSION_1: u8 = 1;
const HEAD: usize = 1 + NONCE_LEN;

/// Why a stored answer could not be opened. Never carries key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Sealed under a key that `store.encryption.keys_env` no longer lists.
    #[error("the stored answer is sealed under key id {key_id}, which no listed key has")]
    UnknownKey { key_id: String },
    /// Sealed, but `[store.encryption]` is off.
    #[error("the stored answer is sealed (key id {key_id}) and store.encryption is off")]
    EncryptionOff { key_id: String },
    /// The key matches by id but the ciphertext does not authenticate:
    /// altered, truncated, or moved from another record.
    #[error("the stored answer sealed under key id {key_id} does not authenticate")]
    Forged { key_id: String },
    /// The sealed mark is there, but not as the one pair a seal writes
    /// (other pairs beside it, a key id that is not text): altered.
    #[error("the stored answer is marked sealed, but its mark was altered")]
    AlteredMark,
    /// An envelope this release does not know: sealed by a newer one (a
    /// rollback), which opens it. Purging would run the request again.
    #[error(
        "the stored answer is sealed (key id {key_id}) in envelope version {version}, which only a newer idemgate opens"
    )]
    SealedByNewer { key_id: String, version: u8 },
}

struct Key {
    id: String,
    aead: LessSafeKey,
}

/// The configured keys: the first seals, every one opens. Empty: answers
/// are stored clear and sealed ones cannot be opened.
pub struct Keys {
    keys: Vec<Key>,
    random: SystemRandom,
}

/// The id a key is known by in stored records and logs.
pub fn key_id(key: &[u8; 32]) -> String {
    let mut hash = Sha256::new();
    hash.update(b"idemgate store key id\0");
    hash.update(key);
    let digest = hash.finalize();
    hex::encode(&digest[..8])
}

impl Keys {
    pub fn new(configured: &[StoreKey]) -> Self {
        let keys = configured
            .iter()
            .filter_map(|key| {
                // 32 bytes is all AES-256 asks: cannot fail.
                let unbound = UnboundKey::new(&AES_256_GCM, &key.bytes).ok()?;
                Some(Key {
                    id: key_id(&key.bytes),
                    aead: LessSafeKey::new(unbound),
                })
            })
            .collect();
        Self {
            keys,
            random: SystemRandom::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The answer sealed under the first key, or `None` when encryption is
    /// off (it is then stored as it is).
    pub fn seal(&self, id: &RecordId, response: &StoredResponse) -> Option<StoredResponse> {
        self.seal_as(VERSION, id, response)
    }

    fn seal_as(
        &self,
        version: u8,
        id: &RecordId,
        response: &StoredResponse,
    ) -> Option<StoredResponse> {
        let key = self.keys.first()?;
        let headers = encode_headers(&response.headers);
        let mut out = Vec::with_capacity(
            HEAD + 4 + headers.len() + response.body.len() + AES_256_GCM.tag_len(),
        );
        out.push(version);
        let mut nonce = [0u8; NONCE_LEN];
        // The system's random source failing is not something to store
        // around: without a fresh nonce there is no safe seal.
        self.random.fill(&mut nonce).ok()?;
        out.extend_from_slice(&nonce);
        let len = u32::try_from(headers.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&headers);
        out.extend_from_slice(&response.body);
        let aad = associated(version, id, response);
        let tag = key
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[HEAD..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(StoredResponse {
            status: response.status,
            headers: StoredResponse::header_list([(SEALED, key.id.clone())]),
            body: Bytes::from(out),
            body_omitted: response.body_omitted,
            outcome_unknown: response.outcome_unknown,
        })
    }

    /// The answer as the upstream gave it: a clear one as it is, a sealed
    /// one opened by the key its id names.
    pub fn open(&self, id: &RecordId, stored: StoredResponse) -> Result<StoredResponse, OpenError> {
        let Some(key_id) = sealed_by(&stored) else {
            // No upstream field is named like the mark: an answer carrying
            // it otherwise than as a seal writes it was sealed, then
            // altered. Taken for clear, its ciphertext would be replayed
            // as the body.
            if stored.headers.iter().any(|(name, _)| name == SEALED) {
                return Err(OpenError::AlteredMark);
            }
            return Ok(stored);
        };
        let key_id = key_id.to_owned();
        if !self.enabled() {
            return Err(OpenError::EncryptionOff { key_id });
        }
        let candidates: Vec<&Key> = self.keys.iter().filter(|k| k.id == key_id).collect();
        if candidates.is_empty() {
            return Err(OpenError::UnknownKey { key_id });
        }
        let forged = || OpenError::Forged {
            key_id: key_id.clone(),
        };
        let version = match stored.body.first() {
            Some(&version @ (VERSION | VERSION_1)) => version,
            Some(&version) if version > VERSION => {
                return Err(OpenError::SealedByNewer { key_id, version });
            }
            _ => return Err(forged()),
        };
        let rest = &stored.body[1..];
        let Some((nonce, _)) = rest.split_first_chunk::<NONCE_LEN>() else {
            return Err(forged());
        };
        let aad = associated(version, id, &stored);
        for key in candidates {
            let mut sealed = stored.body[HEAD..].to_vec();
            let Ok(plain) = key.aead.open_in_place(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(&aad),
                &mut sealed,
            ) else {
                continue;
            };
            let plain_len = plain.len();
            sealed.truncate(plain_len);
            return unpack(sealed, &stored).ok_or_else(forged);
        }
        Err(forged())
    }
}

/// The key id of a sealed answer; `None` for a clear one.
pub fn sealed_by(stored: &StoredResponse) -> Option<&str> {
    match &stored.headers[..] {
        [(name, value)] if name == SEALED => std::str::from_utf8(value).ok(),
        _ => None,
    }
}

fn unpack(plain: Vec<u8>, stored: &StoredResponse) -> Option<StoredResponse> {
    let (len, rest) = plain.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    let headers = decode_headers(rest.get(..len)?).ok()?;
    let body = Bytes::from(plain).slice(4 + len..);
    Some(StoredResponse {
        status: stored.status,
        headers: headers.into(),
        body,
        body_omitted: stored.body_omitted,
        outcome_unknown: stored.outcome_unknown,
    })
}

/// What a sealed answer is bound to: its record and its clear fields, as
/// its envelope `version` binds them.
fn associated(version: u8, id: &RecordId, response: &StoredResponse) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + id.route.len() + id.scope.len() + id.key.len());
    aad.extend_from_slice(if version == VERSION_1 {
        b"idemgate answer v1"
    } else {
        b"idemgate answer v2"
    });
    // Length-prefixed: ("ab","c") and ("a","bc") differ.
    for part in [&id.route, &id.scope, &id.key] {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad.extend_from_slice(&response.status.to_be_bytes());
    aad.push(u8::from(response.body_omitted));
    if version != VERSION_1 {
        aad.push(u8::from(response.outcome_unknown));
    }
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> StoreKey {
        StoreKey {
            env: format!("K{byte}"),
            bytes: [byte; 32],
        }
    }

    fn id() -> RecordId {
        RecordId::new("charges", "scope", "key-1")
    }

    fn answer() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: StoredResponse::header_list(vec![
                ("location", b"/c/1".to_vec()),
                ("x-bin", vec![0, 255]),
            ]),
            body: Bytes::from_static(b"{\"card\":\"MARKER-4242\"}"),
            body_omitted: false,
            outcome_unknown: false,
        }
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn sealed_answers_hide_headers_and_body_and_open_again() {
        let keys = Keys::new(&[key(1)]);
        let sealed = keys.seal(&id(), &answer()).unwrap();
        assert_eq!(sealed.status, 201);
        assert_eq!(sealed_by(&sealed), Some(key_id(&[1; 32]).as_str()));
        assert!(!contains(&sealed.body, b"MARKER-4242"));
        assert!(!contains(&sealed.body, b"/c/1"));
        assert_eq!(keys.open(&id(), sealed).unwrap(), answer());
    }

    #[test]
    fn each_seal_has_a_fresh_nonce() {
        let keys = Keys::new(&[key(1)]);
        let a = keys.seal(&id(), &answer()).unwrap();
        let b = keys.seal(&id(), &answer()).unwrap();
        assert_ne!(a.body, b.body);
    }

    #[test]
    fn omitted_bodies_keep_their_headers_sealed() {
        let keys = Keys::new(&[key(1)]);
        let omitted = StoredResponse {
            body: Bytes::new(),
            body_omitted: true,
            ..answer()
        };
        let sealed = keys.seal(&id(), &omitted).unwrap();
        assert!(sealed.body_omitted);
        assert_eq!(keys.open(&id(), sealed).unwrap(), omitted);
    }

    #[test]
    fn every_listed_key_opens_and_the_first_seals() {
        let old = Keys::new(&[key(1)]);
        let sealed_old = old.seal(&id(), &answer()).unwrap();
        let rotated = Keys::new(&[key(2), key(1)]);
        let sealed_new = rotated.seal(&id(), &answer()).unwrap();
        assert_eq!(sealed_by(&sealed_new), Some(key_id(&[2; 32]).as_str()));
        assert_eq!(rotated.open(&id(), sealed_old).unwrap(), answer());
        assert_eq!(rotated.open(&id(), sealed_new.clone()).unwrap(), answer());
        assert_eq!(
            old.open(&id(), sealed_new).unwrap_err(),
            OpenError::UnknownKey {
                key_id: key_id(&[2; 32])
            }
        );
    }

    #[test]
    fn clear_answers_pass_and_sealed_ones_fail_without_keys() {
        let off = Keys::new(&[]);
        assert!(off.seal(&id(), &answer()).is_none());
        assert_eq!(off.open(&id(), answer()).unwrap(), answer());
        let sealed = Keys::new(&[key(1)]).seal(&id(), &answer()).unwrap();
        assert!(matches!(
            off.open(&id(), sealed),
            Err(OpenError::EncryptionOff { .. })
        ));
    }

    #[test]
    fn moved_or_altered_answers_do_not_open() {
        let keys = Keys::new(&[key(1)]);
        let sealed = keys.seal(&id(), &answer()).unwrap();
        let other = RecordId::new("charges", "scope", "key-2");
        assert!(matches!(
            keys.open(&other, sealed.clone()),
            Err(OpenError::Forged { .. })
        ));
        let restatused = StoredResponse {
            status: 200,
            ..sealed.clone()
        };
        assert!(keys.open(&id(), restatused).is_err());
        let mut body = sealed.body.to_vec();
        let last = body.len() - 1;
        body[last] ^= 1;
        let flipped = StoredResponse {
            body: Bytes::from(body),
            ..sealed.clone()
        };
        assert!(keys.open(&id(), flipped).is_err());
        for cut in 0..HEAD + 2 {
            let short = StoredResponse {
                body: sealed.body.slice(..cut),
                ..sealed.clone()
            };
            assert!(keys.open(&id(), short).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn an_altered_sealed_mark_is_refused_not_taken_for_clear() {
        let keys = Keys::new(&[key(1)]);
        let sealed = keys.seal(&id(), &answer()).unwrap();
        let mut extra = sealed.clone();
        extra.headers = StoredResponse::header_list(vec![
            (SEALED, key_id(&[1; 32]).into_bytes()),
            ("x-extra", b"1".to_vec()),
        ]);
        let mut binary = sealed;
        binary.headers = StoredResponse::header_list(vec![(SEALED, vec![0xff; 16])]);
        for altered in [extra, binary] {
            assert_eq!(
                keys.open(&id(), altered).unwrap_err(),
                OpenError::AlteredMark
            );
        }
    }

    #[test]
    fn an_altered_outcome_unknown_mark_does_not_open() {
        let keys = Keys::new(&[key(1)]);
        for unknown in [false, true] {
            let marked = StoredResponse {
                outcome_unknown: unknown,
                ..answer()
            };
            let sealed = keys.seal(&id(), &marked).unwrap();
            assert_eq!(sealed.body[0], VERSION);
            assert_eq!(keys.open(&id(), sealed.clone()).unwrap(), marked);
            let flipped = StoredResponse {
                outcome_unknown: !unknown,
                ..sealed.clone()
            };
            assert!(matches!(
                keys.open(&id(), flipped),
                Err(OpenError::Forged { .. })
            ));
            // Relabelled as the older envelope, which does not bind the mark.
            let mut body = sealed.body.to_vec();
            body[0] = VERSION_1;
            let relabelled = StoredResponse {
                body: Bytes::from(body),
                ..sealed
            };
            assert!(keys.open(&id(), relabelled).is_err());
        }
    }

    #[test]
    fn answers_sealed_in_the_first_envelope_still_open() {
        let keys = Keys::new(&[key(1)]);
        let marked = StoredResponse {
            outcome_unknown: true,
            ..answer()
        };
        let old = keys.seal_as(VERSION_1, &id(), &marked).unwrap();
        assert_eq!(old.body[0], VERSION_1);
        assert_eq!(keys.open(&id(), old.clone()).unwrap(), marked);
        let mut body = old.body.to_vec();
        body[0] = 3;
        let unknown_version = StoredResponse {
            body: Bytes::from(body),
            ..old
        };
        assert!(keys.open(&id(), unknown_version).is_err());
    }

    /// A release that seals a later envelope, rolled back from: its
    /// answers are refused as the newer release's, never as forged, whose
    /// advice (purge the key) would run the request again.
    #[test]
    fn an_answer_sealed_in_a_later_envelope_is_refused_as_newer_not_forged() {
        let keys = Keys::new(&[key(1)]);
        let sealed = keys.seal(&id(), &answer()).unwrap();
        let mut body = sealed.body.to_vec();
        body[0] = VERSION + 1;
        let later = StoredResponse {
            body: Bytes::from(body),
            ..sealed
        };
        let error = keys.open(&id(), later).unwrap_err();
        assert!(error.to_string().contains("a newer idemgate"), "{error}");
        assert_eq!(
            error,
            OpenError::SealedByNewer {
                key_id: key_id(&[1; 32]),
                version: VERSION + 1
            }
        );
    }

    #[test]
    fn key_ids_never_contain_the_key() {
        let id = key_id(&[7; 32]);
        assert_eq!(id.len(), 16);
        assert!(!id.contains(&hex::encode([7u8; 8])));
        assert_ne!(id, key_id(&[8; 32]));
    }
}
