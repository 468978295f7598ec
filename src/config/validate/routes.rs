//! `[[routes]]`: names, match, upstream, and each route's effective policy.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use toml::Spanned;

use super::context::Ctx;
use super::names;
use super::policy;
use super::webhook;
use crate::config::describe;
use crate::config::file::{MatchFile, PolicyFile, RouteFile};
use crate::config::units::format_duration;
use crate::config::{Policy, RouteConfig, RouteMatch, UpstreamConfig};
use crate::config::{field_path, quoted};

/// What the route checks need from the rest of the file.
pub struct Inherited<'a> {
    pub defaults: &'a Policy,
    pub defaults_file: &'a PolicyFile,
    pub upstreams: &'a BTreeMap<String, UpstreamConfig>,
    /// `server.max_header_bytes`: a request head, its target included, is
    /// at most this long.
    pub max_header_bytes: u64,
}

/// Resolves every route; returns them with the span that locates each one.
pub fn routes(
    ctx: &mut Ctx<'_>,
    routes: Option<&Spanned<Vec<Spanned<RouteFile>>>>,
    inherited: &Inherited<'_>,
) -> Vec<(RouteConfig, Range<usize>)> {
    let Some(written) = routes.filter(|r| !r.get_ref().is_empty()) else {
        ctx.error(
            routes.map(Spanned::span),
            "routes",
            "at least one [[routes]] is required",
        );
        return Vec::new();
    };
    // Each name's first route, and where its name is written.
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    let mut resolved = Vec::new();
    for (i, route) in written.get_ref().iter().enumerate() {
        let config = self::route(ctx, i, route, inherited);
        let span = route.get_ref().name.as_ref().map(Spanned::span);
        if let Some(&(first, at)) = seen.get(&config.name) {
            let line = ctx.line(at);
            ctx.error(
                span,
                format!("routes[{i}].name"),
                format!(
                    "duplicate route name {} (first at routes[{first}], line {line})",
                    quoted(&config.name)
                ),
            );
        } else if let Some(span) = span.filter(|_| !config.name.is_empty()) {
            seen.insert(config.name.clone(), (i, span.start));
        }
        resolved.push((config, route.span()));
    }
    resolved
}

/// How a later check names route `i` in its message: `route "api"`, or
/// `routes[3]` when its name was refused or not written (it is then empty).
pub fn called(route: &RouteConfig, i: usize) -> String {
    match route.name.as_str() {
        "" => format!("routes[{i}]"),
        name => format!("route {}", quoted(name)),
    }
}

fn route(
    ctx: &mut Ctx<'_>,
    i: usize,
    route: &Spanned<RouteFile>,
    inherited: &Inherited<'_>,
) -> RouteConfig {
    let prefix = format!("routes[{i}]");
    let file = route.get_ref();
    let name = required(ctx, route, file.name.as_ref(), &prefix, "name", names::name);
    let upstream = required(
        ctx,
        route,
        file.upstream.as_ref(),
        &prefix,
        "upstream",
        |name| match inherited.upstreams.contains_key(name) {
            true => Ok(name.to_owned()),
            false => Err(unknown_upstream(name, inherited.upstreams)),
        },
    );
    let matcher = match &file.matcher {
        Some(matcher) => route_match(ctx, matcher, &prefix, inherited.max_header_bytes),
        None => {
            ctx.error(
                Some(route.span()),
                format!("{prefix}.match"),
                "match is required",
            );
            RouteMatch::default()
        }
    };
    let idempotency = file.idempotency.as_ref().is_none_or(|v| *v.get_ref());
    let webhook =
        (file.webhook.as_ref()).and_then(|written| webhook::webhook(ctx, written, &prefix));
    // A webhook route's own defaults sit between `[defaults]` and its fields.
    let webhook_defaults = (webhook.as_ref())
        .map(|webhook| webhook::route_defaults(inherited.defaults, webhook.scheme));
    let base = webhook_defaults.as_ref().unwrap_or(inherited.defaults);
    let policy = policy::resolve(ctx, base, &file.policy(), &prefix);
    if let Some(webhook) = &webhook {
        let span = (file.fingerprint.as_ref().map(Spanned::span)).or(Some(route.span()));
        let field = format!("{prefix}.fingerprint");
        webhook::redelivery_fingerprint(ctx, webhook.scheme, &policy.fingerprint, span, &field);
    }
    let ignored = file.policy_fields_set();
    if !idempotency && !ignored.is_empty() {
        ctx.warn(
            file.idempotency.as_ref().map(Spanned::span),
            &prefix,
            format!("{} ignored: idempotency = false", ignored.join(", ")),
        );
    }
    if idempotency && let Some(upstream) = inherited.upstreams.get(&upstream) {
        lock_outlives_upstream(ctx, &prefix, route, &policy, inherited, upstream);
    }
    // An idempotent route that only matches methods idempotency does not
    // apply to passes every request through, key or not.
    if idempotency
        && let Some(matched) = &matcher.methods
        && !matched.is_empty()
        && !matched.iter().any(|method| policy.methods.contains(method))
    {
        ctx.warn(
            file.matcher.as_ref().map(Spanned::span),
            format!("{prefix}.match.methods"),
            format!(
                "none of {} is in methods ({}): every request on this route passes through \
                 without idempotency",
                describe::method_list(matched),
                describe::method_list(&policy.methods)
            ),
        );
    }
    RouteConfig {
        name,
        upstream,
        matcher,
        idempotency,
        preserve_host: file.preserve_host.unwrap_or(true),
        policy,
        webhook,
    }
}

