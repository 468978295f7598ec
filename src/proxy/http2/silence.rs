//! A connection that went silent: the upstream sent nothing at all on it
//! (no frame of any stream, no PING, no end) for a request's whole
//! `timeout`. Every stream goes on the one connection, so one whose peer
//! is gone without a FIN or a reset (a hung process, a dropped route) would
//! take each request after, and leave each one's outcome unknown until the
//! kernel gives up on it, many minutes later; a new connection may well be
//! answered. As an HTTP/1 connection whose request timed out is not used
//! again, such a connection is let go of (mod.rs): the next request opens a
//! new one, and the streams still on the old one run on until they end.
//!
//! A connection that answered other streams meanwhile is alive, and only
//! that request was slow: it is kept.

use std::sync::{Arc, Mutex, PoisonError};

use super::connections::Offered;

/// The connection a request was last handed to, and what had been read on
/// it by then; nothing before the request reached a connection.
#[derive(Default)]
pub struct Handed(Mutex<Option<Carrier>>);

struct Carrier {
    connection: u64,
    offered: Arc<Offered>,
    heard: u64,
}

impl Handed {
    /// The request is about to go on `connection`.
    pub(super) fn to(&self, connection: u64, offered: Arc<Offered>) {
        let heard = offered.heard();
        *self.lock() = Some(Carrier {
            connection,
            offered,
            heard,
        });
    }

    /// The connection the request went on, when nothing was read on it
    /// since the request was handed to it.
    pub(super) fn silent(&self) -> Option<u64> {
        let carrier = self.lock().take()?;
        (carrier.offered.heard() == carrier.heard).then_some(carrier.connection)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Carrier>> {
        // Only ever replaced whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
