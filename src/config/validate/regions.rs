//! `[region]` and `[regions.NAME]`: this gateway's region among the others.

use std::collections::BTreeMap;

use toml::Spanned;

use super::context::{Ctx, Secrets};
use super::server::{MIN_TOKEN_CHARS, env_name};
use super::{names, upstreams};
use crate::config::file::{FileConfig, RegionFile, RegionPeerFile};
use crate::config::{RegionPeerConfig, RegionsConfig};
use crate::config::{field_path, quoted};

/// `None` without `[region]`: one region, nothing forwarded. Every
/// problem is collected; the value returned then is not used.
pub fn regions(ctx: &mut Ctx<'_>, file: &FileConfig) -> Option<RegionsConfig> {
    let Some(region) = &file.region else {
        if let Some((name, peer)) = file.regions.iter().next() {
            ctx.error(
                Some(peer.span()),
                format!("regions.{name}"),
                "[regions] needs [region] (this gateway's name and token_env)",
            );
        }
        return None;
    };
    let peers: BTreeMap<String, RegionPeerConfig> = file
        .regions
        .iter()
        .map(|(name, peer)| (name.clone(), self::peer(ctx, name, peer)))
        .collect();
    shared_gateways(ctx, file, &peers);
    let name = this_name(ctx, region, &peers);
    let (token_env, token) = token(ctx, region);
    Some(RegionsConfig {
        name,
        token_env,
        token,
        peers,
    })
}

fn this_name(
    ctx: &mut Ctx<'_>,
    region: &Spanned<RegionFile>,
    peers: &BTreeMap<String, RegionPeerConfig>,
) -> String {
    let Some(name) = &region.get_ref().name else {
        ctx.error(
            Some(region.span()),
            "region.name",
            "name is required (this gateway's region, one of [regions])",
        );
        return String::new();
    };
    if peers.is_empty() {
        ctx.error(
            Some(name.span()),
            "region.name",
            "no [regions.NAME] is configured: list every region, this one included",
        );
    } else if !peers.contains_key(name.get_ref()) {
        let known: Vec<&str> = peers.keys().map(String::as_str).collect();
        ctx.error(
            Some(name.span()),
            "region.name",
            format!(
                "{} is not one of the regions ({}): list this region under [regions] too",
                quoted(name.get_ref()),
                known.join(", ")
            ),
        );
    }
    name.get_ref().clone()
}

/// The token is required: a gateway that cannot present it cannot forward,
/// and one that cannot check it would take a client's forged headers for a
/// region's. Its value is never quoted back.
fn token(ctx: &mut Ctx<'_>, region: &Spanned<RegionFile>) -> (String, String) {
    let Some(token_env) = &region.get_ref().token_env else {
        ctx.error(
            Some(region.span()),
            "region.token_env",
            "token_env is required: the variable holding the secret the regions' gateways share",
        );
        return (String::new(), String::new());
    };
    let variable = match env_name(token_env.get_ref()) {
        Ok(variable) => variable,
        Err(message) => {
            ctx.error(Some(token_env.span()), "region.token_env", message);
            return (String::new(), String::new());
        }
    };
    if ctx.secrets == Secrets::Skip {
        return (variable, String::new());
    }
    // Trimmed as the admin token is: a secret written from a file often ends
    // in a newline, which no header can carry.
    let token = (ctx.env)(&variable)
        .map(|token| token.trim().to_owned())
        .unwrap_or_default();
    let length = token.chars().count();
    if token.is_empty() && super::context::not_unicode(&variable) {
        ctx.error(
            Some(token_env.span()),
            "region.token_env",
            format!("the variable {variable} is not valid UTF-8"),
        );
    } else if token.is_empty() {
        ctx.error(
            Some(token_env.span()),
            "region.token_env",
            format!("the variable {variable} is not set or is empty"),
        );
    } else if http::HeaderValue::from_str(&token).is_err() {
        ctx.error(
            Some(token_env.span()),
            "region.token_env",
            format!(
                "the value of {variable} cannot be sent in a header: it holds a control character"
            ),
        );
    } else if length < MIN_TOKEN_CHARS {
        // Not refused, as the admin token is not. But whoever presents it
        // has a key run where it lands, outside its home: twice, across
        // regions. The length, never the token, is quoted.
        ctx.warn(
            Some(token_env.span()),
            "region.token_env",
            format!(
                "the region token is {length} characters long; anyone who guesses it can have a \
                 key run outside its home region: use at least {MIN_TOKEN_CHARS} random characters \
                 (e.g. `openssl rand -hex 32`)"
            ),
        );
    }
    (variable, token)
}

