//! What a connection pooler between the gateway and the database (PgBouncer)
//! would break without a word, found when the store opens (`serve`,
//! `migrate` and the commands) and refused there.
//!
//! - **Startup options dropped.** `statement_timeout` (and the URL's own
//!   `options`, such as `search_path`) travel in the startup packet. PgBouncer
//!   refuses the `options` parameter, or drops it under
//!   `ignore_startup_parameters = options`: sessions then run without a
//!   statement timeout, and tables go to whatever schema the role defaults to
//!   (another deployment's, `public`).
//! - **Sessions shared.** Transaction (or statement) pooling hands each
//!   transaction whatever server session is free. Named prepared statements
//!   (`prepare_cached`) then meet another client's statement of the same name
//!   (every process numbers its own from `s0`): an error at best, someone
//!   else's statement run with our parameters at worst. And the purge
//!   listener's `LISTEN` stays with a session it no longer has, so purges go
//!   unheard.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Connect, PoolError, TimeoutType};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

use super::cause::PostgresCause;
use super::connect::LoggedConnect;
use super::pool::db_error;
use crate::store::StoreError;

/// How many times each of the two probing connections asks for its server
/// session: under transaction pooling, a connection that kept one session
/// and never met the other's on every ask would be chance, not design.
const ASKS: usize = 4;

/// Refuses a session that lacks the startup options this store sent.
pub async fn options_applied(
    client: &Client,
    options: Option<&str>,
    statement_timeout: Duration,
) -> Result<(), StoreError> {
    let names = option_names(options.unwrap_or(""));
    let rows = client
        .query_typed(
            "SELECT name, setting, source FROM pg_settings WHERE name = ANY($1)",
            &[(&names, Type::TEXT_ARRAY)],
        )
        .await
        .map_err(db_error)?;
    let mut dropped = Vec::new();
    for row in &rows {
        let (name, setting, source): (String, String, String) = (
            row.try_get(0).map_err(db_error)?,
            row.try_get(1).map_err(db_error)?,
            row.try_get(2).map_err(db_error)?,
        );
        if name == "statement_timeout" {
            // Set for the role instead (the way through PgBouncer) is as
            // good, as long as it bounds statements as configured.
            let found_ms: u128 = setting.parse().unwrap_or(0);
            if found_ms == 0 || found_ms > statement_timeout.as_millis() {
                return Err(PostgresCause::StatementTimeoutNotApplied {
                    found_ms,
                    configured: statement_timeout,
                }
                .into());
            }
        } else if source != "client" {
            dropped.push(name);
        }
    }
    if dropped.is_empty() {
        return Ok(());
    }
    dropped.sort();
    Err(PostgresCause::OptionsNotApplied {
        names: dropped.join(", "),
    }
    .into())
}

/// The settings that `-c name=value` and `--name=value` in libpq's `options`
/// set, as PostgreSQL names them.
fn option_names(options: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut tokens = options.split_whitespace();
    while let Some(token) = tokens.next() {
        let setting = match token {
            "-c" => tokens.next(),
            _ => token
                .strip_prefix("-c")
                .or_else(|| token.strip_prefix("--")),
        };
        if let Some((name, _)) = setting.and_then(|s| s.split_once('=')) {
            names.push(name.to_ascii_lowercase().replace('-', "_"));
        }
    }
    names
}

/// Refuses connections that share server sessions (transaction or statement
/// pooling), found with two connections of its own, outside the pool.
pub async fn sessions_own(
    settings: &Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<(), StoreError> {
    let one = connect(settings, tls).await?;
    let other = connect(settings, tls).await?;
    let (mut ones, mut others) = (Vec::new(), Vec::new());
    for _ in 0..ASKS {
        ones.extend(backend(&one).await?);
        others.extend(backend(&other).await?);
    }
    if shared(&ones, &others) {
        return Err(PostgresCause::SessionsShared.into());
    }
    Ok(())
}

/// Whether what two connections saw of their server sessions (one pid per
/// ask) is impossible unless sessions are shared: a connection of its own
/// keeps one session for its life, never another connection's.
fn shared(ones: &[i32], others: &[i32]) -> bool {
    let kept = |pids: &[i32]| pids.windows(2).all(|w| w[0] == w[1]);
    !kept(ones) || !kept(others) || ones.iter().any(|pid| others.contains(pid))
}

async fn connect(
    settings: &Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<Client, StoreError> {
    // The driver's connect timeout bounds reaching the server, not its
    // answer: bounded as the pool bounds making a connection.
    let within = settings
        .get_connect_timeout()
        .copied()
        .unwrap_or(Duration::from_secs(5));
    let connecting = async {
        match tls {
            Some(tls) => LoggedConnect { tls: tls.clone() }.connect(settings).await,
            None => LoggedConnect { tls: NoTls }.connect(settings).await,
        }
    };
    // Told as the pool tells a connection it could not make: where to.
    let failed = |source| {
        StoreError::from(PostgresCause::Connect {
            server: super::server::named(settings).into(),
            source: Arc::new(source),
        })
    };
    match tokio::time::timeout(within, connecting).await {
        Ok(made) => made
            .map(|(client, _)| client)
            .map_err(|err| failed(PoolError::Backend(err))),
        Err(_) => Err(failed(PoolError::Timeout(TimeoutType::Create))),
    }
}

/// The server session's process id, by the simple protocol: nothing is
/// prepared (a named statement is what a shared session would break).
async fn backend(client: &Client) -> Result<Option<i32>, StoreError> {
    let messages = client
        .simple_query("SELECT pg_backend_pid()")
        .await
        .map_err(db_error)?;
    Ok(messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
        _ => None,
    }))
}

#[cfg(test)]
mod tests {
    use super::{option_names, shared};

    #[test]
    fn option_names_are_read_as_libpq_writes_them() {
        assert_eq!(
            option_names("-c search_path=a,b -cstatement_timeout=5 --Lock-Timeout=3"),
            ["search_path", "statement_timeout", "lock_timeout"]
        );
        assert!(option_names("").is_empty());
        assert!(option_names("-c").is_empty());
    }

    #[test]
    fn sessions_are_shared_when_a_connection_changes_session_or_meets_the_others() {
        assert!(!shared(&[7, 7, 7], &[9, 9, 9]));
        assert!(
            shared(&[7, 8, 7], &[9, 9, 9]),
            "one connection, two sessions"
        );
        assert!(shared(&[7, 7], &[9, 7]), "both met server process 7");
        assert!(shared(&[7, 7], &[7, 7]), "one server process for both");
    }
}
