//! The one-shot commands (`check`, `migrate`, `sweep`, `compact`, `keys`): each returns
//! the process exit code and prints for a person at a terminal.

use std::path::Path;

use crate::admin::records;
use crate::config::{self, StoreSettings};
use crate::store;

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;

/// Writes (part of) a report to stdout. A reader that went away (`idemgate keys
/// show … | head`) is no failure of the command: the rest is dropped
/// quietly (`println!` would panic, with a backtrace). Any other write error (a
/// full disk) is said on stderr and fails the command: a script must not take
/// a cut report for a whole one.
fn say(text: &str) -> Result<(), i32> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => {
            eprintln!("idemgate: cannot write to stdout: {err}");
            Err(EXIT_FAILURE)
        }
    }
}

/// Whether stdout and stderr are one file: the same terminal, or one pipe
/// or log file under `2>&1`. Where `/proc` cannot say, both are terminals.
fn streams_are_one_file() -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata("/proc/self/fd/1"),
        std::fs::metadata("/proc/self/fd/2"),
    ) {
        (Ok(out), Ok(err)) => out.dev() == err.dev() && out.ino() == err.ino(),
        _ => {
            std::io::IsTerminal::is_terminal(&std::io::stdout())
                && std::io::IsTerminal::is_terminal(&std::io::stderr())
        }
    }
}

pub fn check(path: &Path) -> i32 {
    match config::load(path) {
        Ok(config) => {
            if let Err(code) = say(&config::describe(&config)) {
                return code;
            }
            // The report above lists the warnings; a script or a test that
            // captures the streams apart finds them on stderr too. Where both
            // go to one place (a terminal, `2>&1`) they are read once.
            let one_place = streams_are_one_file();
            if !one_place {
                for warning in &config.warnings {
                    eprintln!("warning: {warning}");
                }
            }
            for warning in crate::tls::validity_warnings(&config) {
                let warning = format!("warning: {}: {warning}", path.display());
                if let Err(code) = say(&format!("{warning}\n")) {
                    return code;
                }
                if !one_place {
                    eprintln!("{warning}");
                }
            }
            // The files the config names and the store's URLs, read as
            // `serve` (and a reload) would read them.
            let unusable = crate::preflight::unusable(&config);
            for error in &unusable {
                eprintln!("{error}");
            }
            if !unusable.is_empty() {
                return EXIT_FAILURE;
            }
            say(&format!("{}: ok\n", path.display())).map_or_else(|code| code, |()| EXIT_OK)
        }
        Err(errors) => {
            eprintln!("{errors}");
            EXIT_FAILURE
        }
    }
}

/// The embedded store's file when it does not exist. It holds no records
/// then, and the one-shot commands answer so without creating it: a
/// relative `store.path` is read from the working directory, so a command
/// run from another one would leave a stray empty store behind and say
/// nothing of it. Their stderr names the file looked for.
fn missing_store_file(config: &StoreSettings) -> Option<std::path::PathBuf> {
    let crate::config::StoreConfig::Embedded(embedded) = &config.store else {
        return None;
    };
    if embedded.path.exists() {
        return None;
    }
    Some(std::path::absolute(&embedded.path).unwrap_or_else(|_| embedded.path.clone()))
}

/// Why a store that does not exist may still be the right one to ask.
const RELATIVE_PATH: &str = "a relative store.path is read from the working directory";

/// The stderr line of `sweep` and `keys list`, which succeed on it.
fn note_missing(file: &Path) {
    eprintln!(
        "note: the embedded store {} does not exist, so it holds no records ({RELATIVE_PATH})",
        file.display()
    );
}

/// The store commands' read of the file (`config::load_store_settings`).
fn load(path: &Path) -> Result<StoreSettings, i32> {
    config::load_store_settings(path).map_err(|errors| {
        eprintln!("{errors}");
        EXIT_FAILURE
    })
}

pub async fn migrate(path: &Path) -> i32 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match store::migrate(&config.store).await {
        Ok(report) => say(&migrated(&config.store, &report)).map_or_else(|code| code, |()| EXIT_OK),
        Err(err) => {
            eprintln!("idemgate migrate: {err}");
            EXIT_FAILURE
        }
    }
}

