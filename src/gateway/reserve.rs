//! Phase "reserve": ask the store what this request may do, waiting for an
//! in-flight first request when the route says so.

use std::time::{Duration, Instant, SystemTime};

use super::Gateway;
use crate::config::InFlightMode;
use crate::route::RoutePolicy;
use crate::store::{Kept, Lease, RecordId, Reservation, StoreError, StoredResponse};

/// Waiters in this process are woken by the holder; this bounds how long one
/// waits for a holder in another replica before looking at the store again.
const RECHECK: Duration = Duration::from_millis(250);

/// How long a 409 tells the client to wait when nothing better is known.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

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
        let (reservation, kept) = store
            .reserve_with_expiry(id, fingerprint, policy.lock_timeout)
            .await?;
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

        let (reservation, kept) = store
            .reserve_with_expiry(id, fingerprint, policy.lock_timeout)
            .await?;
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

fn decide(
    gateway: &Gateway,
    id: &RecordId,
    reservation: Reservation,
    kept: Option<Kept>,
) -> Decision {
    match reservation {
        Reservation::Reserved(lease) => Decision::Execute(lease),
        Reservation::Completed(stored) => {
            // Every store path tells the age (the in-process copies too);
            // only a copy written before ages were kept does not.
            if let Some(age) = kept.and_then(|kept| kept.age) {
                gateway.metrics().replay_ages.observe(&id.route, age);
            }
            Decision::Replay(stored, kept.map(|kept| kept.expires_at))
        }
        Reservation::Mismatch => Decision::Mismatch,
        Reservation::InFlight { .. } => Decision::Conflict {
            retry_after: DEFAULT_RETRY_AFTER,
        },
    }
}
