//! The bound on bodies held in memory at once, over every connection
//! (`server.max_buffered_bodies`). A keyed request's body is read whole (for
//! its key and its fingerprint, or a webhook's signature) and kept until it
//! is written to the upstream, a free connection to which it may wait for
//! (so is a small pass-through body, read whole before it is sent on:
//! `body::counted`);
//! a stored or replayed answer is kept until its client has taken it; an
//! HTTP/2 request's head while its request is handled
//! (`crate::gateway`'s `stream_head`). Without
//! a bound, many large bodies at once, or many clients that take nothing of
//! large answers, would take the process's memory (docs/behaviour.md, "Memory").
//!
//! A body's bytes are taken from the budget as they arrive (never all at
//! once when `Content-Length` announces them: a slow sender would hold what
//! it has not sent), and go back when the last copy of the body is
//! dropped: the read body owns its share ([`hold_with`]). A fresh answer,
//! whose request already ran, is never refused: it is taken even past the
//! bound ([`Share::take_past`]), and until the room is back no new request
//! is let in ([`BodyBudget::is_over`]).
//!
//! Replays count the memory they hold, not the clients they serve: the
//! replays of one stored answer given from one buffer (the copy kept in
//! memory, or a store read they shared) hold its bytes once, and count
//! them once while any of them holds it ([`BodyBudget::hold_replay`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;

/// Bytes of bodies the process may hold at once. Cloned, it is the
/// same budget.
#[derive(Clone)]
pub struct BodyBudget {
    /// Bytes free now; below zero when answers were taken past the bound.
    room: Arc<AtomicI64>,
    total: i64,
    /// The buffers replays hold now, each with its one share.
    replays: Arc<Replays>,
}

/// A buffer by its address and length: while one of its holds lives, the
/// hold keeps the buffer, so no other buffer can have both.
type BufferId = (usize, usize);

#[derive(Default)]
struct Replays(Mutex<foldhash::HashMap<BufferId, Weak<ReplayHold>>>);

/// The share of one buffer that replays hold, given back when the last of
/// them goes.
struct ReplayHold {
    _share: Share,
    buffer: BufferId,
    replays: Weak<Replays>,
}

/// The budget has no room for what a body needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no room left in server.max_buffered_bodies")]
pub struct Exhausted;

impl BodyBudget {
    pub fn new(bytes: u64) -> Self {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        Self {
            room: Arc::new(AtomicI64::new(bytes)),
            total: bytes,
            replays: Arc::default(),
        }
    }

    /// A replayed answer's body, holding its share until its last copy is
    /// dropped: its length is taken (unless the budget is past its bound,
    /// as [`Share::take_unless_over`]) by the first replay that holds its
    /// buffer, and by none of those that hold it beside that one, as they
    /// hold no more memory.
    pub fn hold_replay(&self, body: Bytes) -> Result<Bytes, Exhausted> {
        if body.is_empty() {
            return Ok(body);
        }
        let buffer = (body.as_ptr() as usize, body.len());
        let hold = {
            let mut held = (self.replays.0.lock()).unwrap_or_else(PoisonError::into_inner);
            match held.get(&buffer).and_then(Weak::upgrade) {
                Some(hold) => hold,
                None => {
                    let mut share = self.share();
                    share.take_unless_over(body.len())?;
                    let hold = Arc::new(ReplayHold {
                        _share: share,
                        buffer,
                        replays: Arc::downgrade(&self.replays),
                    });
                    held.insert(buffer, Arc::downgrade(&hold));
                    hold
                }
            }
        };
        Ok(Bytes::from_owner(Replayed { body, _hold: hold }))
    }

