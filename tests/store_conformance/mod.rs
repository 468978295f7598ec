//! The store conformance suite: the same cases against every backend.
//!
//! A backend's test file declares `mod store_conformance;` and invokes
//! `store_conformance::conformance_tests!(expr)`, where `expr` is an async
//! expression yielding a fresh, empty `Arc<dyn Store>`; one `#[tokio::test]`
//! per case is generated. Expiry cases use short real durations, so they work
//! against stores that keep their own clock.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use idemgate::store::{
    Lease, LeaseGuard, RecordId, RecordState, Reservation, Store, StoreError, StoredResponse,
};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(50);
/// Comfortably past `SHORT`, allowing for coarse clocks.
const PAST_SHORT: Duration = Duration::from_millis(150);

/// Instantiates every case for one backend.
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::store_conformance::conformance_tests!(@cases $make;
            reserve_new_key, reserve_in_flight_same_fingerprint,
            reserve_in_flight_other_fingerprint, complete_then_replay,
            complete_then_replay_body_omitted, completed_other_fingerprint,
            release_frees_key, lease_expiry_takeover,
            lease_expiry_other_fingerprint_is_a_mismatch, fenced_complete_after_takeover,
            fenced_release_after_takeover, token_not_reused_after_release,
            retention_expiry, records_lifecycle, complete_returns_the_expiry_it_stored,
            purge_all_scopes,
            sweep_expired_records_and_dead_leases, concurrent_reservations, scopes_independent,
            guard_drop_releases);
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let store: std::sync::Arc<dyn idemgate::store::Store> = $make;
                $crate::store_conformance::$case(store).await;
            }
        )*
    };
}
pub(crate) use conformance_tests;

pub fn id(key: &str) -> RecordId {
    RecordId {
        route: "orders".into(),
        scope: "scope-a".into(),
        key: key.into(),
    }
}

pub fn response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: StoredResponse::header_list(vec![
            ("location", b"/orders/42".to_vec()),
            ("content-type", b"application/json".to_vec()),
            ("x-binary", vec![0, 0xff, b'\t', 0x80]),
            ("set-cookie", b"a=1".to_vec()),
            ("set-cookie", b"b=2".to_vec()),
        ]),
        body: Bytes::from_static(b"{\"id\":42}\0\xff"),
        body_omitted: false,
        outcome_unknown: false,
    }
}

pub async fn reserved(store: &Arc<dyn Store>, id: &RecordId, fp: &str, lease: Duration) -> Lease {
    match store.reserve(id, fp, lease).await {
        Ok(Reservation::Reserved(lease)) => lease,
        other => panic!("expected Reserved, got {other:?}"),
    }
}

pub async fn reserve_new_key(store: Arc<dyn Store>) {
    let before = SystemTime::now();
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    assert_eq!(lease.id, id("k"));
    assert!(lease.expires_at >= before + LONG - Duration::from_secs(1));
}

