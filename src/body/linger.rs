//! Reading on after an early answer. A request answered before its body is
//! in (413 on its declared length, 400 without a key, 404) leaves the
//! client sending; closing the connection (HTTP/1), or resetting the stream
//! (HTTP/2), while it still sends makes the kernel reset the connection, or
//! some clients drop the stream, and the answer is lost. So what still
//! comes is read and dropped for as long as it keeps coming, as nginx's
//! lingering close does: until the client is quiet for [`QUIET`], or for
//! [`AT_MOST`] in all (docs/http1.md, "Closing after an answer").

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// A client that sends nothing for this long has stopped.
pub const QUIET: Duration = Duration::from_millis(500);

/// However long a client keeps sending, reading on ends after this
/// (nginx's `lingering_time`).
pub const AT_MOST: Duration = Duration::from_secs(30);

/// One connection's (or stream's) reading on, from its start.
pub struct Linger {
    until: Instant,
}

impl Linger {
    pub fn start() -> Self {
        Self {
            until: Instant::now() + AT_MOST,
        }
    }

    /// Waits for one read (`true`: bytes came, go on); `false` once the
    /// client is quiet for [`QUIET`], has ended, or the time is up.
    pub async fn read(&self, read: impl Future<Output = bool>) -> bool {
        let due = (Instant::now() + QUIET).min(self.until);
        tokio::time::timeout_at(due, read).await.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_on_while_bytes_come_and_stops_when_quiet_or_at_most() {
        let linger = Linger::start();
        assert!(linger.read(async { true }).await);
        assert!(!linger.read(async { false }).await, "the client ended");
        let started = Instant::now();
        assert!(!linger.read(std::future::pending()).await);
        assert_eq!(started.elapsed(), QUIET);
        // A client that keeps sending, a read every 0.4 s: cut off at the end.
        let mut reads = 0;
        while linger
            .read(async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                true
            })
            .await
        {
            reads += 1;
        }
        assert!(Instant::now() >= started + AT_MOST - QUIET, "{reads} reads");
        assert!(Instant::now() <= started + AT_MOST, "{reads} reads");
    }
}
