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

use std::time::Duration;

use tokio::sync::oneshot;

use super::EmbeddedStore;
use super::cause::EmbeddedCause;
use crate::store::{Kept, Reservation, Store, StoreError};

/// Twice the busy timeout (5 s) that one batch may wait out for another
/// process's write lock: a reservation queued behind such a batch, then
/// waiting in its own, is still answered.
pub(super) const DEADLINE: Duration = Duration::from_secs(10);

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
            tokio::spawn(async move {
                if let Ok(Ok((Reservation::Reserved(lease), _))) = reply.await {
                    // Fenced by the lease's token: touches this lease only.
                    let _ = store.release(&lease).await;
                }
            });
            Err(EmbeddedCause::NoAnswer(deadline).into())
        }
    }
}
