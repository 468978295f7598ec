//! Model-based property test of the store contract, generic over backends.
//!
//! proptest generates random interleavings of `reserve`, `complete`,
//! `release`, clock advances (lease expiry and takeover), concurrent races of
//! several holders for one key, `sweep` and `records`, across a few keys,
//! scopes, holders and fingerprints. Each observed result is checked against a
//! small model of what the contract allows:
//!
//! - never two live leases for one key (a `Reserved` only when the previous
//!   lease is expired, released or completed; at most one winner in a race);
//! - fencing tokens strictly increase per key;
//! - no completion by a fenced holder (`Err(Fenced)`, and the stored answer
//!   stays the one completion);
//! - a replay equals the one completion, byte for byte;
//! - `Mismatch` exactly when the fingerprints differ, and a key whose lease
//!   ran out without an answer taken over by the same fingerprint only
//!   (another is refused until a sweep deletes the record);
//! - `records` and `sweep` agree with the model.
//!
//! **Time.** A backend comes with a [`TestClock`]. With [`ManualClock`] (the
//! store reads the same clock) time only moves on `Advance`, so every expiry is
//! decided exactly. With [`RealClock`] (a store with its own clock, e.g. a
//! database's `now()`), `Advance` sleeps and the model reads each operation's
//! [before, after] window: a lease or retention that ends inside the window may
//! be seen either way, and the model follows what the store reported.
//!
//! A backend's test file calls [`check`] with a constructor of fresh, empty
//! backends (see `store_model_embedded.rs`).

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use idemgate::store::{
    Lease, RecordId, RecordInfo, RecordState, Reservation, Store, StoreError, StoredResponse,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Lease of every reservation.
pub const LEASE: Duration = Duration::from_millis(50);
/// Retention of every completion.
pub const RETAIN: Duration = Duration::from_millis(120);

const ROUTE: &str = "model";
/// Record ids: two key names, the first in two scopes (`records` lists both).
const IDS: &[(&str, &str)] = &[("s1", "k0"), ("s2", "k0"), ("s1", "k1")];
const HOLDERS: usize = 5;
const FPS: &[&str] = &["fp-a", "fp-b"];

/// The clock the model reads; for [`ManualClock`] also the store's.
#[async_trait::async_trait]
pub trait TestClock: Send + Sync {
    fn now(&self) -> SystemTime;
    async fn advance(&self, by: Duration);
}

/// A clock that moves only when told to, in whole milliseconds.
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            ms: AtomicU64::new(1_700_000_000_000),
        })
    }

    /// The same clock, in the form `EmbeddedStore::open_with_clock` takes.
    pub fn store_clock(self: &Arc<Self>) -> idemgate::store::embedded::WallClock {
        let clock = self.clone();
        Arc::new(move || clock.now())
    }
}

#[async_trait::async_trait]
impl TestClock for ManualClock {
    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.ms.load(Ordering::SeqCst))
    }
    async fn advance(&self, by: Duration) {
        self.ms.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

/// Wall-clock time, for stores that keep their own clock; `advance` sleeps.
pub struct RealClock;

#[async_trait::async_trait]
impl TestClock for RealClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

/// One fresh, empty backend for one case. `guard` drops after `store` (e.g. a
/// temporary directory).
pub struct Backend {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn TestClock>,
    pub guard: Box<dyn Send>,
}

#[derive(Debug, Clone)]
pub enum Op {
    Reserve {
        holder: usize,
        id: usize,
        fp: usize,
    },
    Complete {
        holder: usize,
        id: usize,
        status: u16,
    },
    Release {
        holder: usize,
        id: usize,
    },
    Advance {
        ms: u64,
    },
    /// Several holders reserve one id at the same time.
    Race {
        id: usize,
        racers: Vec<(usize, usize)>,
    },
    Sweep,
    Inspect {
        key: usize,
    },
}

pub fn op() -> impl Strategy<Value = Op> {
    let holder = 0..HOLDERS;
    let id = 0..IDS.len();
    let fp = 0..FPS.len();
    prop_oneof![
        5 => (holder.clone(), id.clone(), fp.clone())
            .prop_map(|(holder, id, fp)| Op::Reserve { holder, id, fp }),
        4 => (holder.clone(), id.clone(), prop::sample::select(vec![200u16, 201, 500]))
            .prop_map(|(holder, id, status)| Op::Complete { holder, id, status }),
        1 => (holder.clone(), id.clone()).prop_map(|(holder, id)| Op::Release { holder, id }),
        3 => (10u64..=80).prop_map(|ms| Op::Advance { ms }),
        1 => (id, prop::collection::vec((holder, fp), 2..=5))
            .prop_map(|(id, racers)| Op::Race { id, racers }),
        1 => Just(Op::Sweep),
        1 => (0..2usize).prop_map(|key| Op::Inspect { key }),
    ]
}

pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..48)
}

