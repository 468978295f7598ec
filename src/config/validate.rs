//! File model → resolved [`Config`]: defaults, inheritance and every semantic
//! rule. toml stops at its first syntax or type error; past that point every
//! semantic error is collected, located and reported together.

mod admin;
mod body_options;
mod context;
mod covering;
mod encryption;
mod env_list;
mod ip_literal;
mod keys;
mod listeners;
mod names;
mod policy;
mod regions;
mod routes;
mod server;
mod shadow;
mod spelling;
mod store;
mod syntax;
mod toml_quoted;
mod upstreams;
mod webhook;

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod large_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use std::path::Path;

use super::file::{FileConfig, PolicyFile};
use super::{Config, ConfigErrors, RouteConfig};
pub use context::Secrets;
use context::{Ctx, Env};
pub use names::NAME_MAX_BYTES;

pub fn parse(
    text: &str,
    source: &Path,
    env: Env<'_>,
    secrets: Secrets,
) -> Result<Config, ConfigErrors> {
    let mut ctx = Ctx::new(source, text, env, secrets);
    let file: FileConfig = toml::from_str(text)
        .map_err(|err| ConfigErrors::single(syntax::toml_error(&ctx, text, &err)))?;

    let server = server::server(&mut ctx, &file.server);
    let admin = admin::admin(&mut ctx, &file.admin);
    let store = store::store(&mut ctx, &file.store);
    let upstreams = upstreams::upstreams(&mut ctx, &file.upstreams);
    let defaults = policy::resolve(&mut ctx, &policy::builtin(), &file.defaults, "defaults");
    let inherited = routes::Inherited {
        defaults: &defaults,
        defaults_file: &file.defaults,
        upstreams: &upstreams,
        max_header_bytes: server.max_header_bytes,
    };
    let routes = routes::routes(&mut ctx, file.routes.as_ref(), &inherited);

    let has_client_ca = server
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_ca.is_some());
    client_cert_needs_ca(&mut ctx, &file, has_client_ca);
    shadow::warn_shadowed(&mut ctx, &routes);
    body_options::warn_without_body(&mut ctx, &file, &routes);
    shadow::warn_unverified_methods(&mut ctx, &file, &routes);
    warn_unused_upstreams(&mut ctx, &file, &routes);
    warn_grace_shorter_than_upstreams(&mut ctx, &file, &server, &upstreams, &routes);
    let region = regions::regions(&mut ctx, &file);
    regions::reads_what_crosses_regions(&mut ctx, &file, region.as_ref(), &routes);
    regions::needs_no_client_ca(&mut ctx, &file, region.as_ref());
    regions::warn_forward_shorter_than_upstreams(
        &mut ctx,
        &file,
        region.as_ref(),
        &upstreams,
        &routes,
    );

    if !ctx.errors.is_empty() {
        // In file order, as an operator fixes them; unlocated ones first.
        ctx.errors.sort_by_key(|e| (e.line, e.column));
        return Err(ConfigErrors(ctx.errors));
    }
    Ok(Config {
        source: source.to_path_buf(),
        server,
        admin,
        store,
        upstreams,
        routes: routes.into_iter().map(|(route, _)| route).collect(),
        warnings: ctx.warnings,
        region,
        places: ctx.places,
    })
}

/// `client_cert` scopes by the verified client certificate, which exists only
/// when the server asks for one.
fn client_cert_needs_ca(ctx: &mut Ctx<'_>, file: &FileConfig, has_client_ca: bool) {
    if has_client_ca {
        return;
    }
    let mut check = |policy: &PolicyFile, prefix: &str| {
        let Some(scope) = &policy.scope else { return };
        for (i, part) in scope.get_ref().iter().enumerate() {
            if part.get_ref() == "client_cert" {
                ctx.error(
                    Some(part.span()),
                    format!("{prefix}.scope[{i}]"),
                    "\"client_cert\" needs server.tls.client_ca (clients must present a certificate)",
                );
            }
        }
    };
    check(&file.defaults, "defaults");
    for (i, route) in file
        .routes
        .iter()
        .flat_map(|r| r.get_ref().iter())
        .enumerate()
    {
        check(&route.get_ref().policy(), &format!("routes[{i}]"));
    }
}

/// At SIGTERM a keyed request still running when `shutdown_grace` ends is cut
/// off and recorded as 504 outcome-unknown, which someone then reconciles. A
/// grace at least as long as every idempotent route's upstream `timeout` lets
/// each one finish or time out on its own.
fn warn_grace_shorter_than_upstreams(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    server: &super::ServerConfig,
    upstreams: &std::collections::BTreeMap<String, super::UpstreamConfig>,
    routes: &[(RouteConfig, std::ops::Range<usize>)],
) {
    let slowest = routes
        .iter()
        .filter(|(route, _)| route.idempotency)
        .filter_map(|(route, _)| upstreams.get(&route.upstream))
        .max_by_key(|upstream| upstream.timeout);
    let Some(slowest) = slowest.filter(|u| u.timeout > server.shutdown_grace) else {
        return;
    };
    ctx.warn(
        file.server.shutdown_grace.as_ref().map(toml::Spanned::span),
        "server.shutdown_grace",
        format!(
            "{} is shorter than the timeout {} of upstream {}: a keyed request still \
             running at SIGTERM can be cut off, answered and recorded as a 504 \
             outcome-unknown that its retries get too, until the key is purged",
            super::units::format_duration(server.shutdown_grace),
            super::units::format_duration(slowest.timeout),
            super::quoted(&slowest.name),
        ),
    );
}

fn warn_unused_upstreams(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    routes: &[(RouteConfig, std::ops::Range<usize>)],
) {
    for (name, upstream) in &file.upstreams {
        if !routes.iter().any(|(route, _)| &route.upstream == name) {
            ctx.warn(
                Some(upstream.span()),
                format!("upstreams.{name}"),
                "not used by any route",
            );
        }
    }
}
