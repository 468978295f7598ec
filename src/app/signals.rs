//! The process's signals: SIGTERM and SIGINT stop it gracefully (a second
//! one at once), SIGHUP reloads the config, and SIGXFSZ is taken over so
//! that a file-size limit fails a write instead of ending the process.

use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::reload::Reloader;

/// Takes SIGHUP over from its default action, which ends the process: called
/// first thing, so a reload asked for while the store opens (a slow Postgres)
/// is applied once serving rather than killing the gateway. SIGTERM keeps its
/// default until [`watch`], so it still stops a start that hangs.
pub fn hangup() -> Option<Signal> {
    signal(SignalKind::hangup()).ok()
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
/// or an orchestrator that will not wait expects; SIGHUP (`hangup`, from
/// [`hangup`]) reloads the config.
pub async fn watch(
    shutdown: CancellationToken,
    abandon: CancellationToken,
    reloader: Arc<Reloader>,
    hangup: Option<Signal>,
) {
    let hup = hangup.map_or_else(|| signal(SignalKind::hangup()), Ok);
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        hup,
    ) else {
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
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => asked.notify_one(),
        }
    }
    reloads.abort();
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    shutdown.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    // Keyed requests cut off now are recorded as outcome-unknown, as after
    // a grace that ran out (server::listener).
    tracing::warn!("second signal: closing the connections still open without waiting");
    abandon.cancel();
}
