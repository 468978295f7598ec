//! A reservation the writer thread does not answer in time is refused
//! rather than waited on without end.
//!
//! The writer blocks in the kernel for as long as the disk does not answer
//! (a hung volume, a file system frozen for a snapshot), and every new key
//! and every replay not held in memory would wait with it, past any client's
//! timeout, with nothing said. Past `DEADLINE` the request gets 503 instead.
//! The job stays queued, so the lease it commits once the disk answers
//! would hold the key in flight for its whole length (409 to every retry)
//! with no request behind it: it is released as soon as it is answered, as
//! the Postgres store deletes a reservation answered too late.
//!
//! While such a reservation is still unanswered, the writer is known to be
//! held up, and a new one would only queue behind it to be refused at its
//! deadline. It is refused at once instead ([`Late`]): what a hung disk
//! holds in memory (queued jobs, the tasks waiting to free their leases) is
//! then what arrives within one deadline, not everything that arrives for
//! as long as the disk hangs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use super::EmbeddedStore;
use super::cause::EmbeddedCause;
use crate::store::{Kept, Reservation, Store, StoreError};

/// Twice the busy timeout (5 s) that one batch may wait out for another
/// process's write lock: a reservation queued behind such a batch, then
/// waiting in its own, is still answered.
pub(super) const DEADLINE: Duration = Duration::from_secs(10);

/// The reservations given up at their deadline whose answer has not come.
#[derive(Default)]
pub(super) struct Late(Arc<AtomicUsize>);

impl Late {
    /// Whether the writer has left one unanswered past its deadline.
    pub(super) fn any(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }

    /// Counts one given up, until the returned guard is dropped (its
    /// answer came, or the writer ended).
    fn given_up(&self) -> GivenUp {
        self.0.fetch_add(1, Ordering::SeqCst);
        GivenUp(self.0.clone())
    }
}

struct GivenUp(Arc<AtomicUsize>);

impl Drop for GivenUp {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

type Reply = Result<(Reservation, Option<Kept>), StoreError>;

/// The writer's answer to a reservation, or `NoAnswer` past `deadline`,
/// leaving a task that releases the lease should one come later.
pub(super) async fn within(
    store: &EmbeddedStore,
    deadline: Duration,
    mut reply: oneshot::Receiver<Reply>,
) -> Reply {
    match tokio::time::timeout(deadline, &mut reply).await {
        Ok(answer) => answer.map_err(|_| EmbeddedCause::Stopped)?,
        Err(_) => {
            let store = store.clone();
            let waiting = store.inner.late.given_up();
            tokio::spawn(async move {
                let answer = reply.await;
                drop(waiting);
                if let Ok(Ok((Reservation::Reserved(lease), _))) = answer {
                    // Fenced by the lease's token: touches this lease only.
                    let _ = store.release(&lease).await;
                }
            });
            Err(EmbeddedCause::NoAnswer(deadline).into())
        }
    }
}
