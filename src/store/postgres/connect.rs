//! How the pool makes a connection: as deadpool's own `Connect` does, but a
//! connection that ends in an error is logged with the server's reason and
//! SQLSTATE (deadpool logs only "Connection error: db error", whatever
//! ended it: a terminated session, a failover, a server shutting down).

use deadpool_postgres::Connect;
use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Error, Socket};

use super::cause::describe;

/// SQLSTATE 57P05, `idle_session_timeout`.
const IDLE_SESSION_TIMEOUT: &str = "57P05";

/// Connects with `tls` and drives the connection in its own task.
pub struct LoggedConnect<T> {
    pub tls: T,
}

impl<T> Connect for LoggedConnect<T>
where
    T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(&self, config: &Config) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), Error>> {
        let (tls, config) = (self.tls.clone(), config.clone());
        Box::pin(async move {
            let (client, connection) = config.connect(tls).await?;
            let driver = tokio::spawn(async move {
                if let Err(err) = connection.await {
                    log_closed(&err);
                }
            });
            Ok((client, driver))
        })
    }
}

fn log_closed(err: &Error) {
    let code = err.as_db_error().map(|db| db.code().code());
    // An idle connection ended by the server's `idle_session_timeout`: what
    // that setting is for, and the pool replaces it when one is needed.
    if code == Some(IDLE_SESSION_TIMEOUT) {
        tracing::debug!(
            error = %describe(err),
            "postgres closed an idle connection (idle_session_timeout)"
        );
        return;
    }
    tracing::warn!(
        error = %describe(err),
        code = code.unwrap_or(""),
        "postgres connection closed; the pool opens another when one is needed"
    );
}
