//! Purges told to every replica (`LISTEN`/`NOTIFY`), so that each drops its
//! in-memory copies of a purged key's answers at once (`replay_cache`),
//! instead of within their 5 s bound.
//!
//! `sql::PURGE` notifies `CHANNEL` with `["schema","route","key"]` when it
//! commits, so a purge through any replica's admin API or through `idemgate
//! keys purge` reaches all of them (and only those of the same schema). Each store keeps one extra connection listening.
//! While it is down, purges go unheard: on every (re)connect the copies are
//! all dropped, and the 5 s bound covers the time in between.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Notification};
use tokio_util::sync::CancellationToken;

use super::cause::PostgresCause;
use crate::store::StoreError;

pub const CHANNEL: &str = "idemgate_purge";

/// Pause before reconnecting after the listening connection failed.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// What the listener reports.
pub enum Heard {
    /// Every record of this key was purged somewhere.
    Purged { route: String, key: String },
    /// Connected (again): purges may have been missed meanwhile.
    Listening,
}

pub type PurgeHook = Arc<dyn Fn(Heard) + Send + Sync>;

/// Listens until `stop` is cancelled, reconnecting after failures.
pub fn spawn(
    settings: tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    hook: PurgeHook,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let failed = tokio::select! {
                () = stop.cancelled() => return,
                failed = listen(&settings, tls.clone(), &hook) => failed,
            };
            tracing::debug!(error = %failed, "purge listener disconnected; reconnecting");
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RECONNECT_AFTER) => {}
            }
        }
    });
}

/// One connection's life; returns why it ended.
async fn listen(
    settings: &tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    hook: &PurgeHook,
) -> StoreError {
    let (heard, mut hearing) = mpsc::unbounded_channel();
    let client = if let Some(tls) = tls {
        match settings.connect(tls).await {
            Ok((client, connection)) => {
                tokio::spawn(forward(connection, heard));
                client
            }
            Err(err) => return super::pool::db_error(err),
        }
    } else {
        match settings.connect(tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(forward(connection, heard));
                client
            }
            Err(err) => return super::pool::db_error(err),
        }
    };
    if let Err(err) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
        return super::pool::db_error(err);
    }
    let ours: Option<String> = match client.query_one("SELECT current_schema()", &[]).await {
        Ok(row) => row.get(0),
        Err(err) => return super::pool::db_error(err),
    };
    hook(Heard::Listening);
    while let Some(notification) = hearing.recv().await {
        match parse(notification.payload()) {
            Some((schema, route, key)) if Some(&schema) == ours.as_ref() => {
                hook(Heard::Purged { route, key });
            }
            _ => {}
        }
    }
    PostgresCause::ListenerClosed.into()
}

/// Drives the connection, passing its notifications on; ends with it.
async fn forward<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    heard: mpsc::UnboundedSender<Notification>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(Ok(message)) = messages.next().await {
        if let AsyncMessage::Notification(notification) = message
            && heard.send(notification).is_err()
        {
            return;
        }
    }
}

/// `["schema","route","key"]`, as `sql::PURGE` builds it.
fn parse(payload: &str) -> Option<(String, String, String)> {
    serde_json::from_str(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn payloads_are_schema_route_and_key() {
        assert_eq!(
            parse(r#"["public", "orders", "k\"1"]"#),
            Some(("public".into(), "orders".into(), "k\"1".into()))
        );
        assert_eq!(parse("orders/k1"), None);
        assert_eq!(parse(r#"["orders", "k1"]"#), None);
    }
}