pub async fn sweep(path: &Path) -> i32 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(file) = missing_store_file(&config) {
        note_missing(&file);
        return say(&deleted(0, "expired ")).map_or_else(|code| code, |()| EXIT_OK);
    }
    let store = match store::open(&config.store).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("idemgate sweep: {err}");
            return EXIT_FAILURE;
        }
    };
    let (_, batch) = store::sweep_settings(&config.store);
    let mut total = 0;
    loop {
        match store.sweep(batch).await {
            Ok(swept) => {
                total += swept;
                if swept < u64::from(batch.max(1)) {
                    break;
                }
            }
            Err(err) => {
                eprintln!("idemgate sweep: {err} (deleted {total} before the error)");
                return EXIT_FAILURE;
            }
        }
    }
    say(&deleted(total, "expired ")).map_or_else(|code| code, |()| EXIT_OK)
}

/// Rewrites the embedded store's file without the space swept and purged
/// records left; Postgres has its own tools for that, which it names.
pub fn compact(path: &Path) -> i32 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let config::StoreConfig::Embedded(embedded) = &config.store else {
        eprintln!(
            "idemgate compact: the store is Postgres, whose space VACUUM (autovacuum) \
             reuses; to give it back to the file system run VACUUM FULL idemgate_records \
             (it locks the table while it runs) or pg_repack"
        );
        return EXIT_FAILURE;
    };
    if let Some(file) = missing_store_file(&config) {
        eprintln!(
            "idemgate compact: the embedded store {} does not exist ({RELATIVE_PATH})",
            file.display()
        );
        return EXIT_FAILURE;
    }
    match store::EmbeddedStore::compact(&embedded.path) {
        Ok(done) => say(&format!(
            "{}: {} bytes before, {} bytes after\n",
            embedded.path.display(),
            done.before,
            done.after
        ))
        .map_or_else(|code| code, |()| EXIT_OK),
        Err(err) => {
            eprintln!("idemgate compact: {err}");
            EXIT_FAILURE
        }
    }
}

/// `migrate`'s line: the version found, the version now, the migrations
/// applied (the facts `serve` logs at start).
fn migrated(config: &config::StoreConfig, report: &store::MigrationReport) -> String {
    let now = report.now;
    let line = match config {
        config::StoreConfig::Embedded(embedded) => {
            let file = embedded.path.display();
            if report.up_to_date() {
                format!("embedded store {file} schema is up to date (version {now})")
            } else if report.found == 0 {
                format!("embedded store {file} created (schema version {now})")
            } else {
                format!(
                    "embedded store {file} migrated from version {} to {now}",
                    report.found
                )
            }
        }
        config::StoreConfig::Postgres(_) => {
            if report.up_to_date() {
                format!("postgres store schema is up to date (version {now})")
            } else {
                let applied: Vec<String> = report.applied.iter().map(i64::to_string).collect();
                format!(
                    "postgres store migrated from version {} to {now} (applied {})",
                    report.found,
                    applied.join(", ")
                )
            }
        }
    };
    line + "\n"
}

/// The line `sweep` and `keys purge` end with: "1 record deleted",
/// "2 expired records deleted".
fn deleted(count: u64, kind: &str) -> String {
    let records = if count == 1 { "record" } else { "records" };
    format!("{count} {kind}{records} deleted\n")
}

