//! SIGINT and SIGTERM for a command that can stop cleanly: `sweep` notices
//! them between two batches, so the batch under way ends as it would have
//! (each is its own transaction); `compact` as they come, to roll its
//! rewrite back. Either then says what it did before it stopped.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

/// A stop signal received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopSignal {
    Interrupt,
    Terminate,
}

impl StopSignal {
    pub(super) fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal's number: what a shell reports for a process the
    /// signal ended, so a script reads an interrupted command as it would
    /// have read it without this handling.
    pub(super) fn exit_code(self) -> i32 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

/// The stop signals from now on, in place of their default action (the
/// process ended at once).
pub(super) struct StopSignals(oneshot::Receiver<StopSignal>);

impl StopSignals {
    /// Takes SIGINT and SIGTERM over. `None` when the runtime cannot:
    /// the command then runs as it did without it, ended by the signal.
    pub(super) fn take_over() -> Option<Self> {
        let mut interrupt = signal(SignalKind::interrupt()).ok()?;
        let mut terminate = signal(SignalKind::terminate()).ok()?;
        let (tell, told) = oneshot::channel();
        tokio::spawn(async move {
            let received = tokio::select! {
                _ = interrupt.recv() => StopSignal::Interrupt,
                _ = terminate.recv() => StopSignal::Terminate,
            };
            let _ = tell.send(received);
        });
        Some(StopSignals(told))
    }

    /// The first stop signal, once received; never when the task that
    /// watches for them has gone.
    pub(super) async fn next(&mut self) -> StopSignal {
        match (&mut self.0).await {
            Ok(signal) => signal,
            Err(_) => std::future::pending().await,
        }
    }

    /// The first stop signal received so far, if any.
    pub(super) fn received(&mut self) -> Option<StopSignal> {
        self.0.try_recv().ok()
    }
}