    /// A share of nothing yet, for one body.
    pub fn share(&self) -> Share {
        Share {
            room: self.room.clone(),
            held: 0,
        }
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        usize::try_from(self.room.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// Whether answers taken past the bound are held now.
    pub fn is_over(&self) -> bool {
        self.room.load(Ordering::Acquire) < 0
    }

    /// Bytes held now (`idemgate_buffered_body_bytes`).
    pub fn held(&self) -> usize {
        let held = self.total.saturating_sub(self.room.load(Ordering::Acquire));
        usize::try_from(held).unwrap_or(0)
    }
}

/// One body's part of the budget, given back when dropped.
pub struct Share {
    room: Arc<AtomicI64>,
    held: i64,
}

impl Share {
    /// Takes `bytes` more, or nothing when the budget has not that much
    /// free: the body is refused rather than waited for (a wait would let
    /// slow senders hold everyone else's requests).
    pub fn take(&mut self, bytes: usize) -> Result<(), Exhausted> {
        if bytes == 0 {
            return Ok(());
        }
        let bytes = i64::try_from(bytes).map_err(|_| Exhausted)?;
        // Any size, all or nothing (a body may pass 4 GiB).
        self.room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                (free >= bytes).then(|| free - bytes)
            })
            .map_err(|_| Exhausted)?;
        self.held += bytes;
        Ok(())
    }

    /// Takes `bytes` unless the budget is already past its bound, even if
    /// they pass it: a stored answer may be longer than the whole budget
    /// (`max_stored_response` over `max_buffered_bodies`), and must still
    /// replay. Atomic, so answers taken at once pass the bound by one of
    /// them at most.
    pub fn take_unless_over(&mut self, bytes: usize) -> Result<(), Exhausted> {
        let bytes = i64::try_from(bytes).map_err(|_| Exhausted)?;
        self.room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                (free >= 0).then(|| free.saturating_sub(bytes))
            })
            .map_err(|_| Exhausted)?;
        self.held = self.held.saturating_add(bytes);
        Ok(())
    }

    /// Takes `bytes` whether or not they fit: an answer whose request ran
    /// cannot be refused.
    pub fn take_past(&mut self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.room.fetch_sub(bytes, Ordering::AcqRel);
        self.held = self.held.saturating_add(bytes);
    }

    pub fn held(&self) -> usize {
        usize::try_from(self.held).unwrap_or(usize::MAX)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if self.held > 0 {
            self.room.fetch_add(self.held, Ordering::AcqRel);
        }
    }
}

/// The body's bytes, owning its share: every clone and slice of the
/// returned `Bytes` keeps the share, and the last one dropped returns it.
pub fn hold_with(body: Bytes, share: Share) -> Bytes {
    if share.held() == 0 {
        return body;
    }
    Bytes::from_owner(Held {
        body,
        _share: share,
    })
}

