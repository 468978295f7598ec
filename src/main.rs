//! Thin entry point: parse the command line, set up logging, run, exit.
//! `serve` exits 64 on a configuration error and 1 on any other start-up failure;
//! a bad argument exits 2 (clap's usage error), an unparsable `RUST_LOG` too.

use std::process::ExitCode;

use idemgate::app::{self, StartError};
use idemgate::cli::{self, Command, KeysAction, LogFormat};
use idemgate::commands;
use idemgate::log_limit::DependencyWarnings;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const EXIT_CONFIG: u8 = 64;
/// clap's exit code for a usage error, which a bad `--log-level` is.
const EXIT_USAGE: u8 = 2;

// Every request allocates futures of a few KB (the handler's, an
// execution's), above what glibc's per-thread cache takes; with glibc each
// took malloc's slow path. mimalloc 2.x (Cargo.toml: `v2`, `no_thp`) serves
// them from per-thread pages: ~5% less CPU per pass-through request, ~15%
// per new key; its 3.x made replays slower (docs/adr/0003-allocator.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::parse();
    // `--log-level` was checked by clap; `RUST_LOG` stands in for it and is
    // checked as strictly, in the same words.
    let level = match &cli.log_level {
        Some(level) => Some(level.clone()),
        None => match rust_log() {
            Ok(level) => level,
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    init_logging(cli.log_format, level.as_deref());
    if let Err(error) = app::open_files::raise() {
        eprintln!("idemgate: {error}");
        return ExitCode::from(1);
    }
    // With one core to run on (a CPU limit, taskset), one thread runs every
    // task: the work-stealing scheduler would only add its bookkeeping.
    let one_core = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let mut builder = if one_core {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("idemgate: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async move {
        app::ignore_file_size_limit_signal();
        match cli.command {
            Command::Serve(arg) => serve(&arg.path()).await,
            Command::Check(arg) => commands::check(&arg.path()),
            Command::Migrate(arg) => commands::migrate(&arg.path()).await,
            Command::Sweep(arg) => commands::sweep(&arg.path()).await,
            Command::Compact(arg) => commands::compact(&arg.path()).await,
            Command::Keys { action } => match &action {
                KeysAction::Show(args) => {
                    commands::keys(&args.config.path(), &args.route, &args.key, false).await
                }
                KeysAction::Purge(args) => {
                    commands::keys(&args.config.path(), &args.route, &args.key, true).await
                }
                KeysAction::List(args) => commands::list_keys(args).await,
            },
        }
    });
    // Tasks still running (detached executions past the grace period) end here.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

async fn serve(path: &std::path::Path) -> i32 {
    let config = match idemgate::config::load(path) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("idemgate: invalid configuration: {}", errors.one_line());
            return i32::from(EXIT_CONFIG);
        }
    };
    match app::run(path.to_path_buf(), config).await {
        Ok(()) => 0,
        Err(StartError::Config(errors)) => {
            eprintln!("idemgate: invalid configuration: {}", errors.one_line());
            i32::from(EXIT_CONFIG)
        }
        Err(error) => {
            eprintln!("idemgate: {error}");
            1
        }
    }
}

/// `RUST_LOG` when it is set: `Err` is the one line that refuses it.
fn rust_log() -> Result<Option<String>, RustLogError> {
    read_rust_log(std::env::var("RUST_LOG"))
}

/// Why `RUST_LOG` is refused, in clap's words for a bad `--log-level`.
#[derive(Debug, thiserror::Error)]
enum RustLogError {
    #[error("error: invalid value for RUST_LOG: not valid UTF-8")]
    NotUnicode,
    #[error(
        "error: invalid value '{}' for RUST_LOG: {source}",
        idemgate::config::shortened(value)
    )]
    Invalid {
        value: String,
        #[source]
        source: cli::LogFilterError,
    },
}

/// An empty `RUST_LOG` is unset (tracing would read it as "nothing").
fn read_rust_log(
    value: Result<String, std::env::VarError>,
) -> Result<Option<String>, RustLogError> {
    match value {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(value) if value.trim().is_empty() => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(RustLogError::NotUnicode),
        Ok(value) => match cli::log_filter(&value) {
            Ok(filter) => Ok(Some(filter)),
            Err(source) => Err(RustLogError::Invalid { value, source }),
        },
    }
}

/// Where a dependency logs data idemgate must keep out of its logs:
/// tokio-postgres prints every statement's parameters at debug level, and
/// ours are raw idempotency keys and stored bodies (docs/operating.md#logs). Capped at
/// `info` whatever the filter says.
const NEVER_VERBOSE: &str = "tokio_postgres::query=info";

/// `level` has been checked by [`cli::log_filter`]; without one, `info`.
fn init_logging(format: LogFormat, level: Option<&str>) {
    let filter = log_filter(level);
    // Colours only for a person at a terminal, not for log collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr closed: a collector
        // gone, `2>&1 | head`) is dropped. tracing would report it with
        // `eprintln!`, which panics on that same stderr, inside whichever
        // task logged: a request's, before its answer, or the signal task's,
        // after which SIGTERM would no longer stop the process.
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().finish().with(DependencyWarnings).init(),
        LogFormat::Text => builder.finish().with(DependencyWarnings).init(),
    }
}

/// The filter for `level`, with [`NEVER_VERBOSE`] on top (a later
/// directive for the same target replaces the user's).
fn log_filter(level: Option<&str>) -> EnvFilter {
    let filter = level
        .and_then(|level| EnvFilter::try_new(level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    match NEVER_VERBOSE.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_rust_log_is_unset_and_a_bad_one_refused() {
        assert!(matches!(read_rust_log(Ok(String::new())), Ok(None)));
        assert!(matches!(read_rust_log(Ok("  ".into())), Ok(None)));
        assert_eq!(
            read_rust_log(Ok("idemgate=debug".into())).ok(),
            Some(Some("idemgate=debug".into()))
        );
        let refused = read_rust_log(Ok("idemgate=lots".into())).expect_err("not a level");
        assert!(
            matches!(&refused, RustLogError::Invalid { value, .. } if value == "idemgate=lots"),
            "{refused:?}"
        );
        assert!(
            refused
                .to_string()
                .starts_with("error: invalid value 'idemgate=lots' for RUST_LOG: "),
            "{refused}"
        );
    }

    #[test]
    fn statement_parameters_stay_out_of_the_log_whatever_the_level() {
        for level in [
            None,
            Some("trace"),
            Some("tokio_postgres::query=trace,info"),
        ] {
            let filter = log_filter(level).to_string();
            assert!(filter.contains("tokio_postgres::query=info"), "{filter}");
            assert!(!filter.contains("tokio_postgres::query=trace"), "{filter}");
        }
    }
}
