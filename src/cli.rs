//! The command line (docs/operating.md#command-line).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

mod refusal;

pub use refusal::bounded;

/// The command line, or, when clap refuses it, its refusal said bounded
/// ([`bounded`]) and the process ended with clap's exit code (2).
pub fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|error| bounded(error).exit())
}

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
///
/// A directive without `=` must be a level. tracing reads any other bare
/// word as a target at every level, so `infoo` would silence every log line
/// but that target's; a target is named with its level (`hyper=trace`).
pub fn log_filter(value: &str) -> Result<String, LogFilterError> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    // tracing reads a filter without a directive as "errors only", so a
    // script's `--log-level "$UNSET"` would silence the access log.
    if value
        .split(',')
        .all(|directive| directive.trim().is_empty())
    {
        return Err(LogFilterError::Empty);
    }
    for directive in value.split(',').map(str::trim) {
        let bare = !directive.is_empty() && !directive.contains(['=', '[']);
        if bare && !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(directive)) {
            return Err(LogFilterError::NotALevel(directive.to_owned()));
        }
    }
    tracing_subscriber::EnvFilter::try_new(value)
        .map(|_| value.to_owned())
        .map_err(LogFilterError::Invalid)
}

/// Why a log filter is refused (clap, or `main` for `RUST_LOG`, says it).
#[derive(Debug, thiserror::Error)]
pub enum LogFilterError {
    /// Nothing but commas and spaces (see [`log_filter`]).
    #[error(
        "no directive: give a level (off, error, warn, info, debug, trace) or name a target with its level, as in idemgate=debug"
    )]
    Empty,
    /// A bare word that is no level (see [`log_filter`]).
    #[error("{}", not_a_level(.0))]
    NotALevel(String),
    /// What tracing cannot parse.
    #[error("{0}")]
    Invalid(#[source] tracing_subscriber::filter::ParseError),
}

/// [`LogFilterError::NotALevel`]'s words: the word, and how to name it as
/// a target. A long word (a paste, which the refusal quotes already) is
/// said by its length, and a word with control characters escaped: neither
/// is a target's name, so neither gets the hint.
fn not_a_level(word: &str) -> String {
    const LEVELS: &str = "(off, error, warn, info, debug, trace)";
    if crate::config::is_long(word) {
        return format!("a word of {} bytes is not a level {LEVELS}", word.len());
    }
    let said = crate::config::shortened(word).to_string();
    if said != word {
        return format!("'{said}' is not a level {LEVELS}");
    }
    format!("'{word}' is not a level {LEVELS}; name a target with its level, as in {word}=debug")
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
            // An empty variable is unset, as an empty `RUST_LOG` is: a
            // manifest's `IDEMGATE_CONFIG=` must not name the file "".
            .or_else(|| {
                std::env::var_os("IDEMGATE_CONFIG")
                    .filter(|path| !path.is_empty())
                    .map(PathBuf::from)
            })
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
    /// Rewrite the embedded store's file without the space swept and purged
    /// records left (the gateway must be stopped); print its size before and after.
    Compact(ConfigArg),
    /// Show or purge the records of one key (all scopes), or list a route's records.
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
    /// Print one page of a route's records, oldest first, as JSON
    /// (`{"records": [...], "next": CURSOR|null}`).
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Route name.
    pub route: String,
    /// Only records in this state.
    #[arg(long, value_parser = ["in_flight", "completed", "outcome_unknown"])]
    pub state: Option<String>,
    /// Records per page, 1 to 1000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Start after this cursor (the `next` of the page before).
    #[arg(long)]
    pub after: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_word_must_be_a_level() {
        for good in [
            "info",
            "WARN",
            "off",
            "idemgate=debug",
            "info,hyper=warn",
            "[span]=debug",
        ] {
            assert_eq!(log_filter(good).ok().as_deref(), Some(good), "{good}");
        }
        for bad in [
            "infoo",
            "idemgate",
            "info,debugg",
            "idemgate=lots",
            "",
            " ",
            ",",
            " , ",
        ] {
            assert!(log_filter(bad).is_err(), "{bad}");
        }
        let why = log_filter("infoo").expect_err("not a level");
        assert!(matches!(&why, LogFilterError::NotALevel(word) if word == "infoo"));
        assert!(why.to_string().contains("'infoo' is not a level"), "{why}");
        assert!(matches!(
            log_filter("idemgate=lots"),
            Err(LogFilterError::Invalid(_))
        ));
        assert!(matches!(log_filter(","), Err(LogFilterError::Empty)));
        let long = "x".repeat(100);
        let why = log_filter(&long).expect_err("not a level").to_string();
        assert!(
            why.starts_with("a word of 100 bytes is not a level"),
            "{why}"
        );
        let why = log_filter("in\u{1b}fo")
            .expect_err("not a level")
            .to_string();
        assert!(why.starts_with("'in\\u{1b}fo' is not a level"), "{why}");
        assert!(!why.contains("as in"), "{why}");
    }
}
