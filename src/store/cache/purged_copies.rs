//! Deleting the Redis copies of a key purged elsewhere: a purge made
//! without this gateway's `[store.redis]` (`idemgate keys purge` with
//! another file) deletes the records but cannot name the copies, which would
//! go on replaying the purged answer until their TTL. Every replica that
//! keeps copies hears of the purge (`postgres::purges`) and deletes them.

use std::sync::Arc;

use super::conn::Redis;
use super::entry;
use crate::store::RecordId;

#[derive(Clone)]
pub struct PurgedCopies {
    redis: Arc<Redis>,
    prefix: String,
}

impl PurgedCopies {
    pub(super) fn new(redis: Arc<Redis>, prefix: String) -> PurgedCopies {
        PurgedCopies { redis, prefix }
    }

    /// Deletes the copy of (route, scope, key) in the background; each
    /// replica hearing the purge does the same, so one that fails (Redis
    /// down) is covered by the others and by the purger's own deletion.
    pub fn delete(&self, route: &str, scope: &str, key: &str) {
        let id = RecordId::new(route, scope, key);
        let name = entry::key(&self.prefix, &id);
        let redis = self.redis.clone();
        tokio::spawn(async move {
            if let Err(error) = redis.del(&[name]).await {
                tracing::warn!(
                    route = %id.route,
                    key = %crate::key::short_hash(&id.key),
                    %error,
                    "the Redis copy of a key purged elsewhere could not be deleted; \
                     it replays until the record's retention would have ended \
                     unless the purge is made again once Redis answers"
                );
            }
        });
    }
}
