//! `[upstreams.NAME]`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::context::Ctx;
use super::names;
use super::server::{MAX_CONNECTIONS, count_up_to, positive_duration};
use crate::config::UpstreamConfig;
use crate::config::UpstreamTlsConfig;
use crate::config::file::{UpstreamFile, UpstreamTlsFile};
use crate::config::units::DurationInput;

/// Per upstream and gateway process: bounds what one replica piles onto an
/// upstream, and its own memory (each connection holds ~30 KiB of buffers).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

pub fn upstreams(
    ctx: &mut Ctx<'_>,
    file: &BTreeMap<String, Spanned<UpstreamFile>>,
) -> BTreeMap<String, UpstreamConfig> {
    file.iter()
        .map(|(name, upstream)| (name.clone(), self::upstream(ctx, name, upstream)))
        .collect()
}

fn upstream(ctx: &mut Ctx<'_>, name: &str, upstream: &Spanned<UpstreamFile>) -> UpstreamConfig {
    let prefix = format!("upstreams.{name}");
    if let Err(message) = names::name(name) {
        ctx.error(Some(upstream.span()), &prefix, message);
    }
    let file = upstream.get_ref();
    let url = required_url(
        ctx,
        upstream.span(),
        &format!("{prefix}.url"),
        file.url.as_ref(),
        "url is required",
    );
    if let Some(tls) = &file.tls
        && url.starts_with("http://")
    {
        // Likely a URL left at http:// by mistake: the certificates would
        // go unused and the traffic in clear, which the table says it is not.
        ctx.error(
            Some(tls.span()),
            format!("{prefix}.tls"),
            "only applies to an https:// url; this upstream's url is http://, so nothing \
             would be encrypted",
        );
    }
    let (connect_timeout, timeout) = timeouts(
        ctx,
        &prefix,
        file.connect_timeout.as_ref(),
        file.timeout.as_ref(),
    );
    UpstreamConfig {
        name: name.to_owned(),
        url,
        connect_timeout,
        timeout,
        http2: file.http2.unwrap_or(false),
        keep_alive: keep_alive(ctx, &prefix, file),
        max_connections: ctx.value(
            file.max_connections.as_ref(),
            &format!("{prefix}.max_connections"),
            DEFAULT_MAX_CONNECTIONS,
            |n| count_up_to(*n, MAX_CONNECTIONS),
        ),
        tls: file.tls.as_ref().map(|tls| self::tls(ctx, &prefix, tls)),
    }
}

/// The URL a hop is dialed at (an upstream's, or a region's gateways'):
/// required, so its absence is an error at the table (`missing` says so)
/// and checking goes on with none.
pub fn required_url(
    ctx: &mut Ctx<'_>,
    table: Range<usize>,
    field: &str,
    url: Option<&Spanned<String>>,
    missing: &str,
) -> String {
    match url {
        Some(url) => ctx.value(Some(url), field, String::new(), |u| names::upstream_url(u)),
        None => {
            ctx.error(Some(table), field, missing);
            String::new()
        }
    }
}

/// A hop's `connect_timeout` (2 s) and `timeout` (30 s): an upstream's, and
/// a region's gateways', which are dialed as an upstream.
pub fn timeouts(
    ctx: &mut Ctx<'_>,
    prefix: &str,
    connect_timeout: Option<&Spanned<DurationInput>>,
    timeout: Option<&Spanned<DurationInput>>,
) -> (Duration, Duration) {
    let connect_timeout = ctx.value(
        connect_timeout,
        &format!("{prefix}.connect_timeout"),
        Duration::from_secs(2),
        positive_duration,
    );
    let timeout = ctx.value(
        timeout,
        &format!("{prefix}.timeout"),
        Duration::from_secs(30),
        positive_duration,
    );
    (connect_timeout, timeout)
}

/// `keep_alive = false` is for an HTTP/1 upstream that cannot be trusted to
/// keep a connection's answers in step with its requests; an HTTP/2
/// upstream's streams say which answer is whose.
fn keep_alive(ctx: &mut Ctx<'_>, prefix: &str, file: &UpstreamFile) -> bool {
    let Some(written) = &file.keep_alive else {
        return true;
    };
    if !*written.get_ref() && file.http2 == Some(true) {
        ctx.error(
            Some(written.span()),
            format!("{prefix}.keep_alive"),
            "applies to HTTP/1 upstreams only; with http2 = true every request is a stream \
             of one connection, its answer on the same stream",
        );
    }
    *written.get_ref()
}

fn tls(ctx: &mut Ctx<'_>, prefix: &str, tls: &Spanned<UpstreamTlsFile>) -> UpstreamTlsConfig {
    let file = tls.get_ref();
    let mut path = |value: &Option<Spanned<String>>, name: &str| {
        ctx.file_path(value.as_ref(), &format!("{prefix}.tls.{name}"))
    };
    let ca = path(&file.ca, "ca");
    let cert = path(&file.cert, "cert");
    let key = path(&file.key, "key");
    if file.cert.is_some() != file.key.is_some() {
        let missing = if file.cert.is_some() { "key" } else { "cert" };
        ctx.error(
            Some(tls.span()),
            format!("{prefix}.tls.{missing}"),
            "a client certificate needs both cert and key",
        );
    }
    UpstreamTlsConfig { ca, cert, key }
}