/// Runs `cases` random cases (`PROPTEST_CASES` overrides), each on a fresh
/// backend from `make`; panics with the shrunk failing sequence.
pub fn check<F, Fut>(cases: u32, make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Backend>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    let mut runner = TestRunner::new(config);
    let result = runner.run(&ops(), |ops| {
        rt.block_on(async {
            let backend = make().await;
            let outcome = run_case(&backend, &ops).await;
            drop(backend);
            outcome
        })
        .map_err(TestCaseError::fail)
    });
    if let Err(error) = result {
        panic!("store model: {error}");
    }
}

fn record_id(id: usize) -> RecordId {
    RecordId {
        route: ROUTE.into(),
        scope: IDS[id].0.into(),
        key: IDS[id].1.into(),
    }
}

/// A distinct answer per (holder, token), with bytes that must round-trip.
fn response(holder: usize, token: i64, status: u16) -> StoredResponse {
    StoredResponse {
        status,
        headers: StoredResponse::header_list(vec![
            ("x-holder", holder.to_string().into_bytes()),
            ("x-bin", vec![0, 0xff, b'\t', token as u8]),
            ("set-cookie", b"a=1".to_vec()),
            ("set-cookie", b"b=2".to_vec()),
        ]),
        body: Bytes::from(format!("holder {holder} token {token}\0\u{e9}")),
        body_omitted: holder == 4,
        outcome_unknown: false,
    }
}

fn trunc_ms(t: SystemTime) -> SystemTime {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[derive(Debug, Clone)]
enum Slot {
    Free,
    InFlight {
        fp: usize,
        token: i64,
        expires: SystemTime,
        /// A sweep may have deleted it (only when its lease's end was ambiguous).
        maybe_swept: bool,
    },
    Completed {
        fp: usize,
        response: StoredResponse,
        /// Retention ends somewhere in [lo, hi] (lo == hi with a manual clock).
        lo: SystemTime,
        hi: SystemTime,
        /// A sweep may have deleted it (only when its expiry was ambiguous).
        maybe_swept: bool,
    },
}

/// Whether a record is live at some instant of an operation's [before, after].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    Yes,
    No,
    Either,
}

/// How long past a lease's end on file the store that granted it may still
/// hold it: the embedded store also times a lease it holds by the monotonic
/// clock (a forward step of the wall clock must not end it), from the same
/// moment as the wall-clock end it writes, which is cut to whole
/// milliseconds; so its own end falls up to a millisecond later.
const HELD_PAST_ITS_END: Duration = Duration::from_millis(2);

/// Live iff its end is after the store's now.
fn live(lo: SystemTime, hi: SystemTime, before: SystemTime, after: SystemTime) -> Live {
    if lo > after {
        Live::Yes
    } else if hi <= before {
        Live::No
    } else {
        Live::Either
    }
}

impl Slot {
    fn live(&self, before: SystemTime, after: SystemTime) -> Live {
        match self {
            Slot::Free => Live::No,
            // Up to `HELD_PAST_ITS_END` past its end on file, a lease may
            // still be held by the store that granted it (below).
            Slot::InFlight { expires, .. } => {
                live(*expires, *expires + HELD_PAST_ITS_END, before, after)
            }
            Slot::Completed { lo, hi, .. } => live(*lo, *hi, before, after),
        }
    }