struct Held {
    body: Bytes,
    _share: Share,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

/// One replay's copy of a body whose buffer other replays may hold too.
struct Replayed {
    body: Bytes,
    _hold: Arc<ReplayHold>,
}

impl AsRef<[u8]> for Replayed {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for ReplayHold {
    fn drop(&mut self) {
        let Some(replays) = self.replays.upgrade() else {
            return;
        };
        let mut held = (replays.0.lock()).unwrap_or_else(PoisonError::into_inner);
        // A replay that came as the last one went holds the buffer anew.
        if held
            .get(&self.buffer)
            .is_some_and(|hold| hold.strong_count() == 0)
        {
            held.remove(&self.buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_given_back_when_the_last_copy_of_its_body_goes() {
        let budget = BodyBudget::new(100);
        let mut share = budget.share();
        share.take(60).expect("room");
        let body = hold_with(Bytes::from(vec![7u8; 60]), share);
        assert_eq!(budget.available(), 40);
        let copy = body.clone();
        let slice = body.slice(10..20);
        drop(body);
        drop(copy);
        assert_eq!(budget.available(), 40, "a slice still holds it");
        assert_eq!(&slice[..], &[7u8; 10][..]);
        assert_eq!(budget.held(), 60);
        drop(slice);
        assert_eq!(budget.available(), 100);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn what_does_not_fit_is_refused_and_takes_nothing() {
        let budget = BodyBudget::new(100);
        let mut first = budget.share();
        first.take(80).expect("room");
        let mut second = budget.share();
        assert_eq!(second.take(30), Err(Exhausted));
        assert_eq!(second.held(), 0);
        second.take(20).expect("what is left fits");
        assert_eq!(budget.available(), 0);
        drop(first);
        assert_eq!(budget.available(), 80);
        drop(second);
        assert_eq!(budget.available(), 100);
    }

    /// `max_request_body` may pass 4 GiB, and the budget grows with it: a
    /// body that large is taken, not refused as if the budget were full.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_body_past_4_gib_is_taken_when_it_fits() {
        let budget = BodyBudget::new(6 << 30);
        let mut share = budget.share();
        share.take(5 << 30).expect("fits in 6 GiB");
        assert_eq!(budget.held(), 5 << 30);
        let mut second = budget.share();
        assert_eq!(second.take(2 << 30), Err(Exhausted));
        assert_eq!(budget.held(), 5 << 30, "a refusal takes nothing");
        drop(share);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn an_answer_taken_past_the_bound_is_held_and_refuses_others_until_given_back() {
        let budget = BodyBudget::new(100);
        let mut first = budget.share();
        first.take(80).expect("room");
        assert!(!budget.is_over());
        let mut answer = budget.share();
        answer.take_past(50);
        assert!(budget.is_over());
        assert_eq!(budget.available(), 0);
        assert_eq!(budget.held(), 130);
        assert_eq!(budget.share().take(1), Err(Exhausted));
        assert_eq!(budget.share().take_unless_over(1), Err(Exhausted));
        drop(answer);
        assert!(!budget.is_over());
        assert_eq!(budget.available(), 20);
        // Room left, however little: a longer answer is taken past it.
        let mut replay = budget.share();
        replay.take_unless_over(60).expect("not over");
        assert!(budget.is_over());
        drop((first, replay));
        assert_eq!(budget.held(), 0);
    }

    /// Replays holding one buffer count it once, however many; another
    /// buffer of the same bytes (a store read of its own) counts again;
    /// the share goes back with the last replay, and the buffer held again
    /// after that is counted again.
    #[test]
    fn replays_of_one_buffer_count_it_once() {
        let budget = BodyBudget::new(100);
        let answer = Bytes::from(vec![1u8; 60]);
        let first = budget.hold_replay(answer.clone()).expect("room");
        let others: Vec<Bytes> = (0..5)
            .map(|_| budget.hold_replay(answer.clone()).expect("no more memory"))
            .collect();
        assert_eq!(budget.held(), 60);
        assert!(others.iter().all(|copy| copy.as_ptr() == answer.as_ptr()));

        let read_again = Bytes::from(vec![1u8; 60]);
        let second = budget.hold_replay(read_again).expect("not over yet");
        assert_eq!(budget.held(), 120, "another buffer is more memory");
        assert_eq!(
            budget.hold_replay(Bytes::from(vec![1u8; 60])),
            Err(Exhausted)
        );
        let still = budget.hold_replay(answer.clone()).expect("held already");
        assert_eq!(budget.held(), 120);

        drop((first, others, second));
        assert_eq!(budget.held(), 60, "one replay still holds the first");
        drop(still);
        assert_eq!(budget.held(), 0);
        let again = budget.hold_replay(answer).expect("room");
        assert_eq!(budget.held(), 60);
        drop(again);
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.hold_replay(Bytes::new()), Ok(Bytes::new()));
    }

    #[test]
    fn a_share_of_nothing_leaves_the_body_as_it_was() {
        let budget = BodyBudget::new(10);
        let body = Bytes::from_static(b"abc");
        let same = hold_with(body.clone(), budget.share());
        assert_eq!(same.as_ptr(), body.as_ptr());
        assert_eq!(budget.available(), 10);
    }
}
