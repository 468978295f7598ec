//! Recently replayed answers kept in memory in front of any store, so a
//! replay costs no trip to the SQLite thread, to Redis or to Postgres.
//!
//! Completed records never change until they expire or are purged. A copy
//! never outlives its record's expiry, and every purge made through this
//! process drops its copies at once; on Postgres, so does every other
//! replica's purge, as soon as its notification arrives (`postgres::purges`);
//! on the embedded store, another process's commit to the file
//! (`embedded::writes_elsewhere`). A purge this process does not hear of (a
//! notification lost with its connection) is seen within [`MAX_AGE`], the
//! longest any copy is served without asking the store again. Such a late
//! copy can only replay an answer that was final: it never lets a request
//! run twice.
//!
//! What the copies cannot answer is read from the store once for all the
//! lookups of a record that arrive while the read runs (`replay_flight`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::replay_flight::{Flights, Outcome, Turn};
use super::{Kept, Lease, RecordId, RecordInfo, Reservation, Store, StoreError, StoredResponse};

/// Longest time an entry is served without asking the store again.
pub const MAX_AGE: Duration = Duration::from_secs(5);

struct Entry {
    fingerprint: String,
    response: StoredResponse,
    /// The record's own expiry (by this process's clock) or `MAX_AGE` from
    /// insertion, whichever is first.
    until: SystemTime,
    /// The record's own expiry as the store wrote it, told with a replay
    /// (`expiry_header`): the copy's shorter life is this process's business.
    expires_at: SystemTime,
    /// The same by this process's clock (`Kept::expires_here`).
    expires_here: SystemTime,
    /// When the record was completed, from its age when copied (`None`
    /// when the store could not tell).
    completed_at: Option<SystemTime>,
    bytes: usize,
}

#[derive(Default)]
struct Entries {
    /// foldhash, not SipHash: a lookup hashes the route, the scope hash and
    /// the key (~100 bytes) on every replay. Still seeded per process.
    map: foldhash::HashMap<RecordId, Entry>,
    bytes: usize,
}

/// The copies themselves, shared with whoever learns of purges made
/// elsewhere (the Postgres store's purge listener).
pub struct Copies {
    entries: Mutex<Entries>,
    max_bytes: usize,
    /// Bumped by every purge: a copy read from the store before a purge must
    /// not be remembered after it.
    generation: AtomicU64,
}

pub struct ReplayCache<S> {
    inner: S,
    copies: Arc<Copies>,
    /// The store reads of records running now, each shared by the lookups
    /// that arrive while it runs.
    flights: Flights,
    /// Whatever keeps `copies` told of purges made elsewhere; stopped with us.
    _purge_listener: Option<tokio_util::sync::DropGuard>,
}

impl<S: Store> ReplayCache<S> {
    pub fn new(inner: S, max_bytes: usize) -> Self {
        Self::with_copies(inner, Arc::new(Copies::new(max_bytes)), None)
    }

    /// With copies shared with a purge listener, which stops when this
    /// cache is dropped (`listener`).
    pub fn with_copies(
        inner: S,
        copies: Arc<Copies>,
        listener: Option<tokio_util::sync::DropGuard>,
    ) -> Self {
        Self {
            inner,
            copies,
            flights: Flights::default(),
            _purge_listener: listener,
        }
    }
}