pub async fn reserve_in_flight_same_fingerprint(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    match store.reserve(&id("k"), "fp", LONG).await.unwrap() {
        Reservation::InFlight { lease_expires_at } => {
            let skew = Duration::from_secs(1);
            assert!(lease_expires_at + skew >= lease.expires_at);
            assert!(lease_expires_at <= lease.expires_at + skew);
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
}

pub async fn reserve_in_flight_other_fingerprint(store: Arc<dyn Store>) {
    reserved(&store, &id("k"), "fp", LONG).await;
    let got = store.reserve(&id("k"), "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
}

pub async fn complete_then_replay(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let got = store.reserve(&id("k"), "fp", LONG).await.unwrap();
    assert_eq!(got, Reservation::Completed(response()));
}

pub async fn complete_then_replay_body_omitted(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    let omitted = StoredResponse {
        status: 200,
        headers: StoredResponse::header_list(vec![("content-type", b"video/mp4".to_vec())]),
        body: Bytes::new(),
        body_omitted: true,
        outcome_unknown: false,
    };
    store.complete(&lease, &omitted, LONG).await.unwrap();
    let got = store.reserve(&id("k"), "fp", LONG).await.unwrap();
    assert_eq!(got, Reservation::Completed(omitted));
}

pub async fn completed_other_fingerprint(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let got = store.reserve(&id("k"), "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
}

pub async fn release_frees_key(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.release(&lease).await.unwrap();
    assert!(store.records("orders", "k").await.unwrap().is_empty());
    reserved(&store, &id("k"), "other", LONG).await;
}

pub async fn lease_expiry_takeover(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let second = reserved(&store, &id("k"), "fp", LONG).await;
    assert!(second.token > first.token, "{second:?} vs {first:?}");
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].state, RecordState::InFlight);
    assert_eq!(info[0].fingerprint, "fp");
    assert!(info[0].lease_expires_at > Some(first.expires_at));
}

/// A lease that ran out without an answer: its request may have run, so
/// the key is taken over only by the same request; another one is refused,
/// as while the lease was live, and leaves the record as it was.
pub async fn lease_expiry_other_fingerprint_is_a_mismatch(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    for _ in 0..2 {
        let got = store.reserve(&id("k"), "other", LONG).await.unwrap();
        assert_eq!(got, Reservation::Mismatch);
    }
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].state, RecordState::InFlight);
    assert_eq!(info[0].fingerprint, "fp");
    assert_eq!(info[0].lease_expires_at, Some(first.expires_at));
    // Nothing was written: the first holder's lease is still the record's.
    store.complete(&first, &response(), LONG).await.unwrap();
    let got = store.reserve(&id("k"), "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
    let got = store.reserve(&id("k"), "fp", LONG).await.unwrap();
    assert_eq!(got, Reservation::Completed(response()));

    // The same request takes such a key over, even after a refused one.
    let stale = id("stale");
    let first = reserved(&store, &stale, "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let got = store.reserve(&stale, "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
    let second = reserved(&store, &stale, "fp", LONG).await;
    assert!(second.token > first.token, "{second:?} vs {first:?}");
    let got = store.reserve(&stale, "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
}

pub async fn fenced_complete_after_takeover(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let second = reserved(&store, &id("k"), "fp", LONG).await;
    let late = store.complete(&first, &response(), LONG).await;
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    // The new holder is untouched and can still complete.
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info[0].state, RecordState::InFlight);
    let mut mine = response();
    mine.status = 202;
    store.complete(&second, &mine, LONG).await.unwrap();
    let late = store.complete(&first, &response(), LONG).await;
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    let got = store.reserve(&id("k"), "fp", LONG).await.unwrap();
    assert_eq!(got, Reservation::Completed(mine));
}

pub async fn fenced_release_after_takeover(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let second = reserved(&store, &id("k"), "fp", LONG).await;
    store.release(&first).await.unwrap();
    assert!(matches!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::InFlight { .. }
    ));
    store.complete(&second, &response(), LONG).await.unwrap();
    // Releasing a completed record is a no-op too: it keeps replaying.
    store.release(&second).await.unwrap();
    let got = store.reserve(&id("k"), "fp", LONG).await.unwrap();
    assert_eq!(got, Reservation::Completed(response()));
}

/// A record deleted (released) and reserved again must not hand out a token a
/// late holder still has: tokens are never reused for one record id.
pub async fn token_not_reused_after_release(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let second = reserved(&store, &id("k"), "fp", LONG).await;
    store.release(&second).await.unwrap();
    let third = reserved(&store, &id("k"), "fp", LONG).await;
    assert_ne!(third.token, first.token);
    assert_ne!(third.token, second.token);
    let late = store.complete(&first, &response(), LONG).await;
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    store.purge("orders", "k").await.unwrap();
    let fourth = reserved(&store, &id("k"), "fp", LONG).await;
    let late = store.complete(&third, &response(), LONG).await;
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    store.complete(&fourth, &response(), LONG).await.unwrap();
}

pub async fn retention_expiry(store: Arc<dyn Store>) {
    let first = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&first, &response(), SHORT).await.unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    let second = reserved(&store, &id("k"), "other", LONG).await;
    assert!(second.token > first.token);
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info[0].state, RecordState::InFlight);
    assert_eq!(info[0].status, None);
}

