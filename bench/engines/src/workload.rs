//! What one logical request writes: its identity (route, key, scope), the
//! in-flight record a reservation inserts, and the answer a completion
//! stores. Sizes follow bench/run's upstream (src/store/embedded/ops.rs for
//! the statements, bench/lib.sh for the answer).

/// The route every request is on, as in bench/lib.sh's gateway config.
pub const ROUTE: &str = "charges";

/// A single-tenant route's scope: the same hash for every record
/// (src/store/embedded/schema.rs). SHA-256 of the empty scope.
pub const SCOPE: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// Retention of a completed answer (the gateway's default, 24 h), and a
/// lease (`lock_timeout` in bench/lib.sh, 30 s), in milliseconds.
pub const RETAIN_MS: i64 = 24 * 3600 * 1000;
pub const LEASE_MS: i64 = 30 * 1000;

/// An idempotency key as clients send it: a UUID v4, 36 ASCII characters.
pub type Key = [u8; 36];

/// A request body's fingerprint (SHA-256).
pub type Fingerprint = [u8; 32];

/// The store's fencing token and the record's row where the engine has one
/// (SQLite's rowid), as a reservation hands them to its completion.
#[derive(Clone, Copy, Debug)]
pub struct Lease {
    pub token: u64,
    pub row: i64,
}

/// One job for the writer thread.
pub enum Job {
    Reserve { key: Key, fingerprint: Fingerprint },
    Complete { key: Key, lease: Lease },
}

/// What a job did.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Reserved(Lease),
    /// The key had a record: nothing written (a replay or a 409 in the gateway).
    Exists,
    Completed,
    /// The record no longer carries the lease's token.
    Fenced,
}

/// The upstream's answer as the store keeps it: 201, ~200 bytes of headers in
/// the gateway's encoding (src/store/embedded/codec.rs), ~300 bytes of JSON.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<u8>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn typical() -> Answer {
        let headers: [(&str, &str); 5] = [
            ("content-type", "application/json"),
            ("location", "/v1/charges/ch_3NQ9x2LkdIwHu7ix0Zq1"),
            ("date", "Thu, 03 Dec 2026 18:00:00 GMT"),
            ("x-request-id", "req_8d5f0c7e9a2b4c1d8e3f6a7b"),
            ("cache-control", "no-store"),
        ];
        let mut encoded = Vec::new();
        encoded.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            encoded.extend_from_slice(&(name.len() as u32).to_be_bytes());
            encoded.extend_from_slice(name.as_bytes());
            encoded.extend_from_slice(&(value.len() as u32).to_be_bytes());
            encoded.extend_from_slice(value.as_bytes());
        }
        let body = br#"{"id":"ch_3NQ9x2LkdIwHu7ix0Zq1","object":"charge","amount":1000,"amount_captured":1000,"currency":"eur","customer":"cus_42","status":"succeeded","created":1700000000,"livemode":false,"paid":true,"payment_method":"pm_1NQ9x2LkdIwHu7ix","receipt_url":"https://pay.example/receipts/ch_3NQ9x2","description":"benchmark charge"}"#;
        Answer {
            status: 201,
            headers: encoded,
            body: body.to_vec(),
        }
    }
}

/// A record written in bulk before a measurement: completed at `created_at`,
/// expiring a retention later.
pub struct Prefilled {
    pub key: Key,
    pub fingerprint: Fingerprint,
    pub token: u64,
    pub created_at: i64,
}

/// splitmix64: a seeded stream of random bits, so that every engine gets
/// the same keys and a prefilled key can be generated again for lookups.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn bytes16(&mut self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        out[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        out
    }

    /// A random UUID v4 in its 36-character text form.
    pub fn key(&mut self) -> Key {
        let uuid = uuid::Builder::from_random_bytes(self.bytes16()).into_uuid();
        let mut key = [0; 36];
        uuid.hyphenated().encode_lower(&mut key);
        key
    }

    pub fn fingerprint(&mut self) -> Fingerprint {
        let mut out = [0; 32];
        out[..16].copy_from_slice(&self.bytes16());
        out[16..].copy_from_slice(&self.bytes16());
        out
    }
}

/// The prefilled records of a store of `count`, oldest first: record `i` was
/// created `count - i` milliseconds before `now`, so the expiry order is the
/// creation order while the keys are random, as in a store that has run.
pub fn prefilled(count: u64, now: i64) -> impl Iterator<Item = Prefilled> {
    let mut random = Random::new(PREFILL_SEED);
    (0..count).map(move |i| Prefilled {
        key: random.key(),
        fingerprint: random.fingerprint(),
        token: i + 1,
        created_at: now - (count - i) as i64,
    })
}

/// Every `step`-th prefilled key, for the replay pass.
pub fn prefilled_sample(count: u64, step: u64) -> Vec<Key> {
    let mut random = Random::new(PREFILL_SEED);
    let mut keys = Vec::new();
    for i in 0..count {
        let key = random.key();
        let _ = random.fingerprint();
        if i % step == 0 {
            keys.push(key);
        }
    }
    keys
}

const PREFILL_SEED: u64 = 0x1de3_9a7e;

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
