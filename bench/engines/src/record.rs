//! The record as the key-value candidates store it, and their index keys.
//! One value per record, the fields of src/store/embedded/schema.rs's table.

use crate::workload::{Fingerprint, Key, ROUTE, SCOPE};

pub const IN_FLIGHT: u8 = 0;
pub const COMPLETED: u8 = 1;

pub struct Record<'a> {
    pub state: u8,
    pub outcome_unknown: bool,
    pub token: u64,
    pub fingerprint: Fingerprint,
    pub created_at: i64,
    pub completed_at: i64,
    pub expires_at: i64,
    pub lease_expires_at: i64,
    pub status: u16,
    pub headers: &'a [u8],
    pub body: &'a [u8],
}

const FIXED: usize = 1 + 1 + 8 + 32 + 8 * 4 + 2 + 4;

impl<'a> Record<'a> {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED + self.headers.len() + self.body.len());
        out.push(self.state);
        out.push(u8::from(self.outcome_unknown));
        out.extend_from_slice(&self.token.to_be_bytes());
        out.extend_from_slice(&self.fingerprint);
        for at in [
            self.created_at,
            self.completed_at,
            self.expires_at,
            self.lease_expires_at,
        ] {
            out.extend_from_slice(&at.to_be_bytes());
        }
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        out.extend_from_slice(self.headers);
        out.extend_from_slice(self.body);
        out
    }

    pub fn decode(bytes: &'a [u8]) -> anyhow::Result<Record<'a>> {
        anyhow::ensure!(bytes.len() >= FIXED, "record too short");
        let u64_at =
            |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let i64_at = |at: usize| u64_at(at) as i64;
        let headers_len =
            u32::from_be_bytes(bytes[FIXED - 4..FIXED].try_into().unwrap_or_default()) as usize;
        anyhow::ensure!(
            bytes.len() >= FIXED + headers_len,
            "record headers cut short"
        );
        Ok(Record {
            state: bytes[0],
            outcome_unknown: bytes[1] != 0,
            token: u64_at(2),
            fingerprint: bytes[10..42].try_into().unwrap_or_default(),
            created_at: i64_at(42),
            completed_at: i64_at(50),
            expires_at: i64_at(58),
            lease_expires_at: i64_at(66),
            status: u16::from_be_bytes([bytes[74], bytes[75]]),
            headers: &bytes[FIXED..FIXED + headers_len],
            body: &bytes[FIXED + headers_len..],
        })
    }
}

/// The primary key: route, key, scope (src/store/embedded/schema.rs's order).
pub fn record_key(key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(ROUTE.len() + 1 + key.len() + 1 + SCOPE.len());
    out.extend_from_slice(ROUTE.as_bytes());
    out.push(0);
    out.extend_from_slice(key);
    out.push(0);
    out.extend_from_slice(&SCOPE);
    out
}

/// The listing index (route, state, outcome_unknown, created_at, key, scope);
/// its value is the expiry, as the SQLite index carries it.
pub fn listing_key(state: u8, outcome_unknown: bool, created_at: i64, key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(ROUTE.len() + 11 + key.len() + 1 + SCOPE.len());
    out.extend_from_slice(ROUTE.as_bytes());
    out.push(0);
    out.push(state);
    out.push(u8::from(outcome_unknown));
    out.extend_from_slice(&(created_at as u64).to_be_bytes());
    out.extend_from_slice(key);
    out.push(0);
    out.extend_from_slice(&SCOPE);
    out
}

/// The expiry index: expires_at first, then the record's primary key.
pub fn expiry_key(expires_at: i64, key: &Key) -> Vec<u8> {
    let mut out = (expires_at as u64).to_be_bytes().to_vec();
    out.extend_from_slice(&record_key(key));
    out
}

/// The idempotency key back out of an expiry index key.
pub fn key_of_expiry(expiry: &[u8]) -> anyhow::Result<Key> {
    let start = 8 + ROUTE.len() + 1;
    expiry
        .get(start..start + 36)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| anyhow::anyhow!("malformed expiry key"))
}
