//! Phase "reserve": ask the store what this request may do, waiting for an
//! in-flight first request when the route says so.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use super::Gateway;
use crate::config::InFlightMode;
use crate::route::RoutePolicy;
use crate::store::{
    Kept, Lease, LeaseGuard, RecordId, Reservation, Store, StoreError, StoredResponse,
};

/// Waiters in this process are woken by the holder; this bounds how long one
/// waits for a holder in another replica before looking at the store again.
const RECHECK: Duration = Duration::from_millis(250);

/// How long a 409 tells the client to wait: most first requests finish
/// well within it.
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub enum Decision {
    Execute(Lease),
    /// With the instant the record stops replaying, when the store says.
    Replay(StoredResponse, Option<SystemTime>),
    Mismatch,
    Conflict {
        retry_after: Duration,
    },
}

pub async fn reserve(
    gateway: &Gateway,
    policy: &RoutePolicy,
    id: &RecordId,
    fingerprint: &str,
) -> Result<Decision, StoreError> {
    let store = gateway.store();
    if policy.on_in_flight == InFlightMode::Conflict {
        let (reservation, kept) = ask(store, id, fingerprint, policy.lock_timeout).await?;
        return Ok(decide(gateway, id, reservation, kept));
    }
    let deadline = Instant::now() + policy.wait_timeout;
    loop {
        // Subscribe before asking, so a completion between the answer and the
        // wait is not missed.
        let ticket = gateway.waiters.subscribe(id);
        let notified = ticket.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        let (reservation, kept) = ask(store, id, fingerprint, policy.lock_timeout).await?;
        let Reservation::InFlight { lease_expires_at } = reservation else {
            return Ok(decide(gateway, id, reservation, kept));
        };
        let now = Instant::now();
        if now >= deadline {
            let in_flight = Reservation::InFlight { lease_expires_at };
            return Ok(decide(gateway, id, in_flight, None));
        }
        let lease_left = lease_expires_at
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        let nap = (deadline - now)
            .min(RECHECK)
            .min(lease_left.max(Duration::from_millis(10)));
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}

type Asked = Result<(Reservation, Option<Kept>), StoreError>;

/// Asks the store for the key, in a way that survives the request being
/// dropped halfway: its HTTP/2 client reset the stream (hyper then drops
/// the handler at its next wait) or its connection broke. The store goes on
/// with the ask all the same, and a lease it took is freed: else the key
/// would stay in flight, run by no one, and every retry get 409 (or 422)
/// until the lease ran out.
async fn ask(
    store: &Arc<dyn Store>,
    id: &RecordId,
    fingerprint: &str,
    lease_for: Duration,
) -> Asked {
    let asking = {
        let (store, id, fingerprint) = (store.clone(), id.clone(), fingerprint.to_owned());
        Box::pin(async move {
            store
                .reserve_with_expiry(&id, &fingerprint, lease_for)
                .await
        })
    };
    Asking {
        asking: Some(asking),
        store: store.clone(),
    }
    .await
}

struct Asking {
    /// `None` once it gave its answer.
    asking: Option<Pin<Box<dyn Future<Output = Asked> + Send>>>,
    store: Arc<dyn Store>,
}

impl Future for Asking {
    type Output = Asked;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Asked> {
        let this = self.get_mut();
        let Some(asking) = this.asking.as_mut() else {
            return Poll::Pending;
        };
        let asked = std::task::ready!(asking.as_mut().poll(cx));
        this.asking = None;
        Poll::Ready(asked)
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        let Some(asking) = self.asking.take() else {
            return;
        };
        // Without a runtime (the process stopping) a lease taken simply expires.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            if let Ok((Reservation::Reserved(lease), _)) = asking.await {
                tracing::debug!(route = %lease.id.route, "the request left while its key was reserved; key freed");
                // Its drop frees the key.
                drop(LeaseGuard::new(store, lease));
            }
        });
    }
}

fn decide(
    gateway: &Gateway,
    id: &RecordId,
    reservation: Reservation,
    kept: Option<Kept>,
) -> Decision {
    match reservation {
        Reservation::Reserved(lease) => Decision::Execute(lease),
        Reservation::Completed(stored) => {
            // Every store path tells the age (the in-process copies too)
            // when the record keeps the instant it was completed.
            if let Some(age) = kept.and_then(|kept| kept.age) {
                gateway.metrics().replay_ages.observe(&id.route, age);
            }
            Decision::Replay(stored, kept.map(|kept| kept.expires_at))
        }
        Reservation::Mismatch => Decision::Mismatch,
        Reservation::InFlight { .. } => Decision::Conflict {
            retry_after: RETRY_AFTER,
        },
    }
}
