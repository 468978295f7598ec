//! In-process wake-ups for requests waiting on an in-flight key
//! (`on_in_flight = "wait"`): the holder notifies when it completes or
//! releases, so waiters in this process do not poll the store in a loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::store::RecordId;

#[derive(Default)]
pub struct Waiters {
    /// Each key's wake-up, with the tickets that hold it: counted under the
    /// lock, as the `Arc`'s own count is not (two tickets dropped at once
    /// on two threads could each see the other's copy, and leave the entry
    /// for the life of the process).
    by_record: Mutex<HashMap<RecordId, Waiting>>,
    /// Tickets alive: while none are, `wake` has no one to find and skips
    /// the lock and the key's hashing (every execution wakes its key;
    /// almost none has a waiter, docs/adr/0007-hot-path-costs.md).
    tickets: AtomicUsize,
}

struct Waiting {
    notify: Arc<Notify>,
    tickets: usize,
}

/// A waiter's registration; unregisters itself on drop.
pub struct Ticket<'a> {
    waiters: &'a Waiters,
    id: RecordId,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub fn subscribe(&self, id: &RecordId) -> Ticket<'_> {
        // Counted before the entry exists: a `wake` that sees zero ran
        // before this waiter's first look at the store, which then finds
        // what that wake announced.
        self.tickets.fetch_add(1, Ordering::SeqCst);
        let notify = match self.by_record.lock() {
            Ok(mut map) => {
                let waiting = map.entry(id.clone()).or_insert_with(|| Waiting {
                    notify: Arc::default(),
                    tickets: 0,
                });
                waiting.tickets += 1;
                waiting.notify.clone()
            }
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
        if self.tickets.load(Ordering::SeqCst) == 0 {
            return;
        }
        let waiting = match self.by_record.lock() {
            Ok(mut map) => map.remove(id),
            Err(_) => None,
        };
        if let Some(waiting) = waiting {
            waiting.notify.notify_waiters();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.waiters.tickets.fetch_sub(1, Ordering::SeqCst);
        let Ok(mut map) = self.waiters.by_record.lock() else {
            return;
        };
        // An entry made after a wake removed ours counts other tickets.
        if let Some(waiting) = map.get_mut(&self.id)
            && Arc::ptr_eq(&waiting.notify, &self.notify)
        {
            waiting.tickets -= 1;
            if waiting.tickets == 0 {
                map.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn id(key: &str) -> RecordId {
        RecordId {
            route: Arc::from("r"),
            scope: Arc::from(""),
            key: Arc::from(key),
        }
    }

    #[tokio::test]
    async fn a_wake_reaches_the_tickets_of_its_key_and_only_those() {
        let waiters = Waiters::default();
        // No ticket yet: nothing to wake, nothing kept.
        waiters.wake(&id("k"));

        let mine = waiters.subscribe(&id("k"));
        let other = waiters.subscribe(&id("other"));
        {
            let woken = mine.notify.notified();
            let not_woken = other.notify.notified();
            tokio::pin!(woken, not_woken);
            woken.as_mut().enable();
            not_woken.as_mut().enable();

            waiters.wake(&id("k"));
            tokio::time::timeout(Duration::from_secs(1), woken)
                .await
                .expect("the ticket taken before the wake is woken at once");
            assert!(
                tokio::time::timeout(Duration::from_millis(50), not_woken)
                    .await
                    .is_err(),
                "another key's ticket sleeps on"
            );
        }

        drop((mine, other));
        assert_eq!(waiters.tickets.load(Ordering::SeqCst), 0);
        assert!(waiters.by_record.lock().unwrap().is_empty());
    }

    /// Two waiters of one key (a client's retry beside its first try) that
    /// let go at the same moment on two threads leave no entry behind:
    /// one left would stay for the life of the process, and a sidecar
    /// that runs for weeks would gather them.
    #[test]
    fn tickets_dropped_at_once_on_two_threads_leave_no_entry() {
        let waiters = Waiters::default();
        let rounds = 20_000;
        let ready = std::sync::Barrier::new(3);
        let (left_tx, left_rx) = std::sync::mpsc::channel::<Ticket<'_>>();
        let (right_tx, right_rx) = std::sync::mpsc::channel::<Ticket<'_>>();
        std::thread::scope(|threads| {
            for tickets in [left_rx, right_rx] {
                let ready = &ready;
                threads.spawn(move || {
                    for ticket in tickets {
                        ready.wait();
                        drop(ticket);
                    }
                });
            }
            for round in 0..rounds {
                let key = id(&format!("k{round}"));
                left_tx.send(waiters.subscribe(&key)).unwrap();
                right_tx.send(waiters.subscribe(&key)).unwrap();
                ready.wait();
            }
            drop((left_tx, right_tx));
        });
        assert_eq!(waiters.tickets.load(Ordering::SeqCst), 0);
        let left = waiters.by_record.lock().unwrap().len();
        assert_eq!(left, 0, "entries left behind after {rounds} rounds");
    }
}