    /// Whether the record keeps a reserve of `fp` from the key: while it
    /// is live, and while it is in flight under another fingerprint,
    /// expired or not (a dead holder may have run its request), until a
    /// sweep deletes it.
    fn blocks(&self, fp: usize, before: SystemTime, after: SystemTime) -> Live {
        match self {
            Slot::InFlight {
                fp: held,
                maybe_swept,
                ..
            } if *held != fp => match (self.live(before, after), maybe_swept) {
                (Live::Yes, _) | (_, false) => Live::Yes,
                (_, true) => Live::Either,
            },
            _ => self.live(before, after),
        }
    }

    fn maybe_swept(&self) -> bool {
        match self {
            Slot::Free => false,
            Slot::InFlight { maybe_swept, .. } | Slot::Completed { maybe_swept, .. } => {
                *maybe_swept
            }
        }
    }

    fn mark_maybe_swept(&mut self) {
        if let Slot::InFlight { maybe_swept, .. } | Slot::Completed { maybe_swept, .. } = self {
            *maybe_swept = true;
        }
    }
}

struct Model {
    slots: Vec<Slot>,
    /// The latest lease each holder got for each id (possibly fenced since).
    leases: Vec<Vec<Option<Lease>>>,
    last_token: Vec<i64>,
}

type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

impl Model {
    fn new() -> Model {
        Model {
            slots: vec![Slot::Free; IDS.len()],
            leases: vec![vec![None; IDS.len()]; HOLDERS],
            last_token: vec![i64::MIN; IDS.len()],
        }
    }

    /// A new lease was granted: check it, then hold it.
    fn granted(
        &mut self,
        holder: usize,
        id: usize,
        fp: usize,
        lease: &Lease,
        before: SystemTime,
        after: SystemTime,
    ) -> Check {
        ensure!(
            lease.id == record_id(id),
            "lease for the wrong id: {lease:?}"
        );
        ensure!(
            lease.token > self.last_token[id],
            "fencing token not increasing: {} after {}",
            lease.token,
            self.last_token[id]
        );
        ensure!(
            lease.expires_at >= trunc_ms(before) + LEASE && lease.expires_at <= after + LEASE,
            "lease expiry {:?} outside [{:?}, {:?}] + {LEASE:?}",
            lease.expires_at,
            before,
            after
        );
        self.last_token[id] = lease.token;
        self.slots[id] = Slot::InFlight {
            fp,
            token: lease.token,
            expires: lease.expires_at,
            maybe_swept: false,
        };
        self.leases[holder][id] = Some(lease.clone());
        Ok(())
    }

    /// What a reserve of `fp` that was not granted may see while `slot` is live.
    fn seen_live(slot: &Slot, fp: usize, got: &Reservation) -> bool {
        match (slot, got) {
            (
                Slot::InFlight {
                    fp: held, expires, ..
                },
                Reservation::InFlight { lease_expires_at },
            ) => *held == fp && lease_expires_at == expires,
            (Slot::InFlight { fp: held, .. }, Reservation::Mismatch) => *held != fp,
            (
                Slot::Completed {
                    fp: held, response, ..
                },
                Reservation::Completed(replay),
            ) => *held == fp && replay == response,
            (Slot::Completed { fp: held, .. }, Reservation::Mismatch) => *held != fp,
            _ => false,
        }
    }
}

async fn run_case(backend: &Backend, ops: &[Op]) -> Check {
    let store = &backend.store;
    let clock = &backend.clock;
    let mut model = Model::new();
    for (step, op) in ops.iter().enumerate() {
        apply(store, clock.as_ref(), &mut model, op)
            .await
            .map_err(|e| format!("step {step} {op:?}: {e}"))?;
    }
    // Finally every key must still read as the model says.
    for key in 0..2 {
        apply(store, clock.as_ref(), &mut model, &Op::Inspect { key })
            .await
            .map_err(|e| format!("final inspect: {e}"))?;
    }
    Ok(())
}

fn unavailable(e: StoreError) -> String {
    format!("store error: {e}")
}

