//! Re-reading the config file while serving (SIGHUP, `POST /admin/reload`).
//! A file that fails validation is refused whole and the running config stays.

mod admin_disabled;
mod key_notes;

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{self, Config, ScopePart, StoreConfig, StoreKey, TlsConfig};
use crate::gateway::{Gateway, Runtime};
use crate::tls::{TlsError, TlsSettings};

pub use admin_disabled::log as log_if_admin_disabled;

pub struct Reloader {
    path: PathBuf,
    gateway: Arc<Gateway>,
    /// The config the process started with: what restart-only settings
    /// are compared against (the running runtime's config holds whatever
    /// the last reload read, which for those settings is not in effect).
    started: Arc<Config>,
    /// The listener's certificates, re-read on every reload.
    tls: Option<TlsSettings>,
    /// The admin plane's (`[admin.tls]`), likewise.
    admin_tls: Option<TlsSettings>,
    /// One reload at a time, so two quick SIGHUPs cannot interleave. Async:
    /// a reload waiting for another waits as a task, not on a thread of
    /// the pool for blocking work, which the embedded store reads on too.
    lock: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug)]
pub enum ReloadOutcome {
    /// Applied. Lists warnings and settings that only a restart applies.
    Applied { notes: Vec<String> },
    /// Refused; the running config stays.
    Rejected { errors: Vec<String> },
    /// The reload itself failed (a panic, or the process stopping under
    /// it): answered and logged, so that the SIGHUP task and the admin
    /// connection live on for the next reload.
    Failed { fault: String },
}

/// A reload's thread as it ended. A panic is a fault of the gateway, not of
/// the file: resumed here it would end the SIGHUP task (later SIGHUPs then
/// did nothing) or the admin connection that asked.
fn finished(ended: Result<ReloadOutcome, tokio::task::JoinError>) -> ReloadOutcome {
    match ended {
        Ok(outcome) => outcome,
        Err(error) => ReloadOutcome::Failed {
            fault: match error.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned()),
                // Only when the runtime stops, which drops the caller too.
                Err(_) => "the process is stopping: the reload did not run".to_owned(),
            },
        },
    }
}

