//! `idemgate serve`, the running process wired in one place: metrics, the
//! store stack (`store_stack`), the gateway's runtime, the reloader, both
//! listeners (the data plane and the admin plane) and the signals. Runs
//! until SIGTERM/SIGINT, reloads on SIGHUP.

pub mod open_files;
mod signals;
mod start_error;
mod store_stack;

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admin::AdminPlane;
use crate::config::{Config, ConfigErrors};
use crate::gateway::{Gateway, Runtime};
use crate::metrics::Metrics;
use crate::reload::{self, Reloader};
use crate::server::{self, Limits};
use crate::tls::TlsSettings;
use signals::Signals;
use store_stack::Upkeep;

pub use signals::ignore_file_size_limit_signal;
pub use start_error::StartError;

/// Runs the gateway until a termination signal, then drains and returns.
pub async fn run(config_path: PathBuf, config: Config) -> Result<(), StartError> {
    let mut signals = Signals::take_over();
    let config = Arc::new(config);
    let registry = prometheus::Registry::new();
    let metrics = Metrics::new(registry).map_err(StartError::Metrics)?;
    // Before the store is opened (and migrated): what cannot be used is
    // said as `check` says it, all at once.
    let unusable = crate::preflight::unusable(&config);
    if !unusable.is_empty() {
        return Err(StartError::Unusable(ConfigErrors(unusable)));
    }
    // The slow part of a start (a database to reach, a file to migrate):
    // a stop asked for meanwhile ends it. One after it is kept for `watch`.
    let opening = store_stack::open(&config.store, &metrics);
    let Some(opened) = Signals::unless_stopped(signals.as_mut(), opening).await else {
        tracing::info!("stopped while starting (SIGTERM or SIGINT): nothing was served");
        return Ok(());
    };
    let (store, schema) = opened.map_err(StartError::Store)?;
    let runtime = Runtime::new(config.clone()).map_err(StartError::Runtime)?;
    let tls: Option<TlsSettings> = match &config.server.tls {
        Some(tls) => Some(Arc::new(ArcSwap::new(
            crate::tls::server_config(tls).map_err(StartError::Tls)?,
        ))),
        None => None,
    };
    let admin_tls: Option<TlsSettings> = match &config.admin.tls {
        Some(tls) => Some(Arc::new(ArcSwap::new(
            crate::tls::admin_config(tls).map_err(StartError::Tls)?,
        ))),
        None => None,
    };

    let data = bind(config.server.listen, "listen").await?;
    let admin = bind(config.server.admin_listen, "admin_listen").await?;
    // Only once the gateway will run: a failure to start is its one line on
    // stderr (docs/operating.md), not preceded by warnings about the file.
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    for warning in crate::tls::validity_warnings(&config) {
        tracing::warn!("{}: {warning}", config_path.display());
    }
    reload::log_if_admin_disabled(&config.admin);
    let upstream_connections = config
        .upstreams
        .values()
        .map(|u| u.max_connections)
        .sum::<usize>()
        + crate::region::forward_connections(&config);
    let open_files = open_files::current();
    if let Some(needed) = open_files::short_of(
        open_files,
        config.server.max_connections,
        upstream_connections,
    ) {
        tracing::warn!(
            limit = open_files.0,
            needed,
            "the open files limit (ulimit -n, its hard limit) is below what \
             server.max_connections, the upstreams' and other regions' connections need; \
             connections past it wait until others close"
        );
    }
    if let crate::config::StoreConfig::Embedded(embedded) = &config.store
        && embedded.durability == crate::config::Durability::ProcessCrash
    {
        tracing::info!(
            path = %embedded.path.display(),
            "embedded store: durability = \"process_crash\": answers are acknowledged \
             before they are synced; a power loss or kernel panic can lose the last ones"
        );
    }
    // Here, with the other start lines: a failure to bind or read a
    // certificate after the migration stays one line on stderr.
    store_stack::log_schema(&config.store, &schema);
    tracing::info!(
        listen = %data.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        admin = %admin.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        store = store.backend(),
        routes = config.routes.len(),
        "idemgate serving"
    );

    let gateway = Arc::new(Gateway::new(runtime, store.clone(), metrics.clone()));
    let reloader = Arc::new(
        Reloader::new(config_path, gateway.clone(), tls.clone()).with_admin_tls(admin_tls.clone()),
    );
    let upkeep = Upkeep::start(&store, &config.store, &metrics, &gateway);

    let shutdown = CancellationToken::new();
    let abandon = CancellationToken::new();
    tokio::spawn(signals::watch(
        shutdown.clone(),
        abandon.clone(),
        reloader.clone(),
        signals,
    ));

    let limits = Limits {
        max_connections: config.server.max_connections,
        header_read_timeout: config.server.header_read_timeout,
        max_header_bytes: config.server.max_header_bytes,
        max_headers: config.server.max_headers,
        // The parser admits a forward's own fields too, with or without
        // `[region]` (a reload may add it); the gateway holds every other
        // request to `max_headers` itself.
        extra_fields: crate::region::HOP_FIELDS,
        shutdown_grace: config.server.shutdown_grace,
        abandon,
        tls,
        detached: gateway.executions(),
        cut_off: gateway.cut_off(),
        on_refusal: Some({
            let gateway = gateway.clone();
            Arc::new(move |error, client| gateway.refused(error, client))
        }),
        on_tls_refusal: Some(tls_refusals(&metrics, &config)),
        on_eviction: Some({
            let counter = metrics.connections_evicted.clone();
            Arc::new(move |listener| counter.with_label_values(&[listener]).inc())
        }),
    };
    // The admin plane outlives the data plane's drain: metrics show it and
    // `/readyz` answers 503 through it (docs/operating.md, Shutdown).
    let admin_stop = CancellationToken::new();
    let data_plane = {
        let gateway = gateway.clone();
        let serving = server::serve(
            "data",
            data,
            limits.clone(),
            // The handler's own future, not one wrapping it: each layer of
            // future moves (copies) the whole of the one inside it.
            move |request, client| gateway.clone().handle(request, client),
            shutdown.clone(),
        );
        let admin_stop = admin_stop.clone();
        async move {
            serving.await;
            admin_stop.cancel();
        }
    };
    let admin_plane = {
        let plane = Arc::new(AdminPlane::new(gateway.clone(), reloader, shutdown.clone()));
        server::serve(
            "admin",
            admin,
            Limits {
                tls: admin_tls,
                // The admin plane checks no head itself.
                extra_fields: 0,
                // The data plane waits for the executions.
                detached: tokio_util::task::TaskTracker::new(),
                cut_off: CancellationToken::new(),
                // Its refusals are no data-plane requests.
                on_refusal: None,
                ..limits
            },
            move |request, client| {
                let plane = plane.clone();
                async move { plane.handle(request, &client).await }
            },
            admin_stop,
        )
    };
    tokio::join!(data_plane, admin_plane);
    upkeep.stop();
    tracing::info!("idemgate stopped");
    Ok(())
}

/// Counts a TLS listener's refusals; each TLS listener's series read 0
/// from the start, so an alert on the first increase fires.
fn tls_refusals(metrics: &Metrics, config: &Config) -> server::OnTlsRefusal {
    let listeners = [
        ("data", config.server.tls.is_some()),
        ("admin", config.admin.tls.is_some()),
    ];
    for (listener, _) in listeners.iter().filter(|(_, tls)| *tls) {
        for reason in server::RefusalReason::ALL {
            metrics
                .tls_refused
                .with_label_values(&[*listener, reason.as_str()]);
        }
    }
    let counter = metrics.tls_refused.clone();
    Arc::new(move |listener, reason| {
        counter
            .with_label_values(&[listener, reason.as_str()])
            .inc();
    })
}

async fn bind(addr: std::net::SocketAddr, field: &'static str) -> Result<TcpListener, StartError> {
    (TcpListener::bind(addr).await).map_err(|source| StartError::Bind {
        addr,
        field,
        source,
    })
}
