//! Whether a request has left the gateway's hands: the moment its first
//! byte is to be written to an HTTP/1 connection, or it is given to hyper
//! for an HTTP/2 stream. Before that it may wait for a connection, a
//! connect or a stream place, and the upstream has none of it.
//!
//! A caller may also give up on sending (`give_up`), honoured only up to
//! that moment: once the signal is given, nothing more goes out, even when
//! a connection or a place comes free on the same poll; a request already
//! handed over is left to run.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

use super::error::UpstreamError;

#[derive(Debug, Default)]
pub struct Handover {
    /// `None` for a caller that never gives up: a plain request costs no
    /// token.
    give_up: Option<CancellationToken>,
    handed: AtomicBool,
}

impl Handover {
    /// A request not sent once `give_up` is cancelled.
    pub fn unless(give_up: CancellationToken) -> Self {
        Self {
            give_up: Some(give_up),
            handed: AtomicBool::new(false),
        }
    }

    /// The request is about to go out, unless its caller gave up: from here
    /// the upstream may have some of it. Called just before, never after,
    /// so that one read as not handed over never reached the upstream.
    pub(super) fn hand_over(&self) -> Result<(), UpstreamError> {
        if self
            .give_up
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Err(UpstreamError::GivenUp);
        }
        // Set and read by the task that sends the request: no other
        // memory is published with it.
        self.handed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the upstream may have any of the request.
    pub fn happened(&self) -> bool {
        self.handed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given up before: nothing goes, and it reads as never handed over.
    /// After: the signal changes nothing, the request is out.
    #[test]
    fn the_signal_counts_only_before_the_handover() {
        let give_up = CancellationToken::new();
        let before = Handover::unless(give_up.clone());
        let after = Handover::unless(give_up.clone());
        assert!(after.hand_over().is_ok());
        give_up.cancel();
        assert!(matches!(before.hand_over(), Err(UpstreamError::GivenUp)));
        assert!(!before.happened());
        assert!(after.happened());
        let plain = Handover::default();
        assert!(plain.hand_over().is_ok() && plain.happened());
    }
}
