//! Why the Postgres store failed, as a value (`Unavailable::Postgres`).
//! None holds the URL (it carries the password): the driver never puts it
//! in an error, and URL problems are told by name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{BuildError, PoolError};
use tokio_postgres::error::SqlState;

use super::grant::Grant;
use crate::store::Refusal;

#[derive(Debug, Clone, thiserror::Error)]
pub enum PostgresCause {
    /// A statement failed, or its connection.
    #[error("postgres: {}", driver_text(.0.as_ref()))]
    Driver(#[source] Arc<tokio_postgres::Error>),
    /// No pooled connection: none could be made, or none came free in time.
    #[error("postgres: {}", pool_text(.0))]
    Pool(#[source] Arc<PoolError>),
    /// No connection could be made to `server` (`server::named`: addresses
    /// and ports, never the URL): refused, unreachable, not within the
    /// connect timeout, or refused by the server (a password, a role).
    #[error("postgres at {server}: {}", pool_text(.source))]
    Connect {
        server: Arc<str>,
        #[source]
        source: Arc<PoolError>,
    },
    /// Every connection of the pool stayed busy for `waited`, the longest
    /// wait for one (`store.connect_timeout`).
    #[error(
        "postgres: every connection of the pool (store.pool_size = {pool_size}) stayed busy \
         for {waited:?} (store.connect_timeout) with other operations: more at once than the \
         pool holds, or statements the database is slow to answer; raise store.pool_size \
         (budget replicas x (pool_size + 1) connections against the server's max_connections)"
    )]
    PoolBusy { waited: Duration, pool_size: usize },
    /// The pool's settings were refused.
    #[error("building the postgres pool: {0}")]
    Build(#[source] BuildError),
    /// No answer within the store's deadline.
    #[error("postgres: no answer within {0:?}")]
    NoAnswer(Duration),
    /// The URL is not a connection string the driver reads (`store.url`).
    /// The driver's words say so ("invalid connection string: ...").
    #[error("{}", describe(.0.as_ref()))]
    InvalidUrl(#[source] Arc<tokio_postgres::Error>),
    /// The URL's TLS settings are not ones idemgate accepts (`store.url`).
    #[error("{0}")]
    UrlRefused(&'static str),
    /// The URL's `sslrootcert` file cannot be used (`store.url`).
    #[error("sslrootcert {}: {problem}", path.display())]
    RootCert {
        path: PathBuf,
        #[source]
        problem: RootCertProblem,
    },
    /// `sslmode=require` or `verify-full` with the platform's roots, and
    /// there are none.
    #[error(
        "postgres TLS: no trusted CA certificates were found \
         (install ca-certificates, set SSL_CERT_FILE, or give sslrootcert)"
    )]
    NoTrustedRoots,
    /// rustls refused the client's settings.
    #[error("postgres TLS setup: {0}")]
    TlsSetup(#[source] rustls::Error),
    /// A migration's SQL failed.
    #[error("postgres migration {version} failed: {}", describe(.source.as_ref()))]
    Migration {
        version: i64,
        #[source]
        source: Arc<tokio_postgres::Error>,
    },
    /// The database was migrated by a newer idemgate.
    #[error(
        "postgres schema version {found} is newer than this idemgate supports \
         ({supported}); upgrade idemgate or point it at another database"
    )]
    SchemaNewer { found: i64, supported: i64 },
    /// `store.migrate = false` and the schema is behind this binary.
    #[error(
        "postgres schema is at version {found}, this idemgate needs {needed}: \
         run `idemgate migrate` (store.migrate = false)"
    )]
    SchemaOlder { found: i64, needed: i64 },
    /// No schema of the `search_path` exists (or may be used).
    #[error(
        "postgres: no schema of the search_path ({search_path}) exists in this database \
         (or this user may not use it): create it (CREATE SCHEMA) or fix the search_path \
         in the store's URL (store.url, or the variable store.url_env names)"
    )]
    NoSchema { search_path: String },
    /// The role may not create the tables (no CREATE on the schema).
    #[error(
        "postgres: this role may not create the store's tables in schema {schema} ({}): \
         GRANT CREATE ON SCHEMA {schema} TO the role, or apply the schema with a role that \
         may (`idemgate migrate`) and set store.migrate = false",
        driver_text(.source.as_ref())
    )]
    MayNotCreate {
        schema: String,
        #[source]
        source: Arc<tokio_postgres::Error>,
    },
    /// The tables belong to a role this one may not act as: only their
    /// owner (or a member of it) may change them.
    #[error(
        "postgres: the store's tables in schema {schema} belong to role {owner}, and only \
         it (or a role that is a member of it) may change them ({}): run `idemgate migrate` \
         as {owner}, and set store.migrate = false for this role",
        driver_text(.source.as_ref())
    )]
    NotOwner {
        schema: String,
        owner: String,
        #[source]
        source: Arc<tokio_postgres::Error>,
    },
    /// The role lacks privileges a serving gateway needs (`privileges`).
    #[error(
        "postgres: role {role} lacks privileges the gateway needs on the store's tables; \
         as their owner (or a superuser), run: {}",
        grants_text(role, grants)
    )]
    MissingGrants { role: String, grants: Vec<Grant> },
    /// The session lacks settings of the startup options (the URL's
    /// `options`): a connection pooler dropped them (`pooler`).
    #[error(
        "postgres: the sessions lack what the URL's options set ({names}): a connection \
         pooler in between dropped them (PgBouncer: ignore_startup_parameters = options); \
         set them for the role instead (ALTER ROLE ... SET name = value) and remove them \
         from the URL (store.url, or the variable store.url_env names)"
    )]
    OptionsNotApplied { names: String },
    /// The session's `statement_timeout` is not the one configured (none, or
    /// longer): the startup options that set it were dropped (`pooler`).
    #[error(
        "postgres: the sessions run with statement_timeout = {found_ms} ms (0: none), not \
         store.statement_timeout ({configured:?}): a connection pooler in between dropped \
         the startup option that sets it (PgBouncer: ignore_startup_parameters = options); \
         set it for the role: ALTER ROLE ... SET statement_timeout = '{}ms'",
        configured.as_millis()
    )]
    StatementTimeoutNotApplied {
        found_ms: u128,
        configured: Duration,
    },
    /// Connections share server sessions: transaction or statement pooling
    /// (`pooler`).
    #[error(
        "postgres: the connections share server sessions (one connection was handed two, \
         or two connections one): a connection pooler in transaction or statement mode is \
         in between (PgBouncer: pool_mode = transaction). idemgate needs a server session \
         for each of its connections (prepared statements, LISTEN for purges): use \
         pool_mode = session, or connect to PostgreSQL directly"
    )]
    SessionsShared,
    /// The connection listening for other replicas' purges closed.
    #[error("postgres: the purge listener's connection closed")]
    ListenerClosed,
    /// The batch a reservation was queued in ended without answering it.
    #[error("postgres: the batch was dropped")]
    BatchDropped,
    /// Every reservation attempt found the key changed under it.
    #[error("postgres: the key changed under every reservation attempt")]
    KeyKeptChanging,
    /// The session takes no writes: a standby (a failover's former
    /// primary, under an address not yet moved) or a read-only database.
    #[error(
        "postgres: the server takes no writes (transaction_read_only is on: a standby, \
         or a read-only database); connections made before are dropped and made again"
    )]
    ReadOnly,
}

