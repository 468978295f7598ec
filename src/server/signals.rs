use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::Reloader;

/// SIGTERM and SIGINT start the graceful shutdown; SIGHUP reloads the config.
pub async fn watch(shutdown: CancellationToken, reloader: Arc<Reloader>) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                // The outcome is logged and counted by the reloader.
                let _ = reloader.reload();
            }
        }
    }
    tracing::info!("shutting down: no new connections, finishing requests in flight");
    shutdown.cancel();
}
