//! The store's upkeep: `migrate`, `sweep`, `compact`.

use std::path::Path;
use std::sync::Arc;

use super::output::{EXIT_FAILURE, EXIT_OK, deleted, say};
use super::stop_signal::{StopSignal, StopSignals};
use super::store_failure::explained;
use super::store_file::{RELATIVE_PATH, load, missing_store_file, note_missing};
use crate::config;
use crate::store;
use crate::store::embedded::{CompactStop, Compaction};

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
/// SIGINT and SIGTERM stop the rewrite, rolled back: the file is as it was.
pub async fn compact(path: &Path) -> i32 {
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
    let (compaction, received) = compact_until_stopped(embedded.path.clone()).await;
    match compaction {
        Ok(Ok(Compaction::Done(done))) => say(&format!(
            "{}: {} bytes before, {} bytes after\n",
            embedded.path.display(),
            done.before,
            done.after
        ))
        .map_or_else(|code| code, |()| EXIT_OK),
        Ok(Ok(Compaction::Stopped)) => {
            let signal = received.unwrap_or(StopSignal::Interrupt);
            eprintln!(
                "idemgate compact: interrupted by {}: stopped before the rewrite ended; \
                 the file is as it was",
                signal.name()
            );
            signal.exit_code()
        }
        Ok(Err(err)) => {
            eprintln!("idemgate compact: {}", explained(&err));
            EXIT_FAILURE
        }
        Err(failed) => {
            eprintln!("idemgate compact: the rewrite failed: {failed}");
            EXIT_FAILURE
        }
    }
}

/// The rewrite, on a thread of its own, stopped by the first SIGINT or
/// SIGTERM; how it ended and the signal received, if any.
async fn compact_until_stopped(
    file: std::path::PathBuf,
) -> (
    Result<Result<Compaction, store::StoreError>, tokio::task::JoinError>,
    Option<StopSignal>,
) {
    let stop = Arc::new(CompactStop::default());
    let mut signals = StopSignals::take_over();
    let rewrite = tokio::task::spawn_blocking({
        let stop = Arc::clone(&stop);
        move || store::EmbeddedStore::compact(&file, &stop)
    });
    tokio::pin!(rewrite);
    let mut received = None;
    let ended = loop {
        tokio::select! {
            ended = &mut rewrite => break ended,
            signal = next_signal(signals.as_mut()), if received.is_none() => {
                received = Some(signal);
                stop.stop();
            }
        }
    };
    (ended, received)
}

/// The first stop signal; never when they were not taken over.
async fn next_signal(signals: Option<&mut StopSignals>) -> StopSignal {
    match signals {
        Some(signals) => signals.next().await,
        None => std::future::pending().await,
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
