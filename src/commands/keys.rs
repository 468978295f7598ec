//! `idemgate keys show|purge|list`: a key's records, and a route's, from
//! the store, as the admin API answers them.

use std::path::Path;

use super::output::{EXIT_FAILURE, EXIT_OK, deleted, say};
use super::route_arg;
use super::store_failure::explained;
use super::store_file::{RELATIVE_PATH, load, missing_store_file, note_missing};
use crate::admin::records;
use crate::config::StoreSettings;
use crate::store;

/// Why a key that reads as a quoted string may have found nothing.
const QUOTED_HINT: &str = " (keys are named as stored, as `keys list` prints them: a key \
     a client sent quoted, as in Idempotency-Key: \"k1\", is stored without its quotes)";

pub async fn keys(path: &Path, route: &str, key: &str, purge: bool) -> i32 {
    // As stored, as the listing shows it: `"k1"` is never read as `k1`.
    // The message says what is wrong, never the key.
    let key = match crate::key::as_stored(key.as_bytes()) {
        Ok(key) => key,
        Err(error) => {
            eprintln!("idemgate keys: {error}");
            return EXIT_FAILURE;
        }
    };
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // A route renamed or removed from the file still holds its records until
    // they expire (`keys list` lists them), and they may need a purge: they
    // are looked up whatever the file says. Its routes only explain an empty
    // answer, such as a misspelt name.
    let hint = match config.scope_of(route) {
        Some(_) if crate::key::unquotes_in_a_header(key) => QUOTED_HINT.to_owned(),
        Some(_) => String::new(),
        None => format!(
            " ({} has no route named {})",
            path.display(),
            route_arg::shown(route)
        ),
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
            "no records for this key on route {}{hint}: the embedded store {} \
             does not exist ({RELATIVE_PATH})",
            route_arg::shown(route),
            file.display()
        );
        return EXIT_FAILURE;
    }
    let store = match store::open(&config.store).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("idemgate keys: {}", explained(&err));
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
            eprintln!(
                "no records for this key on route {}{hint}",
                route_arg::shown(route)
            );
            EXIT_FAILURE
        }
        Ok((_, Ok(()))) => EXIT_OK,
        Err(err) => {
            eprintln!("idemgate keys: {}", explained(&err));
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
    // clap allowed only the three names.
    let state = args.state.as_deref().and_then(RecordState::parse);
    let decode = |text| Cursor::decode(text, &args.route, state);
    let after = match args.after.as_deref().map(decode).transpose() {
        Ok(after) => after,
        Err(error) => {
            eprintln!("idemgate keys list: --after: {error}");
            return EXIT_FAILURE;
        }
    };
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
            let text = serde_json::to_string_pretty(&crate::admin::listing::to_json(
                &page,
                &args.route,
                state,
            ))
            .unwrap_or_default();
            if let Err(code) = say(&format!("{text}\n")) {
                return code;
            }
            // Any name is listed (a renamed route keeps its records), but a
            // first page empty on a route the file lacks is most likely a
            // misspelt name: said, and a failure, as `keys show` says it.
            let known = config.scope_of(&args.route).is_some();
            if page.records.is_empty() && args.after.is_none() && !known {
                let route = route_arg::shown(&args.route);
                eprintln!(
                    "no records on route {route} ({} has no route named {route})",
                    path.display()
                );
                return EXIT_FAILURE;
            }
            EXIT_OK
        }
        Err(err) => {
            eprintln!("idemgate keys list: {}", explained(&err));
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