pub async fn keys(path: &Path, route: &str, key: &str, purge: bool) -> i32 {
    // As the listing shows it, or as a header carries it (`"k1"` is `k1`).
    // The message says what is wrong, never the key.
    let key = match crate::key::from_operator(key.as_bytes()) {
        Ok(key) => key,
        Err(error) => {
            eprintln!("idemgate keys: {error}");
            return EXIT_FAILURE;
        }
    };
    let key = key.as_str();
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // A route renamed or removed from the file still holds its records until
    // they expire (`keys list` lists them), and they may need a purge: they
    // are looked up whatever the file says. Its routes only explain an empty
    // answer, such as a misspelt name.
    let hint = match config.scope_of(route) {
        Some(_) => String::new(),
        None => format!(" ({} has no route named {route:?})", path.display()),
    };
    // With regions the store is one region's: where the key's records are
    // kept, as the admin API's 404 says it.
    let hint = match &config.region {
        Some(region) => {
            let whereabouts = crate::region::key_home(region, config.scope_of(route), route, key);
            format!("{hint}{}", elsewhere(&whereabouts))
        }
        None => hint,
    };
    if let Some(file) = missing_store_file(&config) {
        eprintln!(
            "no records for this key on route {route:?}{hint}: the embedded store {} \
             does not exist ({RELATIVE_PATH})",
            file.display()
        );
        return EXIT_FAILURE;
    }
    let store = match store::open(&config.store).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("idemgate keys: {err}");
            return EXIT_FAILURE;
        }
    };
    let result = if purge {
        records::purge_standing(store.as_ref(), route, key, records::PurgedBy::Command)
            .await
            .map(|n| (n, say(&deleted(n, ""))))
    } else {
        records::standing(store.as_ref(), route, key)
            .await
            .map(|found| {
                let text =
                    serde_json::to_string_pretty(&records::to_json(&found)).unwrap_or_default();
                (found.len() as u64, say(&format!("{text}\n")))
            })
    };
    match result {
        Ok((_, Err(code))) => code,
        Ok((0, Ok(()))) => {
            eprintln!("no records for this key on route {route:?}{hint}");
            EXIT_FAILURE
        }
        Ok((_, Ok(()))) => EXIT_OK,
        Err(err) => {
            eprintln!("idemgate keys: {err}");
            EXIT_FAILURE
        }
    }
}

/// The end of `keys show|purge`'s "no records" line with regions: where to
/// look instead.
fn elsewhere(whereabouts: &crate::region::Whereabouts) -> String {
    use crate::region::KeyHome;
    let this = &whereabouts.this;
    match &whereabouts.home {
        KeyHome::Region(home) if home == this => {
            format!(" in region {this}, which is its home region")
        }
        KeyHome::Region(home) => {
            format!(" in region {this}: its home region is {home}; run this against {home}'s store")
        }
        KeyHome::PerScope => format!(
            " in region {this}: the route's scope reads each request, so the key's home \
             region depends on it; look in each region"
        ),
        KeyHome::UnknownRoute => {
            format!(" in region {this}: its home region is not known; look in each region")
        }
    }
}

/// `idemgate keys list`: one page of a route's records, as
/// `GET /admin/keys/{route}` answers it. A route the config no longer has
/// may still hold records (renamed or removed), so any name is listed.
pub async fn list_keys(args: &crate::cli::ListArgs) -> i32 {
    use crate::store::{Cursor, RecordState};
    let after = match args.after.as_deref().map(Cursor::decode).transpose() {
        Ok(after) => after,
        Err(error) => {
            eprintln!("idemgate keys list: --after: {error}");
            return EXIT_FAILURE;
        }
    };
    // clap allowed only the three names.
    let state = args.state.as_deref().and_then(RecordState::parse);
    let path = args.config.path();
    let config = match load(&path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let page = if let Some(file) = missing_store_file(&config) {
        note_missing(&file);
        Ok(crate::store::Page {
            records: Vec::new(),
            next: None,
        })
    } else {
        page(&config, args, state, after).await
    };
    match page {
        Ok(page) => {
            let text = serde_json::to_string_pretty(&crate::admin::listing::to_json(&page))
                .unwrap_or_default();
            if let Err(code) = say(&format!("{text}\n")) {
                return code;
            }
            // Any name is listed (a renamed route keeps its records), but a
            // first page empty on a route the file lacks is most likely a
            // misspelt name: said, and a failure, as `keys show` says it.
            let known = config.scope_of(&args.route).is_some();
            if page.records.is_empty() && args.after.is_none() && !known {
                eprintln!(
                    "no records on route {:?} ({} has no route named {:?})",
                    args.route,
                    path.display(),
                    args.route
                );
                return EXIT_FAILURE;
            }
            EXIT_OK
        }
        Err(err) => {
            eprintln!("idemgate keys list: {err}");
            EXIT_FAILURE
        }
    }
}

/// One page of `idemgate keys list` from the configured store.
async fn page(
    config: &StoreSettings,
    args: &crate::cli::ListArgs,
    state: Option<crate::store::RecordState>,
    after: Option<crate::store::Cursor>,
) -> Result<crate::store::Page, store::StoreError> {
    let store = store::open(&config.store).await?;
    let query = crate::store::ListQuery {
        route: args.route.clone(),
        state,
        limit: args.limit,
        after,
    };
    store.list(&query).await
}