async fn apply(store: &Arc<dyn Store>, clock: &dyn TestClock, model: &mut Model, op: &Op) -> Check {
    match *op {
        Op::Reserve { holder, id, fp } => {
            let before = clock.now();
            let got = store
                .reserve(&record_id(id), FPS[fp], LEASE)
                .await
                .map_err(unavailable)?;
            let after = clock.now();
            let slot = model.slots[id].clone();
            let live = slot.blocks(fp, before, after);
            match &got {
                Reservation::Reserved(lease) => {
                    ensure!(
                        live != Live::Yes,
                        "granted {lease:?} while {slot:?} holds the key (live, or in flight under another fingerprint)"
                    );
                    model.granted(holder, id, fp, lease, before, after)?;
                }
                other => {
                    ensure!(
                        live != Live::No,
                        "expected Reserved (record {slot:?} is gone or expired), got {other:?}"
                    );
                    ensure!(
                        Model::seen_live(&slot, fp, other),
                        "{other:?} does not match {slot:?} for fingerprint {}",
                        FPS[fp]
                    );
                }
            }
        }
        Op::Race { id, ref racers } => {
            let before = clock.now();
            let calls = racers.iter().map(|&(_, fp)| {
                let store = store.clone();
                async move { store.reserve(&record_id(id), FPS[fp], LEASE).await }
            });
            let results = futures_util::future::join_all(calls).await;
            let after = clock.now();
            let mut got = Vec::with_capacity(results.len());
            for result in results {
                got.push(result.map_err(unavailable)?);
            }
            let slot = model.slots[id].clone();
            let blocks: Vec<Live> = racers
                .iter()
                .map(|&(_, fp)| slot.blocks(fp, before, after))
                .collect();
            // The winners in the order the store served them.
            let mut winners: Vec<(usize, &Lease)> = got
                .iter()
                .enumerate()
                .filter_map(|(i, r)| match r {
                    Reservation::Reserved(lease) => Some((i, lease)),
                    _ => None,
                })
                .collect();
            winners.sort_by_key(|(_, lease)| lease.token);
            for &(i, _) in &winners {
                ensure!(
                    blocks[i] != Live::Yes,
                    "race won by racer {i} (fingerprint {}) while {slot:?} holds the key: {got:?}",
                    FPS[racers[i].1]
                );
            }
            ensure!(
                !blocks.contains(&Live::No) || !winners.is_empty(),
                "nobody won a race for a key free to one of them: {got:?}"
            );
            for pair in winners.windows(2) {
                ensure!(
                    pair[0].1.expires_at <= after,
                    "two live leases for one key: {:?} and {:?}",
                    pair[0].1,
                    pair[1].1
                );
            }
            // States a loser may have seen: the previous record (if it may
            // have kept the key from it) or any winner's lease.
            let won: Vec<Slot> = winners
                .iter()
                .map(|&(i, lease)| Slot::InFlight {
                    fp: racers[i].1,
                    token: lease.token,
                    expires: lease.expires_at,
                    maybe_swept: false,
                })
                .collect();
            for (i, result) in got.iter().enumerate() {
                if matches!(result, Reservation::Reserved(_)) {
                    continue;
                }
                let fp = racers[i].1;
                let mut seen = won.clone();
                if blocks[i] != Live::No {
                    seen.push(slot.clone());
                }
                ensure!(
                    seen.iter().any(|s| Model::seen_live(s, fp, result)),
                    "racer {i} (fingerprint {}) saw {result:?}, none of {seen:?}",
                    FPS[fp]
                );
            }
            for &(i, lease) in &winners {
                let (holder, fp) = racers[i];
                model.granted(holder, id, fp, lease, before, after)?;
            }
        }
        Op::Complete { holder, id, status } => {
            let Some(lease) = model.leases[holder][id].clone() else {
                return Ok(());
            };
            let answer = response(holder, lease.token, status);
            let before = clock.now();
            let got = store.complete(&lease, &answer, RETAIN).await;
            let after = clock.now();
            let slot = model.slots[id].clone();
            let holds = matches!(slot, Slot::InFlight { token, .. } if token == lease.token);
            match got {
                Ok(expires_at) => {
                    ensure!(
                        holds,
                        "completion by a fenced holder accepted: {lease:?}, record {slot:?}"
                    );
                    let Slot::InFlight { fp, .. } = slot else {
                        unreachable!()
                    };
                    let (lo, hi) = (trunc_ms(before) + RETAIN, after + RETAIN);
                    ensure!(
                        lo <= expires_at && expires_at <= hi,
                        "completion's expiry {expires_at:?} outside [{lo:?}, {hi:?}]"
                    );
                    model.slots[id] = Slot::Completed {
                        fp,
                        response: answer,
                        lo,
                        hi,
                        maybe_swept: false,
                    };
                }
                Err(StoreError::Fenced) => {
                    // A dead lease the sweep may have deleted is fenced too.
                    ensure!(
                        !holds || slot.maybe_swept(),
                        "the holder of the live lease was fenced: {lease:?}"
                    );
                    if holds {
                        model.slots[id] = Slot::Free;
                    }
                }
                Err(e) => return Err(unavailable(e)),
            }
        }
        Op::Release { holder, id } => {
            let Some(lease) = model.leases[holder][id].clone() else {
                return Ok(());
            };
            store
                .release(&lease)
                .await
                .map_err(|e| format!("release must succeed (a no-op when fenced): {e}"))?;
            if matches!(model.slots[id], Slot::InFlight { token, .. } if token == lease.token) {
                model.slots[id] = Slot::Free;
            }
        }
        Op::Advance { ms } => clock.advance(Duration::from_millis(ms)).await,
        Op::Sweep => {
            let before = clock.now();
            let swept = store.sweep(1000).await.map_err(unavailable)?;
            let after = clock.now();
            let mut certain = 0;
            let mut possible = 0;
            // Completed records past retention and in-flight ones past
            // their lease both go.
            for slot in &mut model.slots {
                match slot.live(before, after) {
                    Live::No if matches!(slot, Slot::Free) => {}
                    Live::No => {
                        // One an earlier sweep may have taken already.
                        certain += u64::from(!slot.maybe_swept());
                        possible += 1;
                        *slot = Slot::Free;
                    }
                    Live::Either => {
                        possible += 1;
                        // Still readable as it was, or gone.
                        slot.mark_maybe_swept();
                    }
                    Live::Yes => {}
                }
            }
            ensure!(
                (certain..=possible).contains(&swept),
                "swept {swept}, expected {certain}..={possible}"
            );
        }
        Op::Inspect { key } => {
            let name = ["k0", "k1"][key];
            let mut got: Vec<RecordInfo> = store.records(ROUTE, name).await.map_err(unavailable)?;
            got.sort_by(|a, b| a.scope.cmp(&b.scope));
            let mut rows = got.iter();
            for (id, (scope, _)) in IDS.iter().enumerate().filter(|(_, (_, k))| *k == name) {
                let slot = &model.slots[id];
                let optional = slot.maybe_swept();
                let next = rows.as_slice().first().filter(|r| r.scope == *scope);
                let Some(row) = next else {
                    ensure!(
                        matches!(slot, Slot::Free) || optional,
                        "records: no row for scope {scope}, model has {slot:?}"
                    );
                    continue;
                };
                rows.next();
                match slot {
                    Slot::Free => return Err(format!("records: unexpected row {row:?}")),
                    Slot::InFlight { fp, expires, .. } => {
                        ensure!(
                            row.state == RecordState::InFlight
                                && row.fingerprint == FPS[*fp]
                                && row.status.is_none()
                                && row.completed_at.is_none()
                                && row.expires_at.is_none()
                                && row.lease_expires_at == Some(*expires),
                            "records: {row:?} is not in flight as {slot:?}"
                        );
                    }
                    Slot::Completed {
                        fp,
                        response,
                        lo,
                        hi,
                        ..
                    } => {
                        ensure!(
                            row.state == RecordState::Completed
                                && row.fingerprint == FPS[*fp]
                                && row.status == Some(response.status)
                                && row.completed_at.is_some()
                                && row.lease_expires_at.is_none()
                                && row.expires_at.is_some_and(|at| at >= *lo && at <= *hi),
                            "records: {row:?} is not completed as {slot:?}"
                        );
                    }
                }
            }
            ensure!(rows.next().is_none(), "records: extra rows {got:?}");
        }
    }
    Ok(())
}