pub async fn records_lifecycle(store: Arc<dyn Store>) {
    let before = SystemTime::now() - Duration::from_secs(1);
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info.len(), 1);
    let r = &info[0];
    assert_eq!(r.scope, "scope-a");
    assert_eq!(r.state, RecordState::InFlight);
    assert_eq!(r.fingerprint, "fp");
    assert_eq!(r.status, None);
    assert!(r.created_at >= before);
    assert_eq!(r.completed_at, None);
    assert_eq!(r.expires_at, None);
    assert!(r.lease_expires_at.is_some());

    store.complete(&lease, &response(), LONG).await.unwrap();
    let info = store.records("orders", "k").await.unwrap();
    let r = &info[0];
    assert_eq!(r.state, RecordState::Completed);
    assert_eq!(r.fingerprint, "fp");
    assert_eq!(r.status, Some(201));
    let completed = r.completed_at.expect("completed_at");
    assert!(completed >= r.created_at);
    let expires = r.expires_at.expect("expires_at");
    assert!(expires >= completed + LONG - Duration::from_secs(1));
    assert_eq!(r.lease_expires_at, None);
    assert!(store.records("orders", "nope").await.unwrap().is_empty());
    assert!(store.records("other-route", "k").await.unwrap().is_empty());
}

/// The expiry `complete` returns is the one stored: the admin view shows
/// it, and every replay tells it (from the store, and from whatever copy the
/// first replay left), to the instant. Keys completed all at once, so a
/// store that batches completions writes several in one statement.
pub async fn complete_returns_the_expiry_it_stored(store: Arc<dyn Store>) {
    const KEYS: usize = 30;
    let ids: Vec<RecordId> = (0..KEYS).map(|n| id(&format!("exp-{n}"))).collect();
    let mut leases = Vec::new();
    for rid in &ids {
        leases.push(reserved(&store, rid, "fp", LONG).await);
    }
    let before = SystemTime::now();
    let completions: Vec<_> = leases
        .into_iter()
        .map(|lease| {
            let store = store.clone();
            tokio::spawn(async move { store.complete(&lease, &response(), LONG).await })
        })
        .collect();
    let mut written = Vec::new();
    for task in completions {
        written.push(task.await.unwrap().unwrap());
    }
    let after = SystemTime::now();
    for (rid, written) in ids.iter().zip(written) {
        // Retention from the completion, by whichever clock the store keeps
        // (the same machine's here).
        let slack = Duration::from_secs(1);
        assert!(written + slack >= before + LONG, "{rid:?}");
        assert!(written <= after + LONG + slack, "{rid:?}");
        let info = store.records(&rid.route, &rid.key).await.unwrap();
        assert_eq!(info[0].expires_at, Some(written), "{rid:?}: shown");
        for n in 1..=2 {
            let (reservation, kept) = store.reserve_with_expiry(rid, "fp", LONG).await.unwrap();
            assert_eq!(reservation, Reservation::Completed(response()), "{rid:?}");
            let kept = kept.expect("a replay tells its expiry");
            assert_eq!(kept.expires_at, written, "{rid:?}: replay {n}");
            assert!(kept.expires_here <= after + LONG + slack, "{rid:?}");
        }
    }
}

pub async fn purge_all_scopes(store: Arc<dyn Store>) {
    for scope in ["s1", "s2", "s3"] {
        let rid = RecordId {
            scope: scope.into(),
            ..id("k")
        };
        let lease = reserved(&store, &rid, "fp", LONG).await;
        if scope == "s2" {
            store.complete(&lease, &response(), LONG).await.unwrap();
        }
    }
    reserved(&store, &id("untouched"), "fp", LONG).await;
    assert_eq!(store.records("orders", "k").await.unwrap().len(), 3);
    assert_eq!(store.purge("orders", "k").await.unwrap(), 3);
    assert!(store.records("orders", "k").await.unwrap().is_empty());
    assert_eq!(store.purge("orders", "k").await.unwrap(), 0);
    assert_eq!(store.records("orders", "untouched").await.unwrap().len(), 1);
    reserved(&store, &id("k"), "fp", LONG).await;
}

