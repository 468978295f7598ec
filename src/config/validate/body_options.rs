//! `fingerprint_body`, `canonical_json` and `canonical_form` change only how
//! the body is fingerprinted: where `fingerprint` leaves out "body" they do
//! nothing. A working config may hold them (the body taken out of the
//! fingerprint for a while), so this is a warning, made only for values the
//! operator wrote, never for the built-in ones.

use std::ops::Range;

use toml::Spanned;

use super::context::Ctx;
use crate::config::file::{FileConfig, PolicyFile};
use crate::config::{FingerprintPart, RouteConfig};

/// Each body option written in `file`, by name, with where it is written.
fn written(file: &PolicyFile) -> [(&'static str, Option<Range<usize>>); 3] {
    [
        (
            "fingerprint_body",
            file.fingerprint_body.as_ref().map(Spanned::span),
        ),
        (
            "canonical_json",
            file.canonical_json.as_ref().map(Spanned::span),
        ),
        (
            "canonical_form",
            file.canonical_form.as_ref().map(Spanned::span),
        ),
    ]
}

fn uses_body(route: &RouteConfig) -> bool {
    route.policy.fingerprint.contains(&FingerprintPart::Body)
}

pub fn warn_without_body(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    routes: &[(RouteConfig, Range<usize>)],
) {
    // A pass-through route's policy fields are warned about as ignored.
    let keyed = |route: &RouteConfig| route.idempotency;
    let written_on_routes: Vec<PolicyFile> = (file.routes.iter())
        .flat_map(|r| r.get_ref().iter())
        .map(|route| route.get_ref().policy())
        .collect();
    for (name, span) in written(&file.defaults) {
        let Some(span) = span else { continue };
        let mut inheritors = routes
            .iter()
            .zip(&written_on_routes)
            .filter(|((route, _), own)| keyed(route) && !sets(own, name))
            .map(|((route, _), _)| route)
            .peekable();
        if inheritors.peek().is_some() && !inheritors.any(uses_body) {
            ctx.warn(
                Some(span),
                format!("defaults.{name}"),
                "has no effect: no route that inherits it has \"body\" in its fingerprint",
            );
        }
    }
    for (i, ((route, _), own)) in routes.iter().zip(&written_on_routes).enumerate() {
        if !keyed(route) || uses_body(route) {
            continue;
        }
        let parts: Vec<String> = route
            .policy
            .fingerprint
            .iter()
            .map(ToString::to_string)
            .collect();
        for (name, span) in written(own) {
            let Some(span) = span else { continue };
            ctx.warn(
                Some(span),
                format!("routes[{i}].{name}"),
                format!(
                    "has no effect: this route's fingerprint ({}) leaves out \"body\"",
                    parts.join(", ")
                ),
            );
        }
    }
}

/// Whether `file` writes the body option `name` itself.
fn sets(file: &PolicyFile, name: &str) -> bool {
    written(file)
        .iter()
        .any(|(written, span)| *written == name && span.is_some())
}
