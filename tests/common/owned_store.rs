//! A store bundled with what must outlive it (a temp directory, a schema): the
//! store drops first (joining its threads, closing its pool), then the guard.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idemgate::store::{
    Count, Kept, Lease, ListQuery, Page, RecordId, RecordInfo, Reservation, Store, StoreError,
    StoredResponse,
};

pub struct OwnedStore<G> {
    pub store: Arc<dyn Store>,
    pub guard: G,
}

#[async_trait::async_trait]
impl<G: Send + Sync + 'static> Store for OwnedStore<G> {
    fn backend(&self) -> &'static str {
        self.store.backend()
    }
    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fp: &str,
        lease: Duration,
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        self.store.reserve_with_expiry(id, fp, lease).await
    }
    async fn complete(
        &self,
        lease: &Lease,
        r: &StoredResponse,
        retain: Duration,
    ) -> Result<SystemTime, StoreError> {
        self.store.complete(lease, r, retain).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.store.release(lease).await
    }
    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        self.store.records(route, key).await
    }
    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        self.store.purge(route, key).await
    }
    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        self.store.sweep(batch).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }
    fn stopped_for_good(&self) -> Option<StoreError> {
        self.store.stopped_for_good()
    }
    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        self.store.list(query).await
    }
    async fn count(&self) -> Result<Vec<Count>, StoreError> {
        self.store.count().await
    }
}