/// Completed records past retention go, and so do in-flight records whose
/// lease ran out without an answer (the same request would take the key
/// over, another is refused until then); live leases and unexpired records
/// stay.
pub async fn sweep_expired_records_and_dead_leases(store: Arc<dyn Store>) {
    for i in 0..5 {
        let lease = reserved(&store, &id(&format!("old{i}")), "fp", LONG).await;
        store.complete(&lease, &response(), SHORT).await.unwrap();
    }
    let live = reserved(&store, &id("live"), "fp", LONG).await;
    store.complete(&live, &response(), LONG).await.unwrap();
    reserved(&store, &id("flying"), "fp", LONG).await;
    let dead = reserved(&store, &id("stale-lease"), "fp", SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;

    assert_eq!(store.sweep(4).await.unwrap(), 4);
    assert_eq!(store.sweep(4).await.unwrap(), 2);
    assert_eq!(store.sweep(4).await.unwrap(), 0);
    for key in ["live", "flying"] {
        assert_eq!(
            store.records("orders", key).await.unwrap().len(),
            1,
            "{key}"
        );
    }
    for i in 0..5 {
        let key = format!("old{i}");
        assert!(store.records("orders", &key).await.unwrap().is_empty());
    }
    assert!(
        store
            .records("orders", "stale-lease")
            .await
            .unwrap()
            .is_empty()
    );
    // The dead lease's late answer is refused, as after a takeover.
    let late = store.complete(&dead, &response(), LONG).await;
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    // Its record gone, the key is free to any request.
    reserved(&store, &id("stale-lease"), "other", LONG).await;
}

pub async fn concurrent_reservations(store: Arc<dyn Store>) {
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.reserve(&id("hot"), "fp", LONG).await
            })
        })
        .collect();
    let (mut reserved, mut in_flight) = (0, 0);
    for task in tasks {
        match task.await.unwrap().unwrap() {
            Reservation::Reserved(_) => reserved += 1,
            Reservation::InFlight { .. } => in_flight += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((reserved, in_flight), (1, 63));
}

pub async fn scopes_independent(store: Arc<dyn Store>) {
    let a = id("k");
    let b = RecordId {
        scope: "scope-b".into(),
        ..id("k")
    };
    let lease_a = reserved(&store, &a, "fp", LONG).await;
    let lease_b = reserved(&store, &b, "other", LONG).await;
    store.complete(&lease_a, &response(), LONG).await.unwrap();
    assert!(matches!(
        store.reserve(&b, "other", LONG).await.unwrap(),
        Reservation::InFlight { .. }
    ));
    store.release(&lease_b).await.unwrap();
    assert_eq!(
        store.reserve(&a, "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    reserved(&store, &b, "fp", LONG).await;
}

pub async fn guard_drop_releases(store: Arc<dyn Store>) {
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    drop(LeaseGuard::new(store.clone(), lease));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while !store.records("orders", "k").await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "key still held after 1s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reserved(&store, &id("k"), "fp", LONG).await;
}

/// For a store with its in-memory copies (`ReplayCache`), of at most
/// 1 MiB: lookups of an answer too large to copy that arrive while one
/// read of it runs share that read, one body for all (a mismatch for a
/// lookup under another fingerprint); a lookup after it reads again, and a
/// purge still deletes the record.
pub async fn concurrent_replays_of_a_large_answer_share_one_read(store: Arc<dyn Store>) {
    let large = StoredResponse {
        body: Bytes::from(vec![b'x'; 2 << 20]),
        ..response()
    };
    let lease = reserved(&store, &id("large"), "fp", LONG).await;
    store.complete(&lease, &large, LONG).await.unwrap();

    let lookups = (0..24).map(|n| {
        let store = store.clone();
        async move {
            let fingerprint = if n % 6 == 5 { "other" } else { "fp" };
            (
                fingerprint,
                store.reserve(&id("large"), fingerprint, LONG).await,
            )
        }
    });
    let mut bodies = Vec::new();
    for (fingerprint, found) in futures_util::future::join_all(lookups).await {
        match (fingerprint, found) {
            ("fp", Ok(Reservation::Completed(answer))) => {
                assert_eq!(answer.body, large.body);
                bodies.push(answer.body);
            }
            ("other", Ok(Reservation::Mismatch)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(bodies.len(), 20);
    assert!(
        bodies
            .iter()
            .all(|body| body.as_ptr() == bodies[0].as_ptr()),
        "one read, one body, for every lookup during it"
    );

    let Ok(Reservation::Completed(after)) = store.reserve(&id("large"), "fp", LONG).await else {
        panic!("no replay after the read");
    };
    assert_ne!(after.body.as_ptr(), bodies[0].as_ptr(), "read again");
    assert_eq!(store.purge("orders", "large").await.unwrap(), 1);
    reserved(&store, &id("large"), "fp", LONG).await;
}