impl Reloader {
    pub fn new(path: PathBuf, gateway: Arc<Gateway>, tls: Option<TlsSettings>) -> Self {
        Self {
            path,
            started: gateway.runtime().config.clone(),
            gateway,
            tls,
            admin_tls: None,
            lock: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Re-reads the admin plane's certificates too on every reload.
    pub fn with_admin_tls(mut self, admin_tls: Option<TlsSettings>) -> Self {
        self.admin_tls = admin_tls;
        self
    }

    /// Reloads once the reload running (if any) is done. The reload itself
    /// runs on a thread for blocking work: it reads files (the config,
    /// certificates, CA bundles), which on a thread that serves requests
    /// would hold up every task queued there for as long.
    pub async fn reload(self: &Arc<Self>) -> ReloadOutcome {
        // Held by the reload, not by this call: a caller that goes away
        // (an HTTP client hanging up) does not let the next one start
        // beside it.
        let one_at_a_time = self.lock.clone().lock_owned().await;
        let reloader = self.clone();
        let reload = move || {
            let outcome = reloader.reload_now();
            drop(one_at_a_time);
            outcome
        };
        let outcome = finished(tokio::task::spawn_blocking(reload).await);
        if matches!(outcome, ReloadOutcome::Failed { .. }) {
            self.record(&outcome);
        }
        outcome
    }

    /// Reads the file and applies it, on the calling thread; the caller
    /// holds `lock`.
    fn reload_now(&self) -> ReloadOutcome {
        let outcome = self.try_reload();
        self.record(&outcome);
        outcome
    }

    /// Logs and counts a reload's outcome.
    fn record(&self, outcome: &ReloadOutcome) {
        let metrics = self.gateway.metrics();
        match outcome {
            ReloadOutcome::Applied { notes } => {
                metrics.config_reloads.with_label_values(&["ok"]).inc();
                tracing::info!(file = %self.path.display(), "configuration reloaded");
                for note in notes {
                    tracing::warn!("{note}");
                }
                admin_disabled::log(&self.gateway.runtime().config.admin);
            }
            ReloadOutcome::Rejected { errors } => {
                metrics
                    .config_reloads
                    .with_label_values(&["rejected"])
                    .inc();
                for error in errors {
                    tracing::error!("reload refused: {error}");
                }
            }
            ReloadOutcome::Failed { fault } => {
                metrics
                    .config_reloads
                    .with_label_values(&["rejected"])
                    .inc();
                tracing::error!(fault = %fault, "reload stopped on a fault of the gateway");
            }
        }
    }

    /// `FILE: field: reason`, for what has no place in the file (a
    /// warning about a certificate's dates, the routes' clients).
    fn in_file(&self, error: &str) -> String {
        format!("{}: {error}", self.path.display())
    }

    fn try_reload(&self) -> ReloadOutcome {
        let new = match config::load(&self.path) {
            Ok(config) => config,
            Err(errors) => {
                return ReloadOutcome::Rejected {
                    errors: errors.0.iter().map(ToString::to_string).collect(),
                };
            }
        };
        // A `client_cert` scope reads the certificate the listener verified. A
        // listener started without TLS asks for none until a restart: applied
        // now, every client would share one namespace.
        if self.tls.is_none()
            && let Some(route) = new.routes.iter().find(|route| {
                route.idempotency && route.policy.scope.contains(&ScopePart::ClientCert)
            })
        {
            return ReloadOutcome::Rejected {
                errors: vec![format!(
                    "{}: route {:?}: scope client_cert needs client certificates, and this \
                     process serves plain HTTP until a restart turns server.tls on",
                    self.path.display(),
                    route.name
                )],
            };
        }
        // The budget for bodies read whole is the one the process started
        // with: a body past it would be refused 503 on every try.
        let budget = self.started.server.max_buffered_bodies;
        if new.server.max_request_body > budget {
            return ReloadOutcome::Rejected {
                errors: vec![format!(
                    "{}: server.max_request_body: {} bytes is more than the \
                     server.max_buffered_bodies this process started with ({budget} bytes), \
                     which only a restart raises: a body that large could never be read",
                    self.path.display(),
                    new.server.max_request_body,
                )],
            };
        }
        let mut notes = restart_only_changes(&self.started, &new);
        let running = self.gateway.runtime().config.clone();
        notes.extend(dropped_routes(&running, &new));
        notes.extend(changed_identities(&running, &new));
        notes.extend(moved_homes(&running, &new));
        // Said to the caller, who may be about to lose the API; the reason
        // (the variable's name) goes to the log only, as at start.
        if admin_disabled::why(&running.admin).is_none()
            && admin_disabled::why(&new.admin).is_some()
        {
            notes.push(
                "/admin/* is turned off by this file: it answers 404 not-found from now on \
                 (the log says why)"
                    .to_owned(),
            );
        }
        notes.extend(new.warnings.iter().cloned());
        notes.extend(
            crate::tls::validity_warnings(&new)
                .iter()
                .map(|warning| self.in_file(warning)),
        );
        // What `check` (and so the next start) refuses is refused here, in
        // its words: the store's settings too, though only a restart
        // applies them.
        let unusable = crate::preflight::unusable(&new);
        if !unusable.is_empty() {
            return ReloadOutcome::Rejected {
                errors: unusable.iter().map(ToString::to_string).collect(),
            };
        }
        // Build everything before swapping anything: a refusal changes nothing.
        // A file that cannot be used is said as `check` says it, located.
        let unusable = |error| ReloadOutcome::Rejected {
            errors: vec![crate::preflight::tls_error(&new, &error).to_string()],
        };
        let certificates = match renewed(&self.tls, &new.server.tls, crate::tls::server_config) {
            Ok(certificates) => certificates,
            Err(error) => return unusable(error),
        };
        let admin_certificates =
            match renewed(&self.admin_tls, &new.admin.tls, crate::tls::admin_config) {
                Ok(certificates) => certificates,
                Err(error) => return unusable(error),
            };
        match Runtime::renewed(Arc::new(new), &self.gateway.runtime()) {
            Ok(runtime) => {
                self.gateway.replace_runtime(runtime);
                if let (Some(settings), Some(config)) = (&self.tls, certificates) {
                    settings.store(config);
                }
                if let (Some(settings), Some(config)) = (&self.admin_tls, admin_certificates) {
                    settings.store(config);
                }
                ReloadOutcome::Applied { notes }
            }
            Err(error) => self.refused(&error.to_string()),
        }
    }

    /// Refused for one reason, said as `FILE: field: reason`.
    fn refused(&self, error: &str) -> ReloadOutcome {
        ReloadOutcome::Rejected {
            errors: vec![self.in_file(error)],
        }
    }
}

/// A TLS listener's certificates as the new file names them, built before
/// anything is swapped; none for a listener without TLS, or when the file
/// turns it off (a restart applies that).
fn renewed(
    running: &Option<TlsSettings>,
    new: &Option<TlsConfig>,
    build: fn(&TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError>,
) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
    match (running, new) {
        (Some(_), Some(tls)) => build(tls).map(Some),
        _ => Ok(None),
    }
}

/// Records are kept per route name: an idempotent route that is renamed,
/// removed or made a pass-through leaves its answers and leases behind, and a
/// retry of one of its keys runs again. Applied, but said.
fn dropped_routes(current: &Config, new: &Config) -> Vec<String> {
    current
        .routes
        .iter()
        .filter(|route| route.idempotency)
        .filter(|route| {
            !new.routes
                .iter()
                .any(|kept| kept.idempotency && kept.name == route.name)
        })
        .map(|route| {
            format!(
                "route {:?} is no longer an idempotent route: the answers and leases stored \
                 under it no longer apply, so a retry of one of its keys runs again",
                route.name
            )
        })
        .collect()
}

/// A record is found by its scope and matched by its fingerprint, both
/// computed under the policy of the moment: changing how they are made
/// orphans or refuses what was stored before. Applied, but said.
fn changed_identities(current: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    for route in current.routes.iter().filter(|route| route.idempotency) {
        let Some(kept) = new
            .routes
            .iter()
            .find(|kept| kept.idempotency && kept.name == route.name)
        else {
            continue;
        };
        let (old, now) = (&route.policy, &kept.policy);
        if old.scope != now.scope {
            notes.push(format!(
                "route {:?}: scope changed: answers stored under the old scope are not found, \
                 so a retry of one of their keys runs again",
                route.name
            ));
        }
        if old.fingerprint != now.fingerprint || old.canonical_json != now.canonical_json {
            notes.push(format!(
                "route {:?}: fingerprint changed: a retry of a key stored before gets 422 \
                 fingerprint-mismatch",
                route.name
            ));
        }
        notes.extend(key_notes::notes(&route.name, old, now));
    }
    notes
}

/// A key's home is drawn over the region names: adding, removing or
/// renaming one moves some keys to another home, where their records are not
/// (docs/multi-region.md). Applied, but said.
fn moved_homes(current: &Config, new: &Config) -> Option<String> {
    // No `[region]`, or one region alone: every key is at home.
    let names = |config: &Config| {
        config
            .region
            .as_ref()
            .map(|regions| regions.peers.keys().cloned().collect::<Vec<_>>())
            .filter(|names| names.len() > 1)
    };
    let (before, after) = (names(current), names(new));
    (before != after).then(|| {
        "the regions changed: keys whose home region moves are handled in their new home, \
         where their records are not, so a retry of one of them runs again"
            .to_owned()
    })
}

/// Settings a running process cannot change; reported, not silently ignored.
fn restart_only_changes(current: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |changed: bool, field: &str| {
        if changed {
            notes.push(format!(
                "{field} changed in the file; it takes effect only after a restart"
            ));
        }
    };
    note(current.server.listen != new.server.listen, "server.listen");
    note(
        current.server.admin_listen != new.server.admin_listen,
        "server.admin_listen",
    );
    note(
        current.server.tls.is_some() != new.server.tls.is_some(),
        "server.tls (turning TLS on or off)",
    );
    // The head limits too: the HTTP/1 parser of every connection is sized by
    // the values the listener started with (a lower value still applies, as
    // the gateway checks each head again; a higher one does not).
    note(
        current.server.max_connections != new.server.max_connections
            || current.server.header_read_timeout != new.server.header_read_timeout
            || current.server.body_read_timeout != new.server.body_read_timeout
            || current.server.shutdown_grace != new.server.shutdown_grace
            || current.server.max_header_bytes != new.server.max_header_bytes
            || current.server.max_headers != new.server.max_headers,
        "server connection limits",
    );
    note(
        current.server.max_buffered_bodies != new.server.max_buffered_bodies,
        "server.max_buffered_bodies",
    );
    let (keys_now, keys_new) = (store_keys(&current.store), store_keys(&new.store));
    // Said apart: an operator rotating keys must know that answers are still
    // sealed with the key the process started with (docs/data-protection.md).
    note(
        keys_now != keys_new,
        "store.encryption (the keys answers are sealed and opened with)",
    );
    note(
        without_keys(&current.store) != without_keys(&new.store),
        "store",
    );
    note(
        current.admin.tls.is_some() != new.admin.tls.is_some(),
        "admin.tls (turning TLS on or off)",
    );
    notes
}

fn store_keys(store: &StoreConfig) -> &[StoreKey] {
    match store {
        StoreConfig::Embedded(embedded) => &embedded.encryption,
        StoreConfig::Postgres(pg) => &pg.encryption,
    }
}

/// The store's settings but its keys, which are noted on their own.
fn without_keys(store: &StoreConfig) -> StoreConfig {
    let mut store = store.clone();
    match &mut store {
        StoreConfig::Embedded(embedded) => embedded.encryption.clear(),
        StoreConfig::Postgres(pg) => pg.encryption.clear(),
    }
    store
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{ReloadOutcome, finished, moved_homes, restart_only_changes};

    /// A reload that panics is an outcome like any other, with the panic's
    /// message, so the task that asked for it goes on to the next.
    #[tokio::test]
    async fn a_panicking_reload_is_a_failed_outcome() {
        let ended = tokio::task::spawn_blocking(|| -> ReloadOutcome {
            panic!("index out of bounds: the len is 0 but the index is 3")
        })
        .await;
        match finished(ended) {
            ReloadOutcome::Failed { fault } => {
                assert!(fault.starts_with("index out of bounds"), "{fault}")
            }
            other => panic!("{other:?}"),
        }
        let formatted =
            tokio::task::spawn_blocking(|| -> ReloadOutcome { panic!("{} routes", 3) }).await;
        assert!(matches!(
            finished(formatted),
            ReloadOutcome::Failed { fault } if fault == "3 routes"
        ));
        let applied =
            tokio::task::spawn_blocking(|| ReloadOutcome::Applied { notes: vec![] }).await;
        assert!(matches!(finished(applied), ReloadOutcome::Applied { .. }));
    }

    const BASE: &str = crate::config::ONE_ROUTE;

    fn config(extra: &str) -> crate::config::Config {
        let env = |name: &str| match name {
            "K1" => Some("QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=".to_owned()),
            "K2" => Some("QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=".to_owned()),
            "TOKEN" => Some("0123456789abcdef0123".to_owned()),
            _ => None,
        };
        let text = format!("{extra}{BASE}");
        crate::config::parse(&text, Path::new("t.toml"), &env).expect("valid")
    }

    #[test]
    fn new_encryption_keys_are_said_to_need_a_restart_by_name() {
        let one = config("[store.encryption]\nkeys_env = [\"K1\"]\n");
        let two = config("[store.encryption]\nkeys_env = [\"K2\", \"K1\"]\n");
        let notes = restart_only_changes(&one, &two);
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(notes[0].starts_with("store.encryption"), "{}", notes[0]);
        assert!(notes[0].contains("only after a restart"), "{}", notes[0]);

        let moved =
            config("[store]\npath = \"elsewhere.db\"\n[store.encryption]\nkeys_env = [\"K1\"]\n");
        let notes = restart_only_changes(&one, &moved);
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(notes[0].starts_with("store changed"), "{}", notes[0]);
        assert!(restart_only_changes(&one, &one).is_empty());
    }

    fn regions(names: &[&str]) -> crate::config::Config {
        let mut text = format!("[region]\nname = \"{}\"\ntoken_env = \"TOKEN\"\n", names[0]);
        for (i, name) in names.iter().enumerate() {
            text += &format!("[regions.{name}]\ngateway = \"http://10.0.0.{i}:8080\"\n");
        }
        config(&text)
    }

    #[test]
    fn a_change_of_regions_is_said_to_move_keys() {
        let none = config("");
        let alone = regions(&["eu"]);
        let two = regions(&["eu", "us"]);
        let three = regions(&["eu", "us", "ap"]);
        for (before, after) in [(&none, &two), (&two, &three), (&three, &two), (&two, &none)] {
            let note = moved_homes(before, after).expect("a note");
            assert!(note.contains("runs again"), "{note}");
            assert!(!note.contains("  "), "{note}");
        }
        assert_eq!(moved_homes(&two, &regions(&["eu", "us"])), None);
        assert_eq!(
            moved_homes(&none, &alone),
            None,
            "one region: every key at home"
        );
    }
}
