//! The process's signals: SIGTERM and SIGINT stop it gracefully (a second
//! one at once; during the start, the start), SIGHUP reloads the config,
//! and SIGXFSZ is taken over so that a file-size limit fails a write
//! instead of ending the process.

use std::future::Future;
use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::reload::Reloader;

/// SIGTERM, SIGINT and SIGHUP, taken over from their default actions first
/// thing, before the store is opened. SIGHUP's default would end the
/// process: a reload asked for while the store opens (a slow Postgres) is
/// applied once serving. SIGTERM's and SIGINT's would end it too, but not as
/// a container's first process (PID 1), which gets no signal it has not
/// taken over: a stop asked for during the start would be lost, and the
/// gateway would go on to serve until killed. Taken over, it ends the start
/// ([`Signals::unless_stopped`]), or the serving that follows ([`watch`]).
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// `None` when a handler cannot be installed: [`watch`] then says so.
    pub fn take_over() -> Option<Signals> {
        Some(Signals {
            term: signal(SignalKind::terminate()).ok()?,
            int: signal(SignalKind::interrupt()).ok()?,
            hup: signal(SignalKind::hangup()).ok()?,
        })
    }

    /// The next SIGTERM or SIGINT.
    async fn stop(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// `work`, or `None` when SIGTERM or SIGINT comes first: a start asked
    /// to stop stops there, having served nothing.
    pub async fn unless_stopped<T>(
        signals: Option<&mut Signals>,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        let Some(signals) = signals else {
            return Some(work.await);
        };
        tokio::select! {
            done = work => Some(done),
            () = signals.stop() => None,
        }
    }
}

/// Takes SIGXFSZ over from its default action, which ends the process (with
/// a core dump): past a file-size limit (`ulimit -f`, systemd's
/// `LimitFSIZE`) a write then fails with EFBIG, as on a full disk: the
/// store refuses what it cannot write (503) until it can again, instead of
/// the gateway dying with every connection, and a command fails in one
/// line. PostgreSQL ignores the signal for the same reason. A handler, once
/// installed, stays for the life of the process.
pub fn ignore_file_size_limit_signal() {
    let xfsz = SignalKind::from_raw(rustix::process::Signal::XFSZ.as_raw());
    if signal(xfsz).is_err() {
        tracing::warn!("cannot take SIGXFSZ over: a file-size limit would end the process");
    }
}

/// SIGTERM and SIGINT start the graceful shutdown; a second one during it
/// ends the grace at once (`abandon`), as an operator pressing Ctrl-C twice
/// or an orchestrator that will not wait expects; SIGHUP reloads the config.
pub async fn watch(
    shutdown: CancellationToken,
    abandon: CancellationToken,
    reloader: Arc<Reloader>,
    signals: Option<Signals>,
) {
    let Some(mut signals) = signals else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return;
    };
    // Reloads run beside this loop, so one slow to read its files does not
    // hold up a SIGTERM. SIGHUPs that come while one runs make one more
    // reload after it (which reads the file as it is then), not one each.
    let asked = Arc::new(Notify::new());
    let reloads = tokio::spawn({
        let asked = asked.clone();
        async move {
            loop {
                asked.notified().await;
                // The outcome is logged and counted by the reloader.
                let _ = reloader.reload().await;
            }
        }
    });
    loop {
        tokio::select! {
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
            _ = signals.hup.recv() => asked.notify_one(),
        }
    }
    reloads.abort();
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    shutdown.cancel();
    signals.stop().await;
    // Keyed requests cut off now are recorded as outcome-unknown, as after
    // a grace that ran out (server::listener).
    tracing::warn!("second signal: closing the connections still open without waiting");
    abandon.cancel();
}