/// Two regions whose `gateway` is one address: a key homed in the second
/// would be forwarded to the first's gateways, which take the region token
/// as proof they are its home and run it there (docs/multi-region.md).
fn shared_gateways(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    peers: &BTreeMap<String, RegionPeerConfig>,
) {
    let mut seen: Vec<(&str, (String, String, u16))> = Vec::new();
    for (name, peer) in peers {
        let Some(address) = address(&peer.gateway) else {
            continue;
        };
        if let Some((first, _)) = seen.iter().find(|(_, other)| *other == address) {
            let span = file
                .regions
                .get(name)
                .and_then(|p| p.get_ref().gateway.as_ref());
            ctx.error(
                span.map(Spanned::span),
                format!("regions.{name}.gateway"),
                format!(
                    "{}.gateway has the same address: each region needs its own \
                     gateways, or keys homed in {} run in {}",
                    field_path(&format!("regions.{first}")),
                    field_path(name),
                    field_path(first),
                ),
            );
        } else {
            seen.push((name, address));
        }
    }
}

/// Scheme, host (without case; an IP address in one spelling, an
/// IPv4-mapped IPv6 address as the IPv4 address it dials) and port (the
/// scheme's own if none): what a gateway URL dials.
fn address(url: &str) -> Option<(String, String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?;
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = match literal.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_ascii_lowercase(),
    };
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, host, port))
}

fn peer(ctx: &mut Ctx<'_>, name: &str, peer: &Spanned<RegionPeerFile>) -> RegionPeerConfig {
    let prefix = format!("regions.{name}");
    if let Err(message) = names::name(name) {
        ctx.error(Some(peer.span()), &prefix, message);
    }
    let file = peer.get_ref();
    let gateway = upstreams::required_url(
        ctx,
        peer.span(),
        &format!("{prefix}.gateway"),
        file.gateway.as_ref(),
        "gateway is required (the URL of that region's gateways)",
    );
    if let Some(ca) = &file.ca
        && gateway.starts_with("http://")
    {
        ctx.error(
            Some(ca.span()),
            format!("{prefix}.ca"),
            "only applies to an https:// gateway; this one is http://",
        );
    }
    let (connect_timeout, timeout) = upstreams::timeouts(
        ctx,
        &prefix,
        file.connect_timeout.as_ref(),
        file.timeout.as_ref(),
    );
    RegionPeerConfig {
        name: name.to_owned(),
        gateway,
        connect_timeout,
        timeout,
        ca: ctx.file_path(file.ca.as_ref(), &format!("{prefix}.ca")),
        http2: file.http2.unwrap_or(false),
    }
}

