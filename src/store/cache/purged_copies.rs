//! Deleting the Redis copies of a key purged elsewhere: a purge made
//! without this gateway's `[store.redis]` (`idemgate keys purge` with
//! another file) deletes the records but cannot name the copies, which would
//! go on replaying the purged answer until their TTL. Every replica that
//! keeps copies hears of the purge (`postgres::purges`) and replaces them
//! with a purge's mark (`entry::purged_mark`), as a purge of its own does.
//!
//! A deletion Redis refuses (down, unreachable) is tried again every
//! `RETRY_EVERY` until Redis answers: once the records are gone nothing
//! else names the copy, so purging again could not reach it. The retries
//! end with the store (a restart loses them: the log names the entry to
//! delete by hand), and at most `MAX_RETRYING` wait at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::conn::Redis;
use super::entry;
use crate::store::RecordId;

/// Between two tries of a deletion Redis refused (a down Redis costs
/// nothing meanwhile: `conn` skips it during its pause).
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Deletions waiting for Redis at most; past it one is logged, not retried.
const MAX_RETRYING: usize = 10_000;

#[derive(Clone)]
pub struct PurgedCopies {
    /// Weak: pending retries end when the store is dropped.
    redis: Weak<Redis>,
    prefix: String,
    retrying: Arc<AtomicUsize>,
}

impl PurgedCopies {
    pub(super) fn new(redis: &Arc<Redis>, prefix: String) -> PurgedCopies {
        PurgedCopies {
            redis: Arc::downgrade(redis),
            prefix,
            retrying: Arc::default(),
        }
    }

    /// Deletes the copy of (route, scope, key) in the background, trying
    /// again until Redis answers.
    pub fn delete(&self, route: &str, scope: &str, key: &str) {
        let id = RecordId::new(route, scope, key);
        let name = entry::key(&self.prefix, &id);
        let mark = entry::purged_mark();
        let (redis, retrying) = (self.redis.clone(), self.retrying.clone());
        tokio::spawn(async move {
            let short_key = crate::key::short_hash(&id.key);
            let mut waiting = None;
            loop {
                let Some(store) = redis.upgrade() else {
                    return;
                };
                let result = store
                    .set_all(std::slice::from_ref(&name), &mark, entry::PURGED_FOR)
                    .await;
                drop(store);
                let error = match result {
                    Ok(()) => break,
                    Err(error) => error,
                };
                if waiting.is_none() {
                    if retrying.fetch_add(1, Ordering::SeqCst) >= MAX_RETRYING {
                        retrying.fetch_sub(1, Ordering::SeqCst);
                        tracing::error!(
                            route = %id.route, key = %short_key, entry = %name, %error,
                            "the Redis copy of a key purged elsewhere could not be deleted, \
                             and too many deletions already wait for Redis: it replays until \
                             the record's retention would have ended; delete the entry by hand"
                        );
                        return;
                    }
                    tracing::warn!(
                        route = %id.route, key = %short_key, entry = %name, %error,
                        "the Redis copy of a key purged elsewhere could not be deleted yet; \
                         tried again every second until Redis answers (should this process \
                         stop first, delete the entry by hand)"
                    );
                    waiting = Some(RetryingSlot(retrying.clone()));
                }
                tokio::time::sleep(RETRY_EVERY).await;
            }
            if waiting.is_some() {
                tracing::info!(
                    route = %id.route, key = %short_key, entry = %name,
                    "the Redis copy of a key purged elsewhere is deleted, Redis answering again"
                );
            }
        });
    }
}

/// One deletion counted among those waiting for Redis, until dropped.
struct RetryingSlot(Arc<AtomicUsize>);

impl Drop for RetryingSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
