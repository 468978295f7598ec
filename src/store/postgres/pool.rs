//! The connection pool: timeouts from the config, and errors that never carry
//! the connection URL (it holds the password).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::cause::PostgresCause;
use super::connect::LoggedConnect;
use crate::config::PostgresStoreConfig;
use crate::store::StoreError;
use crate::store::setting::{Setting, SettingError};

/// Builds the pool without connecting: connections are made on first use, so
/// a gateway whose database is briefly down still starts its admin plane and
/// recovers by itself once the database answers.
pub fn build(
    config: &PostgresStoreConfig,
    pg: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
    before_checkout: Hook,
) -> Result<super::lent::Pool, StoreError> {
    // `Fast` only drops connections the driver knows are closed: a
    // per-checkout probe would cost a round trip on every request.
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let server = super::server::named(&pg);
    let manager = match tls {
        Some(tls) => Manager::from_connect(pg, LoggedConnect { tls }, manager_config),
        None => Manager::from_connect(pg, LoggedConnect { tls: NoTls }, manager_config),
    };
    Pool::builder(manager)
        .max_size(config.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.connect_timeout))
        .create_timeout(Some(config.connect_timeout))
        .recycle_timeout(Some(config.connect_timeout))
        .pre_recycle(before_checkout)
        .build()
        .map(|pool| super::lent::Pool::new(pool, server))
        .map_err(|e| PostgresCause::Build(e).into())
}

/// The connection settings every connection of this store uses, and its TLS
/// connector when the URL asks for TLS (`tls`). Reads the `sslrootcert`
/// file; connects to nothing. An error is `store.url`'s.
pub fn settings(
    config: &PostgresStoreConfig,
) -> Result<(tokio_postgres::Config, Option<MakeRustlsConnect>), SettingError> {
    let of_url = |cause| SettingError::new(Setting::Url, cause);
    let (url, tls) = super::tls::prepare(&config.url).map_err(of_url)?;
    let mut pg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| of_url(PostgresCause::InvalidUrl(Arc::new(e))))?;
    pg.connect_timeout(config.connect_timeout);
    // Dead peers (a cut network) are noticed by the kernel, not only by the
    // per-operation deadline.
    pg.keepalives(true)
        .keepalives_idle(Duration::from_secs(30))
        .tcp_user_timeout(config.connect_timeout.max(Duration::from_secs(5)));
    pg.options(with_statement_timeout(
        pg.get_options(),
        config.statement_timeout,
    ));
    if pg.get_application_name().is_none() {
        pg.application_name("idemgate");
    }
    Ok((pg, tls))
}

/// Appends `-c statement_timeout=…` to whatever startup options the URL has
/// (tests put `-c search_path=…` there), so every pooled connection gets it
/// without an extra round trip.
fn with_statement_timeout(existing: Option<&str>, timeout: Duration) -> String {
    let ours = format!("-c statement_timeout={}", timeout.as_millis().max(1));
    match existing.map(str::trim).filter(|o| !o.is_empty()) {
        Some(options) => format!("{options} {ours}"),
        None => ours,
    }
}

/// Whether a statement failed because its session is gone: the connection
/// closed, or the server ended the session (a FATAL error, such as
/// `pg_terminate_backend`'s "terminating connection due to administrator
/// command", which arrives before the driver sees the connection close).
pub fn session_lost(client: &tokio_postgres::Client, err: &tokio_postgres::Error) -> bool {
    client.is_closed()
        || err.is_closed()
        || err
            .as_db_error()
            .is_some_and(|db| db.severity() == "FATAL" || db.severity() == "PANIC")
}

pub fn db_error(err: tokio_postgres::Error) -> StoreError {
    PostgresCause::Driver(Arc::new(err)).into()
}

/// What lending a connection failed with (`lent`).
pub fn pool_error(err: PostgresCause) -> StoreError {
    err.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_timeout_is_appended_to_existing_options() {
        let ms = Duration::from_millis(1500);
        assert_eq!(
            with_statement_timeout(None, ms),
            "-c statement_timeout=1500"
        );
        assert_eq!(
            with_statement_timeout(Some("-c search_path=t1"), ms),
            "-c search_path=t1 -c statement_timeout=1500"
        );
    }
}
