//! redb 5 (a copy-on-write B-tree): one file, a table per table and index
//! (records, listing, expiry, meta). A batch is one write transaction
//! committed with `Durability::Immediate`: redb writes the changed pages and
//! a commit slot and fsyncs inside `commit`, so a batch cannot be answered
//! between its commit and its sync.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::engine::Engine;
use crate::record::{
    COMPLETED, IN_FLIGHT, Record, expiry_key, key_of_expiry, listing_key, record_key,
};
use crate::workload::{Answer, Job, Key, LEASE_MS, Lease, Outcome, Prefilled, RETAIN_MS};

const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");
const LISTING: TableDefinition<&[u8], &[u8]> = TableDefinition::new("listing");
const EXPIRY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("expiry");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub struct Redb {
    db: Database,
    answer: Answer,
}

impl Redb {
    pub fn open(dir: &Path) -> anyhow::Result<Redb> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join("store.redb"))?;
        let txn = db.begin_write()?;
        {
            txn.open_table(RECORDS)?;
            txn.open_table(LISTING)?;
            txn.open_table(EXPIRY)?;
            txn.open_table(META)?;
        }
        txn.commit()?;
        Ok(Redb {
            db,
            answer: Answer::typical(),
        })
    }
}

impl Engine for Redb {
    fn run_batch(&mut self, jobs: &[Job], now: i64, out: &mut Vec<Outcome>) -> anyhow::Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut records = txn.open_table(RECORDS)?;
            let mut listing = txn.open_table(LISTING)?;
            let mut expiry = txn.open_table(EXPIRY)?;
            let mut meta = txn.open_table(META)?;
            let start = meta.get("last_token")?.map(|v| v.value()).unwrap_or(0);
            let mut last_token = start;
            for job in jobs {
                match job {
                    Job::Reserve { key, fingerprint } => {
                        let id = record_key(key);
                        if records.get(id.as_slice())?.is_some() {
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
                        records.insert(id.as_slice(), record.encode().as_slice())?;
                        listing
                            .insert(listing_key(IN_FLIGHT, false, now, key).as_slice(), &[][..])?;
                        out.push(Outcome::Reserved(Lease {
                            token: last_token,
                            row: 0,
                        }));
                    }
                    Job::Complete { key, lease } => {
                        let id = record_key(key);
                        let old = match records.get(id.as_slice())? {
                            Some(value) => {
                                let old = Record::decode(value.value())?;
                                (old.token == lease.token && old.state == IN_FLIGHT)
                                    .then_some((old.created_at, old.fingerprint))
                            }
                            None => None,
                        };
                        let Some((created_at, fingerprint)) = old else {
                            out.push(Outcome::Fenced);
                            continue;
                        };
                        let expires_at = now + RETAIN_MS;
                        let record = Record {
                            state: COMPLETED,
                            outcome_unknown: false,
                            token: lease.token,
                            fingerprint,
                            created_at,
                            completed_at: now,
                            expires_at,
                            lease_expires_at: 0,
                            status: self.answer.status,
                            headers: &self.answer.headers,
                            body: &self.answer.body,
                        };
                        records.insert(id.as_slice(), record.encode().as_slice())?;
                        listing
                            .remove(listing_key(IN_FLIGHT, false, created_at, key).as_slice())?;
                        listing.insert(
                            listing_key(COMPLETED, false, created_at, key).as_slice(),
                            &expires_at.to_be_bytes()[..],
                        )?;
                        expiry.insert(expiry_key(expires_at, key).as_slice(), &[][..])?;
                        out.push(Outcome::Completed);
                    }
                }
            }
            if last_token != start {
                meta.insert("last_token", last_token)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    fn commit_syncs(&self) -> bool {
        true
    }

    fn prefill(&mut self, records: &mut dyn Iterator<Item = Prefilled>) -> anyhow::Result<()> {
        loop {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(redb::Durability::None)?;
            let mut n = 0;
            {
                let mut table = txn.open_table(RECORDS)?;
                let mut listing = txn.open_table(LISTING)?;
                let mut expiry = txn.open_table(EXPIRY)?;
                let mut meta = txn.open_table(META)?;
                let mut last = 0;
                for p in (&mut *records).take(100_000) {
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
                    table.insert(record_key(&p.key).as_slice(), record.encode().as_slice())?;
                    listing.insert(
                        listing_key(COMPLETED, false, p.created_at, &p.key).as_slice(),
                        &expires_at.to_be_bytes()[..],
                    )?;
                    expiry.insert(expiry_key(expires_at, &p.key).as_slice(), &[][..])?;
                    last = p.token;
                    n += 1;
                }
                if n > 0 {
                    meta.insert("last_token", last)?;
                }
            }
            if n == 0 {
                // The last, empty transaction makes the rest durable.
                txn.set_durability(redb::Durability::Immediate)?;
                txn.commit()?;
                break;
            }
            txn.commit()?;
        }
        Ok(())
    }

    fn lookup(&mut self, keys: &[Key]) -> anyhow::Result<usize> {
        let txn = self.db.begin_read()?;
        let records = txn.open_table(RECORDS)?;
        let mut found = 0;
        for key in keys {
            if let Some(value) = records.get(record_key(key).as_slice())? {
                let record = Record::decode(value.value())?;
                found += usize::from(record.state == COMPLETED && !record.body.is_empty());
            }
        }
        Ok(found)
    }

    fn sweep(&mut self, limit: usize) -> anyhow::Result<usize> {
        let txn = self.db.begin_write()?;
        let deleted;
        {
            let mut records = txn.open_table(RECORDS)?;
            let mut listing = txn.open_table(LISTING)?;
            let mut expiry = txn.open_table(EXPIRY)?;
            let mut expired = Vec::with_capacity(limit);
            for entry in expiry.iter()?.take(limit) {
                expired.push(entry?.0.value().to_vec());
            }
            for entry in &expired {
                let key = key_of_expiry(entry)?;
                let id = record_key(&key);
                let found = records
                    .remove(id.as_slice())?
                    .map(|value| {
                        Record::decode(value.value())
                            .map(|r| (r.state, r.outcome_unknown, r.created_at))
                    })
                    .transpose()?;
                if let Some((state, unknown, created_at)) = found {
                    listing.remove(listing_key(state, unknown, created_at, &key).as_slice())?;
                }
                expiry.remove(entry.as_slice())?;
            }
            deleted = expired.len();
        }
        txn.commit()?;
        Ok(deleted)
    }
}