fn required(
    ctx: &mut Ctx<'_>,
    route: &Spanned<RouteFile>,
    value: Option<&Spanned<String>>,
    prefix: &str,
    name: &str,
    check: impl FnOnce(&str) -> Result<String, String>,
) -> String {
    let field = format!("{prefix}.{name}");
    match value {
        Some(value) => ctx.value(Some(value), &field, String::new(), |v| check(v)),
        None => {
            ctx.error(Some(route.span()), field, format!("{name} is required"));
            String::new()
        }
    }
}

fn unknown_upstream(name: &str, upstreams: &BTreeMap<String, UpstreamConfig>) -> String {
    if upstreams.is_empty() {
        return format!(
            "unknown upstream {}: no [upstreams.NAME] is defined",
            quoted(name)
        );
    }
    // Each as a field's path shows a table key: shortened, escaped.
    let known: Vec<String> = upstreams
        .keys()
        .map(|known| field_path(known).to_string())
        .collect();
    format!(
        "unknown upstream {} (defined: {})",
        quoted(name),
        known.join(", ")
    )
}

fn route_match(
    ctx: &mut Ctx<'_>,
    matcher: &Spanned<MatchFile>,
    prefix: &str,
    max_header_bytes: u64,
) -> RouteMatch {
    let file = matcher.get_ref();
    let field = |name: &str| format!("{prefix}.match.{name}");
    let path = file.path.as_ref().and_then(|p| {
        ctx.value(Some(p), &field("path"), None, |p| {
            carried(p, max_header_bytes)?;
            names::match_path(p, true).map(Some)
        })
    });
    let path_prefix = file.path_prefix.as_ref().and_then(|p| {
        ctx.value(Some(p), &field("path_prefix"), None, |p| {
            carried(p, max_header_bytes)?;
            names::match_path(p, false).map(Some)
        })
    });
    if file.path.is_some() == file.path_prefix.is_some() {
        ctx.error(
            Some(matcher.span()),
            format!("{prefix}.match"),
            "give exactly one of path or path_prefix",
        );
    }
    let methods = file.methods.as_ref().map(|methods| {
        if methods.get_ref().is_empty() {
            ctx.error(
                Some(methods.span()),
                field("methods"),
                "empty: the route would match nothing; omit methods to match any",
            );
        }
        let mut parsed = Vec::new();
        for (i, method) in methods.get_ref().iter().enumerate() {
            match names::method(method.get_ref()) {
                Ok(m) if !parsed.contains(&m) => parsed.push(m),
                // A warning, not an error: files that worked before this
                // check must still start (the repeat was always dropped).
                Ok(_) => ctx.warn(
                    Some(method.span()),
                    format!("{}[{i}]", field("methods")),
                    format!(
                        "{} is listed twice (the repeat is ignored)",
                        quoted(method.get_ref())
                    ),
                ),
                Err(message) => ctx.error(
                    Some(method.span()),
                    format!("{}[{i}]", field("methods")),
                    message,
                ),
            }
        }
        parsed
    });
    RouteMatch {
        path,
        path_prefix,
        methods,
    }
}

/// A request whose path is longer than `max_header_bytes` is refused 431
/// before any route is looked for (its target alone is past the limit):
/// a route of such a path, or prefix, could never match. Dot segments are
/// resolved before matching, which only shortens a path.
fn carried(path: &str, max_header_bytes: u64) -> Result<(), String> {
    match u64::try_from(path.len()).is_ok_and(|len| len <= max_header_bytes) {
        true => Ok(()),
        false => Err(format!(
            "the path is {} bytes long, more than server.max_header_bytes \
             ({max_header_bytes} bytes) lets a request head carry: no request could match it",
            path.len()
        )),
    }
}

/// A lease shorter than the upstream's timeout could expire while the first
/// request is still running, letting a retry execute it a second time.
fn lock_outlives_upstream(
    ctx: &mut Ctx<'_>,
    prefix: &str,
    route: &Spanned<RouteFile>,
    policy: &Policy,
    inherited: &Inherited<'_>,
    upstream: &UpstreamConfig,
) {
    if policy.lock_timeout > upstream.timeout {
        return;
    }
    let (span, field, origin) = match (
        &route.get_ref().lock_timeout,
        &inherited.defaults_file.lock_timeout,
    ) {
        (Some(own), _) => (own.span(), format!("{prefix}.lock_timeout"), String::new()),
        (None, Some(default)) => (
            default.span(),
            "defaults.lock_timeout".to_owned(),
            format!(" (inherited by {prefix})"),
        ),
        (None, None) => (
            route.span(),
            format!("{prefix}.lock_timeout"),
            " (built-in default)".to_owned(),
        ),
    };
    ctx.error(
        Some(span),
        field,
        format!(
            "lock_timeout {}{origin} must be longer than the timeout {} of upstream {}",
            format_duration(policy.lock_timeout),
            format_duration(upstream.timeout),
            quoted(&upstream.name),
        ),
    );
}