impl Copies {
    pub fn new(max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(Entries::default()),
            max_bytes,
            generation: AtomicU64::new(0),
        }
    }

    fn lookup(&self, id: &RecordId, fingerprint: &str) -> Option<(Reservation, Option<Kept>)> {
        let mut entries = self.entries.lock().ok()?;
        let now = SystemTime::now();
        let entry = entries.map.get(id)?;
        if entry.until <= now {
            if let Some(gone) = entries.map.remove(id) {
                entries.bytes -= gone.bytes;
            }
            return None;
        }
        Some(if entry.fingerprint == fingerprint {
            (
                Reservation::Completed(entry.response.clone()),
                Some(Kept {
                    expires_at: entry.expires_at,
                    expires_here: entry.expires_here,
                    age: entry
                        .completed_at
                        .map(|at| now.duration_since(at).unwrap_or_default()),
                }),
            )
        } else {
            (Reservation::Mismatch, None)
        })
    }

    fn remember(
        &self,
        generation: u64,
        id: &RecordId,
        fingerprint: &str,
        response: &StoredResponse,
        kept: Kept,
    ) {
        let text = response.body.len()
            + response
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
            + fingerprint.len()
            + id.key.len();
        if text > self.max_bytes / 8 {
            return;
        }
        let bytes = text + id.scope.len() + held_beside(response.headers.len());
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if self.generation.load(Ordering::SeqCst) != generation {
            return;
        }
        if entries.bytes + bytes > self.max_bytes {
            evict(&mut entries, self.max_bytes * 3 / 4);
        }
        let now = SystemTime::now();
        let entry = Entry {
            fingerprint: fingerprint.to_string(),
            response: response.clone(),
            until: kept.expires_here.min(now + MAX_AGE),
            expires_at: kept.expires_at,
            expires_here: kept.expires_here,
            completed_at: kept.age.map(|age| now.checked_sub(age).unwrap_or(now)),
            bytes,
        };
        entries.bytes += bytes;
        if let Some(old) = entries.map.insert(id.clone(), entry) {
            entries.bytes -= old.bytes;
        }
    }

    /// Drops every copy of this key (all scopes).
    pub fn forget(&self, route: &str, key: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            self.generation.fetch_add(1, Ordering::SeqCst);
            let Entries { map, bytes } = &mut *entries;
            map.retain(|id, entry| {
                let keep = !(&*id.route == route && &*id.key == key);
                if !keep {
                    *bytes -= entry.bytes;
                }
                keep
            });
        }
    }

    /// Drops every copy: purges may have been missed (the listener that
    /// hears of them was disconnected), or made by another process that
    /// does not say which (on the embedded store's file).
    pub fn forget_all(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            self.generation.fetch_add(1, Ordering::SeqCst);
            *entries = Entries::default();
        }
    }
}

/// What an entry holds beside its text (answer, fingerprint, key, scope):
/// its slot in the map, which keeps up to 16/7 slots per entry (it grows by
/// doubling at 7/8 full, and is shrunk to fit after an eviction), and its
/// allocations (scope, key, fingerprint, header list, each header's name,
/// body), each rounded up by the allocator. Without them a small answer's
/// copy was counted at a quarter of what it held, and the 8 MiB of copies
/// took some 30 MiB.
fn held_beside(headers: usize) -> usize {
    const ALLOCATION: usize = 32;
    let slot = std::mem::size_of::<(RecordId, Entry)>() * 16 / 7 + 1;
    let header = std::mem::size_of::<(String, bytes::Bytes)>() + ALLOCATION;
    slot + 5 * ALLOCATION + headers * header
}

/// Drops expired entries, then arbitrary ones, until at most `target` bytes remain.
fn evict(entries: &mut Entries, target: usize) {
    let now = SystemTime::now();
    let Entries { map, bytes } = entries;
    map.retain(|_, entry| {
        let keep = entry.until > now;
        if !keep {
            *bytes -= entry.bytes;
        }
        keep
    });
    let excess: Vec<RecordId> = map
        .iter()
        .scan(*bytes, |left, (id, entry)| {
            (*left > target).then(|| {
                *left -= entry.bytes;
                id.clone()
            })
        })
        .collect();
    for id in excess {
        if let Some(gone) = map.remove(&id) {
            *bytes -= gone.bytes;
        }
    }
    // The map keeps its slots after removals: those of the entries evicted
    // would otherwise stay, uncounted.
    map.shrink_to_fit();
}

