//! The bound on request bodies held in memory at once, over every
//! connection (`server.max_buffered_bodies`). A keyed request's body is read
//! whole (for its key and its fingerprint, or a webhook's signature) and
//! kept until it is written to the upstream, a free connection to which it
//! may wait for; without a bound, many large bodies at once would take the
//! process's memory (docs/behaviour.md, "Memory").
//!
//! A body's bytes are taken from the budget as they arrive (never all at
//! once when `Content-Length` announces them: a slow sender would hold what
//! it has not sent), and go back when the last copy of the body is
//! dropped: the read body owns its share ([`hold_with`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// Bytes of request bodies the process may hold at once. Cloned, it is the
/// same budget.
#[derive(Clone)]
pub struct BodyBudget {
    /// Bytes free now.
    room: Arc<AtomicUsize>,
    total: usize,
}

/// The budget has no room for what a body needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

impl BodyBudget {
    pub fn new(bytes: u64) -> Self {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        Self {
            room: Arc::new(AtomicUsize::new(bytes)),
            total: bytes,
        }
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
        self.room.load(Ordering::Acquire)
    }

    /// Bytes held now (`idemgate_buffered_body_bytes`).
    pub fn held(&self) -> usize {
        self.total.saturating_sub(self.available())
    }
}

/// One body's part of the budget, given back when dropped.
pub struct Share {
    room: Arc<AtomicUsize>,
    held: usize,
}

impl Share {
    /// Takes `bytes` more, or nothing when the budget has not that much
    /// free: the body is refused rather than waited for (a wait would let
    /// slow senders hold everyone else's requests).
    pub fn take(&mut self, bytes: usize) -> Result<(), Exhausted> {
        if bytes == 0 {
            return Ok(());
        }
        // Any size, all or nothing (a body may pass 4 GiB).
        self.room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(bytes)
            })
            .map_err(|_| Exhausted)?;
        self.held += bytes;
        Ok(())
    }

    pub fn held(&self) -> usize {
        self.held
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
    fn a_share_of_nothing_leaves_the_body_as_it_was() {
        let budget = BodyBudget::new(10);
        let body = Bytes::from_static(b"abc");
        let same = hold_with(body.clone(), budget.share());
        assert_eq!(same.as_ptr(), body.as_ptr());
        assert_eq!(budget.available(), 10);
    }
}
