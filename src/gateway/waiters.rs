//! In-process wake-ups for requests waiting on an in-flight key
//! (`on_in_flight = "wait"`): the holder notifies when it completes or
//! releases, so waiters in this process do not poll the store in a loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::store::RecordId;

#[derive(Default)]
pub struct Waiters {
    by_record: Mutex<HashMap<RecordId, Arc<Notify>>>,
}

/// A waiter's registration; unregisters itself on drop.
pub struct Ticket<'a> {
    waiters: &'a Waiters,
    id: RecordId,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub fn subscribe(&self, id: &RecordId) -> Ticket<'_> {
        let notify = match self.by_record.lock() {
            Ok(mut map) => map.entry(id.clone()).or_default().clone(),
            // A poisoned map only loses wake-ups; waiters still re-check on a timer.
            Err(_) => Arc::new(Notify::new()),
        };
        Ticket {
            waiters: self,
            id: id.clone(),
            notify,
        }
    }

    /// Wakes every waiter of `id` (the answer landed or the key was freed).
    pub fn wake(&self, id: &RecordId) {
        let notify = match self.by_record.lock() {
            Ok(mut map) => map.remove(id),
            Err(_) => None,
        };
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.waiters.by_record.lock()
            && let Some(current) = map.get(&self.id)
            // Only the map's copy and ours are left: nobody else waits.
            && Arc::ptr_eq(current, &self.notify)
            && Arc::strong_count(&self.notify) <= 2
        {
            map.remove(&self.id);
        }
    }
}