impl<S: Store> ReplayCache<S> {
    /// Asks the store, and keeps a copy of a completed answer unless a
    /// purge came since `generation`.
    async fn read(
        &self,
        generation: u64,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        let (reservation, kept) = self
            .inner
            .reserve_with_expiry(id, fingerprint, lease_for)
            .await?;
        if let (Reservation::Completed(response), Some(kept)) = (&reservation, kept) {
            self.copies
                .remember(generation, id, fingerprint, response, kept);
        }
        Ok((reservation, kept))
    }
}

#[async_trait]
impl<S: Store> Store for ReplayCache<S> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        if let Some(known) = self.copies.lookup(id, fingerprint) {
            return Ok(known);
        }
        let generation = self.copies.generation.load(Ordering::SeqCst);
        match self.flights.turn(id, generation) {
            Turn::Lead(leading) => {
                let read = self.read(generation, id, fingerprint, lease_for).await;
                leading.land(Outcome::of(&read, fingerprint));
                read
            }
            Turn::Join(joining) => {
                let shared = joining.outcome().await;
                match shared.and_then(|outcome| outcome.answer_for(fingerprint)) {
                    Some(read) => read,
                    None => self.read(generation, id, fingerprint, lease_for).await,
                }
            }
        }
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        // Not remembered: most keys are never retried, and copying every
        // completion would churn memory for nothing. The first replay fills it.
        self.inner.complete(lease, response, retain_for).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release(lease).await
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        self.inner.records(route, key).await
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        // Forgotten before and after (each bumps the generation), so a replay
        // racing the purge cannot leave a copy that outlives it.
        self.copies.forget(route, key);
        let purged = self.inner.purge(route, key).await;
        self.copies.forget(route, key);
        purged
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        self.inner.sweep(batch).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn stopped_for_good(&self) -> Option<StoreError> {
        self.inner.stopped_for_good()
    }

    async fn list(&self, query: &super::ListQuery) -> Result<super::Page, StoreError> {
        self.inner.list(query).await
    }

    async fn count(&self) -> Result<Vec<super::Count>, StoreError> {
        self.inner.count().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound on the copies is on the memory they hold, also when
    /// their answers are small: each is counted at no less than its slot in
    /// the map and the text and header list it keeps, so the map of many
    /// small copies is not several times the bound.
    #[test]
    fn small_answers_are_counted_at_what_their_copies_hold() {
        let max_bytes = 1 << 20;
        let copies = Copies::new(max_bytes);
        let later = SystemTime::now() + Duration::from_secs(3600);
        let kept = Kept {
            expires_at: later,
            expires_here: later,
            age: None,
        };
        let fingerprint = "f".repeat(64);
        for n in 0..20_000u32 {
            let scope = super::super::RecordId::new("r", "", "").scope;
            let id = RecordId {
                route: Arc::from("charges"),
                scope,
                key: Arc::from(format!("key-{n}")),
            };
            let response = StoredResponse {
                status: 201,
                headers: StoredResponse::header_list([
                    ("content-type", "application/json"),
                    ("location", "/v1/charges/ch_1"),
                ]),
                body: bytes::Bytes::from(format!("{{\"id\":{n}}}")),
                body_omitted: false,
                outcome_unknown: false,
            };
            copies.remember(0, &id, &fingerprint, &response, kept);
        }
        let entries = copies.entries.lock().unwrap();
        let buckets = entries.map.capacity() * 8 / 7;
        let slots = buckets * std::mem::size_of::<(RecordId, Entry)>();
        let texts: usize = (entries.map.iter())
            .map(|(id, entry)| {
                id.key.len()
                    + id.scope.len()
                    + entry.fingerprint.len()
                    + entry.response.body.len()
                    + (entry.response.headers.iter())
                        .map(|(n, v)| {
                            std::mem::size_of::<(String, bytes::Bytes)>() + n.len() + v.len()
                        })
                        .sum::<usize>()
            })
            .sum();
        assert!(entries.bytes <= max_bytes);
        assert!(
            entries.bytes >= slots + texts,
            "{} entries counted {} bytes; their slots alone are {slots}, their text {texts}",
            entries.map.len(),
            entries.bytes
        );
    }
}
