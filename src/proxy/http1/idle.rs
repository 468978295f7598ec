//! The idle connections of one pool, and the lease that brings a connection
//! back to them once its answer has been read to the end.

use std::collections::VecDeque;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use super::connection::Connection;

/// Idle connections; the newest at the back (taken first), the oldest at
/// the front (closed first when they have idled `idle_timeout`).
pub struct IdleConnections {
    list: Mutex<VecDeque<Idle>>,
    idle_timeout: Duration,
}

struct Idle {
    connection: Connection,
    since: Instant,
    /// When the idle timeout the upstream announced is near: not taken
    /// after it. `None` when it announced none: then only our own
    /// `idle_timeout` applies, and taking it needs no clock read.
    until: Option<Instant>,
}

/// A connection is not taken for a request this close to the idle timeout
/// the upstream announced (`Keep-Alive: timeout=N`): its close and our
/// request would cross, and a request that is not idempotent cannot go
/// again once its head has left, so its outcome would be unknown.
const BEFORE_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(1);

impl IdleConnections {
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            list: Mutex::new(VecDeque::new()),
            idle_timeout,
        }
    }

    /// The newest idle connection the upstream has not closed meanwhile.
    pub fn take(&self) -> Option<Connection> {
        let mut idle = self.list.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut entry) = idle.pop_back() {
            let near_their_close = entry.until.is_some_and(|until| until <= Instant::now());
            if !near_their_close && entry.connection.is_open() {
                return Some(entry.connection);
            }
        }
        None
    }

    /// Takes back a connection whose answer was read to the end; its
    /// request's permit is given back once it is idle.
    pub fn put_back(&self, mut connection: Connection, permit: OwnedSemaphorePermit) {
        let now = Instant::now();
        if !connection.served_one(now) {
            // Worn out: closed, and the next request opens a new one.
            return;
        }
        let keep = connection
            .idle_timeout()
            .map(|theirs| theirs.saturating_sub(BEFORE_UPSTREAM_TIMEOUT));
        if keep.is_some_and(|keep| keep.is_zero()) {
            // Closed at once: the upstream would close it before any use.
            return;
        }
        let mut idle = self.list.lock().unwrap_or_else(|e| e.into_inner());
        idle.push_back(Idle {
            connection,
            since: now,
            until: keep
                .filter(|keep| *keep < self.idle_timeout)
                .map(|keep| now + keep),
        });
        self.close_expired(&mut idle, now);
        drop(idle);
        drop(permit);
    }

    /// Closes the connections the upstream closed, and those idle too long.
    pub fn reap(&self) {
        let mut idle = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        idle.retain_mut(|entry| {
            entry.until.is_none_or(|until| until > now) && entry.connection.is_open()
        });
        self.close_expired(&mut idle, now);
    }

    /// Closes connections idle longer than `idle_timeout`.
    fn close_expired(&self, idle: &mut VecDeque<Idle>, now: Instant) {
        while idle
            .front()
            .is_some_and(|entry| now.duration_since(entry.since) >= self.idle_timeout)
        {
            idle.pop_front();
        }
    }

    pub fn count(&self) -> usize {
        self.list.lock().map(|idle| idle.len()).unwrap_or(0)
    }
}

/// A connection lent to one request and its answer, with the permit that
/// counts it.
pub struct Lease {
    idle: Weak<IdleConnections>,
    connection: Connection,
    permit: OwnedSemaphorePermit,
}

impl Lease {
    pub fn new(
        idle: Weak<IdleConnections>,
        connection: Connection,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Self {
            idle,
            connection,
            permit,
        }
    }

    pub fn connection(&mut self) -> &mut Connection {
        &mut self.connection
    }

    /// Back to the pool's idle connections, unless the pool is gone.
    pub fn give_back(self) {
        if let Some(idle) = self.idle.upgrade() {
            idle.put_back(self.connection, self.permit);
        }
    }
}
