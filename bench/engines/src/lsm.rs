//! fjall 3 (an LSM tree): one database directory, a keyspace per table and
//! index (records, listing, expiry, meta). A batch is one atomic
//! `WriteBatch` across them, written to fjall's journal; the journal is
//! flushed to the OS at the commit and fdatasync'd per batch
//! (`PersistMode::SyncData`).

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::engine::Engine;
use crate::record::{
    COMPLETED, IN_FLIGHT, Record, expiry_key, key_of_expiry, listing_key, record_key,
};
use crate::workload::{Answer, Job, Key, LEASE_MS, Lease, Outcome, Prefilled, RETAIN_MS};

pub struct Fjall {
    db: Database,
    records: Keyspace,
    listing: Keyspace,
    expiry: Keyspace,
    meta: Keyspace,
    last_token: u64,
    answer: Answer,
}

const LAST_TOKEN: &[u8] = b"last_token";

impl Fjall {
    pub fn open(dir: &Path) -> anyhow::Result<Fjall> {
        let db = Database::builder(dir).open()?;
        let records = db.keyspace("records", KeyspaceCreateOptions::default)?;
        let listing = db.keyspace("listing", KeyspaceCreateOptions::default)?;
        let expiry = db.keyspace("expiry", KeyspaceCreateOptions::default)?;
        let meta = db.keyspace("meta", KeyspaceCreateOptions::default)?;
        let last_token = match meta.get(LAST_TOKEN)? {
            Some(v) => u64::from_be_bytes(v.as_ref().try_into()?),
            None => 0,
        };
        Ok(Fjall {
            db,
            records,
            listing,
            expiry,
            meta,
            last_token,
            answer: Answer::typical(),
        })
    }
}

impl Engine for Fjall {
    fn run_batch(&mut self, jobs: &[Job], now: i64, out: &mut Vec<Outcome>) -> anyhow::Result<()> {
        let mut batch = self.db.batch();
        let mut last_token = self.last_token;
        for job in jobs {
            match job {
                Job::Reserve { key, fingerprint } => {
                    let id = record_key(key);
                    // A real store would read through its own batch
                    // (fjall's transactional mode); the bench's keys are
                    // unique, and a completion always follows its
                    // reservation's commit.
                    if self.records.get(&id)?.is_some() {
                        out.push(Outcome::Exists);
                        continue;
                    }
                    last_token += 1;
                    let record = Record {
                        state: IN_FLIGHT,
                        outcome_unknown: false,
                        token: last_token,
                        fingerprint: *fingerprint,
                        created_at: now,
                        completed_at: 0,
                        expires_at: 0,
                        lease_expires_at: now + LEASE_MS,
                        status: 0,
                        headers: &[],
                        body: &[],
                    };
                    batch.insert(&self.records, id, record.encode());
                    batch.insert(
                        &self.listing,
                        listing_key(IN_FLIGHT, false, now, key),
                        Vec::new(),
                    );
                    out.push(Outcome::Reserved(Lease {
                        token: last_token,
                        row: 0,
                    }));
                }
                Job::Complete { key, lease } => {
                    let id = record_key(key);
                    let Some(value) = self.records.get(&id)? else {
                        out.push(Outcome::Fenced);
                        continue;
                    };
                    let old = Record::decode(&value)?;
                    if old.token != lease.token || old.state != IN_FLIGHT {
                        out.push(Outcome::Fenced);
                        continue;
                    }
                    let expires_at = now + RETAIN_MS;
                    let record = Record {
                        state: COMPLETED,
                        completed_at: now,
                        expires_at,
                        lease_expires_at: 0,
                        status: self.answer.status,
                        headers: &self.answer.headers,
                        body: &self.answer.body,
                        ..old
                    };
                    batch.insert(&self.records, id, record.encode());
                    batch.remove(
                        &self.listing,
                        listing_key(IN_FLIGHT, false, old.created_at, key),
                    );
                    batch.insert(
                        &self.listing,
                        listing_key(COMPLETED, false, old.created_at, key),
                        expires_at.to_be_bytes().to_vec(),
                    );
                    batch.insert(&self.expiry, expiry_key(expires_at, key), Vec::new());
                    out.push(Outcome::Completed);
                }
            }
        }
        if last_token != self.last_token {
            batch.insert(&self.meta, LAST_TOKEN, last_token.to_be_bytes().to_vec());
        }
        batch.commit()?;
        self.last_token = last_token;
        // Out of the journal's buffer into the OS: what a process crash keeps.
        self.db.persist(PersistMode::Buffer)?;
        Ok(())
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        self.db.persist(PersistMode::SyncData)?;
        Ok(())
    }

    fn commit_syncs(&self) -> bool {
        false
    }

    fn prefill(&mut self, records: &mut dyn Iterator<Item = Prefilled>) -> anyhow::Result<()> {
        loop {
            let mut batch = self.db.batch();
            let mut n = 0;
            for p in (&mut *records).take(10_000) {
                let expires_at = p.created_at + RETAIN_MS;
                let record = Record {
                    state: COMPLETED,
                    outcome_unknown: false,
                    token: p.token,
                    fingerprint: p.fingerprint,
                    created_at: p.created_at,
                    completed_at: p.created_at,
                    expires_at,
                    lease_expires_at: 0,
                    status: self.answer.status,
                    headers: &self.answer.headers,
                    body: &self.answer.body,
                };
                batch.insert(&self.records, record_key(&p.key), record.encode());
                batch.insert(
                    &self.listing,
                    listing_key(COMPLETED, false, p.created_at, &p.key),
                    expires_at.to_be_bytes().to_vec(),
                );
                batch.insert(&self.expiry, expiry_key(expires_at, &p.key), Vec::new());
                self.last_token = self.last_token.max(p.token);
                n += 1;
            }
            batch.insert(
                &self.meta,
                LAST_TOKEN,
                self.last_token.to_be_bytes().to_vec(),
            );
            batch.commit()?;
            if n == 0 {
                break;
            }
        }
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn settle(&mut self) -> anyhow::Result<()> {
        // Idle for three checks in a row: a compaction's end can start the next.
        let mut idle = 0;
        while idle < 3 {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let busy = self.db.active_compactions() > 0 || self.db.outstanding_flushes() > 0;
            idle = if busy { 0 } else { idle + 1 };
        }
        Ok(())
    }

    fn lookup(&mut self, keys: &[Key]) -> anyhow::Result<usize> {
        let mut found = 0;
        for key in keys {
            if let Some(value) = self.records.get(record_key(key))? {
                let record = Record::decode(&value)?;
                found += usize::from(record.state == COMPLETED && !record.body.is_empty());
            }
        }
        Ok(found)
    }

    fn sweep(&mut self, limit: usize) -> anyhow::Result<usize> {
        let mut expired = Vec::with_capacity(limit);
        for guard in self.expiry.iter().take(limit) {
            expired.push(guard.key()?);
        }
        let mut batch = self.db.batch();
        for entry in &expired {
            let key = key_of_expiry(entry)?;
            let id = record_key(&key);
            if let Some(value) = self.records.get(&id)? {
                let record = Record::decode(&value)?;
                batch.remove(
                    &self.listing,
                    listing_key(
                        record.state,
                        record.outcome_unknown,
                        record.created_at,
                        &key,
                    ),
                );
                batch.remove(&self.records, id);
            }
            batch.remove(&self.expiry, entry.clone());
        }
        batch.durability(Some(PersistMode::SyncData)).commit()?;
        Ok(expired.len())
    }
}
