//! Purges told to every replica (`LISTEN`/`NOTIFY`), so that each drops its
//! in-memory copies of a purged key's answers at once (`replay_cache`),
//! instead of within their 5 s bound.
//!
//! `sql::PURGE` notifies `CHANNEL` with `["schema","route","key"]` when it
//! commits, and with `["schema","route","key","scope"]` for each scope it
//! deleted, so a purge through any replica's admin API or through `idemgate
//! keys purge` reaches all of them (and only those of the same schema), and
//! a replica keeping copies in Redis can delete the purged scopes' copies
//! even when the purge was made without `[store.redis]`. The three-part
//! message is what earlier releases understand. Each store keeps one extra
//! connection listening.
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

/// How long a purge that deleted records waits before it returns, so that
/// every replica listening has heard of it (a notification takes a network
/// round trip or less) and the retry that follows finds no copy anywhere.
pub const HEARD_WITHIN: Duration = Duration::from_millis(50);

/// Pause before reconnecting after the listening connection failed.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// What the listener reports.
pub enum Heard {
    /// Every record of this key was purged somewhere; `scope`, when told,
    /// is one of the scopes deleted.
    Purged {
        route: String,
        key: String,
        scope: Option<String>,
    },
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
    // Idle by design: a DBA's `idle_session_timeout` (PostgreSQL 14 on)
    // would end its session every period, and each reconnect drops every
    // in-memory copy of an answer (`Heard::Listening`).
    let listen = format!(
        "SELECT set_config('idle_session_timeout', '0', false) FROM pg_settings \
         WHERE name = 'idle_session_timeout'; LISTEN {CHANNEL}"
    );
    if let Err(err) = client.batch_execute(&listen).await {
        return super::pool::db_error(err);
    }
    let ours: Option<String> = match client.query_one("SELECT current_schema()", &[]).await {
        Ok(row) => row.get(0),
        Err(err) => return super::pool::db_error(err),
    };
    hook(Heard::Listening);
    while let Some(notification) = hearing.recv().await {
        match parse(notification.payload()) {
            Some((schema, purged)) if Some(&schema) == ours.as_ref() => hook(purged),
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

/// `["schema","route","key"]` or `["schema","route","key","scope"]`, as
/// `sql::PURGE` builds them: the schema, and what was purged.
fn parse(payload: &str) -> Option<(String, Heard)> {
    let (schema, route, key, scope) = match serde_json::from_str(payload) {
        Ok((schema, route, key, scope)) => (schema, route, key, Some(scope)),
        Err(_) => {
            let (schema, route, key) = serde_json::from_str(payload).ok()?;
            (schema, route, key, None)
        }
    };
    Some((schema, Heard::Purged { route, key, scope }))
}

#[cfg(test)]
mod tests {
    use super::{Heard, parse};

    fn purged(payload: &str) -> Option<(String, String, String, Option<String>)> {
        match parse(payload)? {
            (schema, Heard::Purged { route, key, scope }) => Some((schema, route, key, scope)),
            (_, Heard::Listening) => None,
        }
    }

    #[test]
    fn payloads_are_schema_route_key_and_perhaps_scope() {
        assert_eq!(
            purged(r#"["public", "orders", "k\"1"]"#),
            Some(("public".into(), "orders".into(), "k\"1".into(), None))
        );
        assert_eq!(
            purged(r#"["public", "orders", "k1", "s1"]"#),
            Some((
                "public".into(),
                "orders".into(),
                "k1".into(),
                Some("s1".into())
            ))
        );
        assert_eq!(purged("orders/k1"), None);
        assert_eq!(purged(r#"["orders", "k1"]"#), None);
        assert_eq!(purged(r#"["public", "orders", "k1", "s1", "x"]"#), None);
    }
}
