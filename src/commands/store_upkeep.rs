//! The store's upkeep: `migrate`, `sweep`, `compact`.

use std::path::Path;

use super::output::{EXIT_FAILURE, EXIT_OK, deleted, say};
use super::stop_signal::StopSignals;
use super::store_failure::explained;
use super::store_file::{RELATIVE_PATH, load, missing_store_file, note_missing};
use crate::config;
use crate::store;

pub async fn migrate(path: &Path) -> i32 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match store::migrate(&config.store).await {
        Ok(report) => say(&migrated(&config.store, &report)).map_or_else(|code| code, |()| EXIT_OK),
        Err(err) => {
            eprintln!("idemgate migrate: {}", explained(&err));
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
            eprintln!("idemgate sweep: {}", explained(&err));
            return EXIT_FAILURE;
        }
    };
    let (_, batch) = store::sweep_settings(&config.store);
    let mut stop = StopSignals::take_over();
    let mut total = 0;
    loop {
        if let Some(signal) = stop.as_mut().and_then(StopSignals::received) {
            // Said as a finished sweep says it, for a script that reads it;
            // the exit code tells the two apart.
            if let Err(code) = say(&deleted(total, "expired ")) {
                return code;
            }
            eprintln!(
                "idemgate sweep: interrupted by {}: stopped between two batches; the expired \
                 records left are deleted by the next sweep",
                signal.name()
            );
            return signal.exit_code();
        }
        match store.sweep(batch).await {
            Ok(swept) => {
                total += swept;
                if swept < u64::from(batch.max(1)) {
                    break;
                }
            }
            Err(err) => {
                eprintln!(
                    "idemgate sweep: {} (deleted {total} before the error)",
                    explained(&err)
                );
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
            eprintln!("idemgate compact: {}", explained(&err));
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