impl PostgresCause {
    /// The server answered and refused: its disk full, no room for another
    /// connection, it takes no writes, or a privilege is missing; or the
    /// pool's connections all stayed busy.
    pub fn refusal(&self) -> Option<Refusal> {
        let driver = match self {
            PostgresCause::ReadOnly => return Some(Refusal::ReadOnly),
            PostgresCause::PoolBusy { waited, .. } => {
                return Some(Refusal::PoolBusy { waited: *waited });
            }
            PostgresCause::MissingGrants { .. }
            | PostgresCause::MayNotCreate { .. }
            | PostgresCause::NotOwner { .. } => return Some(Refusal::NotPermitted),
            PostgresCause::Driver(driver) => driver.as_ref(),
            PostgresCause::Pool(pool) | PostgresCause::Connect { source: pool, .. } => {
                match pool.as_ref() {
                    PoolError::Backend(driver) => driver,
                    _ => return None,
                }
            }
            _ => return None,
        };
        match driver.code()? {
            code if *code == SqlState::DISK_FULL => Some(Refusal::DiskFull),
            code if *code == SqlState::TOO_MANY_CONNECTIONS => Some(Refusal::NoRoomForConnections),
            code if *code == SqlState::READ_ONLY_SQL_TRANSACTION => Some(Refusal::ReadOnly),
            code if *code == SqlState::INSUFFICIENT_PRIVILEGE => Some(Refusal::NotPermitted),
            _ => None,
        }
    }
}