/// A route whose keys are forwarded to their home region must read only
/// what reaches the home as the client sent it. Not the client's
/// certificate: the home sees the forwarding gateway's connection. Nor a
/// field a forward rewrites: the landing region homes the key by the field
/// as the client sent it, the home files it under the field as the hop left
/// it (another scope or key), so a retry that lands at the home itself ran
/// the key again. The fingerprint is computed at the home only: one read
/// from such a field tells a retry that reaches the home without the hop
/// from the request it retries, and refuses it 422.
pub fn reads_what_crosses_regions(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    region: Option<&RegionsConfig>,
    routes: &[(crate::config::RouteConfig, std::ops::Range<usize>)],
) {
    use crate::config::{FingerprintPart, KeySource, ScopePart};
    use crate::key::DerivePart;
    if region.is_none() {
        return;
    }
    let span = file.region.as_ref().map(Spanned::span);
    let idempotent = (routes.iter().enumerate()).filter(|(_, (route, _))| route.idempotency);
    for (i, (route, _)) in idempotent {
        let called = super::routes::called(route, i);
        let policy = &route.policy;
        if policy.scope.contains(&ScopePart::ClientCert) {
            ctx.error(
                span.clone(),
                "region",
                format!(
                    "{called} is scoped by \"client_cert\", which cannot cross regions: \
                     the home region does not see the client's certificate"
                ),
            );
        }
        let scope = policy.scope.iter().filter_map(|part| match part {
            ScopePart::Header(name) => Some(("scope", part.to_string(), name)),
            ScopePart::ClientCert => None,
        });
        let fingerprint = policy.fingerprint.iter().filter_map(|part| match part {
            FingerprintPart::Header(name) => Some(("fingerprint", part.to_string(), name)),
            _ => None,
        });
        let key = policy.key.iter().flat_map(|source| match source {
            KeySource::Header(name) => vec![("key", name.to_string(), name)],
            KeySource::Derive(derive) => derive
                .parts
                .iter()
                .filter_map(|part| match part {
                    DerivePart::Header(name) => Some(("key", format!("header:{name}"), name)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        });
        for (field, part, _) in scope
            .chain(fingerprint)
            .chain(key)
            .filter(|(_, _, name)| rewritten_by_a_forward(name.as_str()))
        {
            let harm = if field == "fingerprint" {
                "the home region would compare a retry that reaches it without this hop with \
                 the field as the hop left it, and refuse it 422 as another request"
                    .to_owned()
            } else {
                format!(
                    "the home region would file the key under another {field} than the one \
                     its home was chosen by, and a retry could run it again"
                )
            };
            ctx.error(
                span.clone(),
                "region",
                format!(
                    "{called} reads {} in its {field}, a field a forward to the home \
                     region rewrites, so it cannot cross regions: {harm}",
                    quoted(&part),
                ),
            );
        }
    }
}

/// Fields a forward does not pass on as the client sent them: the
/// `X-Forwarded-*` it sets (src/proxy/upstream_request.rs), the `Via` entry and
/// the region's name it adds, the framing it redoes (`Content-Length` for
/// a body sent whole), and the hop-by-hop and `Proxy-*` fields it drops
/// (src/proxy/hop_by_hop.rs).
fn rewritten_by_a_forward(name: &str) -> bool {
    matches!(
        name,
        "x-forwarded-for"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "via"
            | "idempotency-forwarded-from"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "expect"
    ) || name.starts_with("proxy-")
}

/// Gateways forward to another region's data-plane listener without a
/// client certificate: one that requires a certificate refuses every
/// forward in the handshake, and every key homed here would be answered
/// `home-region-unavailable` for good.
pub fn needs_no_client_ca(ctx: &mut Ctx<'_>, file: &FileConfig, region: Option<&RegionsConfig>) {
    if region.is_none() {
        return;
    }
    let Some(client_ca) =
        (file.server.tls.as_ref()).and_then(|tls| tls.get_ref().client_ca.as_ref())
    else {
        return;
    };
    ctx.error(
        Some(client_ca.span()),
        "server.tls.client_ca",
        "mutual TLS cannot be used with regions: other regions' gateways forward to this \
         listener without a client certificate, so every forward to this region would be \
         refused (503 home-region-unavailable)",
    );
}

/// A forward that gives up before the home region could answer tells the
/// client `home-region-unavailable` for requests that mostly succeed, and
/// the client's retry then waits on the home's record. The home answers
/// within its upstream's `timeout`, or, for a retry it holds waiting
/// (`on_in_flight = "wait"`), within the route's `wait_timeout`. The home
/// region's routes and upstreams are assumed to be this region's (one
/// config shipped to every region).
pub fn warn_forward_shorter_than_upstreams(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    region: Option<&RegionsConfig>,
    upstreams: &BTreeMap<String, crate::config::UpstreamConfig>,
    routes: &[(crate::config::RouteConfig, std::ops::Range<usize>)],
) {
    let Some(region) = region else { return };
    let Some(slowest) = routes
        .iter()
        .filter(|(route, _)| route.idempotency)
        .flat_map(|(route, _)| slowest_answers(route, upstreams))
        .max_by_key(|answer| answer.within)
    else {
        return;
    };
    for peer in region.peers.values() {
        if peer.name == region.name || peer.timeout > slowest.within {
            continue;
        }
        let span = file
            .regions
            .get(&peer.name)
            .map(|p| p.get_ref().timeout.as_ref().map_or(p.span(), Spanned::span));
        let (what, whose) = match slowest.by {
            AnswerBound::UpstreamTimeout => ("timeout", "upstream"),
            AnswerBound::WaitTimeout => ("wait_timeout", "route"),
        };
        ctx.warn(
            span,
            format!("regions.{}.timeout", peer.name),
            format!(
                "{} is not longer than the {what} {} of {whose} {}: a forwarded request \
                 the home region is still running is answered 503 home-region-unavailable here",
                crate::config::units::format_duration(peer.timeout),
                crate::config::units::format_duration(slowest.within),
                quoted(slowest.name),
            ),
        );
    }
}

/// What bounds how long the home region takes to answer a route's request.
#[derive(Clone, Copy)]
enum AnswerBound {
    UpstreamTimeout,
    WaitTimeout,
}

struct SlowestAnswer<'a> {
    within: std::time::Duration,
    by: AnswerBound,
    /// The upstream's name, or the route's for a wait.
    name: &'a str,
}

fn slowest_answers<'a>(
    route: &'a crate::config::RouteConfig,
    upstreams: &'a BTreeMap<String, crate::config::UpstreamConfig>,
) -> impl Iterator<Item = SlowestAnswer<'a>> {
    let upstream = upstreams
        .get(&route.upstream)
        .map(|upstream| SlowestAnswer {
            within: upstream.timeout,
            by: AnswerBound::UpstreamTimeout,
            name: &upstream.name,
        });
    let wait =
        (route.policy.on_in_flight == crate::config::InFlightMode::Wait).then(|| SlowestAnswer {
            within: route.policy.wait_timeout,
            by: AnswerBound::WaitTimeout,
            name: &route.name,
        });
    upstream.into_iter().chain(wait)
}

#[cfg(test)]
mod tests;
