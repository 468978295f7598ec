//! Re-reading the config file while serving (SIGHUP, `POST /admin/reload`).
//! A file that fails validation is refused whole and the running config stays.

mod admin_disabled;
mod record_notes;
mod restart_only;

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{self, Config, ScopePart, TlsConfig};
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

    /// Logs and counts a reload's outcome: logged first, so that whoever
    /// sees the count (a test, an operator's script) finds the lines.
    fn record(&self, outcome: &ReloadOutcome) {
        let result = match outcome {
            ReloadOutcome::Applied { notes } => {
                tracing::info!(file = %self.path.display(), "configuration reloaded");
                for note in notes {
                    tracing::warn!("{note}");
                }
                admin_disabled::log(&self.gateway.runtime().config.admin);
                "ok"
            }
            ReloadOutcome::Rejected { errors } => {
                for error in errors {
                    tracing::error!("reload refused: {error}");
                }
                "rejected"
            }
            ReloadOutcome::Failed { fault } => {
                tracing::error!(fault = %fault, "reload stopped on a fault of the gateway");
                "rejected"
            }
        };
        let reloads = &self.gateway.metrics().config_reloads;
        reloads.with_label_values(&[result]).inc();
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
        let mut notes = restart_only::changes(&self.started, &new);
        let running = self.gateway.runtime().config.clone();
        notes.extend(record_notes::notes(&running, &new));
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

#[cfg(test)]
mod tests {
    use super::{ReloadOutcome, finished};

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
}
