//! The command line (SPEC section 1).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "idemgate",
    version,
    about = "An idempotency reverse proxy",
    arg_required_else_help = true
)]
pub struct Cli {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `idemgate=debug` (default: $RUST_LOG, else `info`).
    #[arg(long, global = true, value_parser = log_filter)]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// Accepts a log filter (`--log-level`, `RUST_LOG`) only when tracing can
/// parse it: a typo is refused at start, not replaced by `info`.
pub fn log_filter(value: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(value)
        .map(|_| value.to_owned())
        .map_err(|error| error.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ConfigArg {
    /// Configuration file [default: $IDEMGATE_CONFIG, else config/idemgate.toml].
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    pub fn path(&self) -> PathBuf {
        self.config
            .clone()
            .or_else(|| std::env::var_os("IDEMGATE_CONFIG").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("config/idemgate.toml"))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ConfigArg),
    /// Validate a configuration and print the resolved routes; exit 1 when invalid.
    Check(ConfigArg),
    /// Apply the store schema (idempotent; safe from many replicas at once).
    Migrate(ConfigArg),
    /// Delete expired records once and print how many.
    Sweep(ConfigArg),
    /// Inspect or delete the records of one key (all scopes).
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysAction {
    /// Print the records of a key as JSON.
    Show(KeyArgs),
    /// Delete the records of a key, so its next request runs again.
    Purge(KeyArgs),
}

#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Route name.
    pub route: String,
    /// The idempotency key as the client sent it: bare (`k1`) or as an
    /// RFC 8941 string (`'"k1"'`), which is the same key.
    pub key: String,
}