/// What is wrong with an `sslrootcert` file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RootCertProblem {
    #[error("{0}")]
    Unreadable(#[source] Arc<std::io::Error>),
    #[error("not PEM certificates ({0})")]
    NotPem(#[source] Arc<crate::tls::PemProblem>),
    #[error("holds no usable CA certificate")]
    NoCa,
    /// A binary DER certificate: said with the conversion, as the listener
    /// and upstream files are.
    #[error(
        "is DER (binary), not PEM; convert it: openssl x509 -inform der -in FILE -out FILE.pem"
    )]
    Der,
}

/// The driver error and its causes, e.g. "db error: ERROR: relation … does not
/// exist" or "error connecting to server: Connection refused". The driver
/// never puts the URL or password in an error.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// [`describe`], and for a write refused as read-only (SQLSTATE 25006)
/// first what that means: the server's own words name only the statement.
fn driver_text(err: &tokio_postgres::Error) -> String {
    // PgBouncer's own refusals, which say nothing of the way out.
    match err.as_db_error().map(|db| db.message()) {
        Some("unsupported startup parameter: options") => {
            return format!(
                "a connection pooler in between refuses the startup parameter that carries \
                 statement_timeout (PgBouncer: add ignore_startup_parameters = options, and set \
                 statement_timeout for the role: ALTER ROLE ... SET statement_timeout): {}",
                describe(err)
            );
        }
        Some("query_wait_timeout") => {
            return format!(
                "the connection pooler in between had no server connection free for this one \
                 (PgBouncer's pool for this database and role is smaller than the connections \
                 the replicas hold: replicas x (pool_size + 1)): {}",
                describe(err)
            );
        }
        _ => {}
    }
    if err.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) {
        return format!(
            "the server has no room for another connection (its max_connections, or the \
             role's CONNECTION LIMIT, is reached: budget replicas x (pool_size + 1)); the \
             pool shares the connections it has and connects again after a pause: {}",
            describe(err)
        );
    }
    if err.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        return format!(
            "the database refuses this role a privilege on the store's tables (grant it as \
             their owner; docs/postgres.md, Roles and privileges): {}",
            describe(err)
        );
    }
    if err.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) {
        return format!(
            "the server takes no writes (a standby, such as a failover's former primary, \
             or a read-only database): {}",
            describe(err)
        );
    }
    describe(err)
}

/// `GRANT ... TO role; GRANT ... TO role`
fn grants_text(role: &str, grants: &[Grant]) -> String {
    grants
        .iter()
        .map(|grant| format!("{grant} TO {role}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn pool_text(err: &PoolError) -> String {
    match err {
        PoolError::Backend(e) => driver_text(e),
        PoolError::Timeout(_) => format!("no connection within the connect timeout ({err})"),
        _ => describe(err),
    }
}
