//! Routes match in file order, first match wins: a route whose every request an
//! earlier route already takes can never match; a webhook route that leaves
//! some methods on its path to a later route lets them in unverified. Found
//! here, reported as warnings.

use std::ops::Range;

use super::context::Ctx;
use super::covering::Covering;
use crate::config::describe::method_list;
use crate::config::file::FileConfig;
use crate::config::{RouteConfig, RouteMatch, quoted};

pub fn warn_shadowed(ctx: &mut Ctx<'_>, routes: &[(RouteConfig, Range<usize>)]) {
    let index = Covering::new(routes.iter().map(|(route, _)| &route.matcher));
    for (later, (route, span)) in routes.iter().enumerate() {
        // The first earlier route that covers it, as the matcher would reach it.
        let shadow = (index.of(&route.matcher))
            .filter_map(|candidates| {
                (candidates.iter().take_while(|&&earlier| earlier < later))
                    .find(|&&earlier| covers(&routes[earlier].0.matcher, &route.matcher))
            })
            .min();
        if let Some(&earlier) = shadow {
            let by = &routes[earlier].0;
            ctx.warn(
                Some(span.clone()),
                format!("routes[{later}]"),
                format!(
                    "route {} is shadowed by route {} (routes[{earlier}]) and will never match",
                    quoted(&route.name),
                    quoted(&by.name)
                ),
            );
        }
    }
}

/// A webhook route verifies every method it matches, but `match.methods`
/// narrows what it matches: a request with another method on its path goes
/// on to the next route that takes it, where no signature is checked, and a
/// consumer that serves the path for any method runs a forged delivery.
pub fn warn_unverified_methods(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    routes: &[(RouteConfig, Range<usize>)],
) {
    let index = Covering::new(routes.iter().map(|(route, _)| &route.matcher));
    for (i, (route, _)) in routes.iter().enumerate() {
        if route.webhook.is_some() {
            warn_taken_before(ctx, file, routes, &index, i);
        }
    }
    for (i, (route, span)) in routes.iter().enumerate() {
        let (Some(webhook), Some(matched)) = (&route.webhook, &route.matcher.methods) else {
            continue;
        };
        let any_method = RouteMatch {
            methods: None,
            ..route.matcher.clone()
        };
        let mut taker = None;
        for (offset, (later, _)) in routes[i + 1..].iter().enumerate() {
            let takes_some = paths_overlap(&route.matcher, &later.matcher)
                && (later.matcher.methods.as_ref())
                    .is_none_or(|methods| methods.iter().any(|m| !matched.contains(m)));
            if !takes_some {
                continue;
            }
            if later.webhook.is_none() {
                taker = Some((offset, later));
                break;
            }
            // A webhook route that takes all of them verifies them.
            if covers(&later.matcher, &any_method) {
                break;
            }
        }
        let Some((offset, later)) = taker else {
            continue;
        };
        ctx.warn(
            methods_span(file, i).or_else(|| Some(span.clone())),
            format!("routes[{i}].match.methods"),
            format!(
                "this {} webhook route matches only {} on its path; a request with another \
                 method there goes to route {} (routes[{}]) without its signature checked. \
                 Without match.methods every method is verified (methods still decides \
                 which are deduplicated)",
                webhook.scheme.as_str(),
                method_list(matched),
                quoted(&later.name),
                i + 1 + offset,
            ),
        );
    }
}

/// The same hole the other way round: an earlier route that takes every path
/// of webhook route `i` for some methods forwards those unverified.
fn warn_taken_before(
    ctx: &mut Ctx<'_>,
    file: &FileConfig,
    routes: &[(RouteConfig, Range<usize>)],
    index: &Covering,
    i: usize,
) {
    let (webhook_route, _) = &routes[i];
    let any_method = |matcher: &RouteMatch| RouteMatch {
        methods: None,
        ..matcher.clone()
    };
    // Only a route whose path takes every path of the webhook route's can
    // take some of its requests before it.
    let mut before: Vec<usize> = (index.of(&webhook_route.matcher))
        .flat_map(|candidates| candidates.iter().copied().take_while(|&j| j < i))
        .collect();
    before.sort_unstable();
    for j in before {
        let (earlier, span) = &routes[j];
        let Some(taken) = &earlier.matcher.methods else {
            continue;
        };
        let takes_some = (webhook_route.matcher.methods.as_ref())
            .is_none_or(|wanted| wanted.iter().any(|m| taken.contains(m)));
        if earlier.webhook.is_some()
            || !takes_some
            // Every request of the webhook route: said as shadowing.
            || covers(&earlier.matcher, &webhook_route.matcher)
            || !covers(&any_method(&earlier.matcher), &any_method(&webhook_route.matcher))
        {
            continue;
        }
        ctx.warn(
            methods_span(file, j).or_else(|| Some(span.clone())),
            format!("routes[{j}].match.methods"),
            format!(
                "this route takes {} on the path of webhook route {} (routes[{i}]) before \
                 it: those requests are forwarded without their signature checked",
                method_list(taken),
                quoted(&webhook_route.name),
            ),
        );
    }
}

/// Where route `i` writes its `match.methods`.
fn methods_span(file: &FileConfig, i: usize) -> Option<Range<usize>> {
    (file.routes.as_ref())
        .and_then(|routes| routes.get_ref().get(i))
        .and_then(|written| written.get_ref().matcher.as_ref())
        .and_then(|matcher| matcher.get_ref().methods.as_ref())
        .map(toml::Spanned::span)
}

/// Whether some path is matched by both (methods aside).
fn paths_overlap(a: &RouteMatch, b: &RouteMatch) -> bool {
    match (
        (a.path.as_deref(), a.path_prefix.as_deref()),
        (b.path.as_deref(), b.path_prefix.as_deref()),
    ) {
        ((Some(a), _), (Some(b), _)) => a == b,
        ((Some(path), _), (None, Some(prefix))) | ((None, Some(prefix)), (Some(path), _)) => {
            path.starts_with(prefix)
        }
        ((None, Some(a)), (None, Some(b))) => a.starts_with(b) || b.starts_with(a),
        _ => false,
    }
}

/// Whether every request `later` matches is matched by `earlier`. Prefixes are
/// plain string prefixes, as the matcher applies them.
pub fn covers(earlier: &RouteMatch, later: &RouteMatch) -> bool {
    let later_path = later.path.as_deref().or(later.path_prefix.as_deref());
    let paths = match (&earlier.path, &earlier.path_prefix, later_path) {
        (Some(exact), None, Some(_)) => later.path.as_ref() == Some(exact),
        (None, Some(prefix), Some(path)) => path.starts_with(prefix.as_str()),
        _ => false,
    };
    let methods = match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(taken), Some(wanted)) => wanted.iter().all(|m| taken.contains(m)),
    };
    paths && methods
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(p: &str, methods: Option<&[&str]>) -> RouteMatch {
        RouteMatch {
            path: None,
            path_prefix: Some(p.into()),
            methods: methods.map(|m| m.iter().map(|s| s.parse().unwrap()).collect()),
        }
    }

    fn exact(p: &str) -> RouteMatch {
        RouteMatch {
            path: Some(p.into()),
            ..RouteMatch::default()
        }
    }

    #[test]
    fn shorter_prefix_covers_longer() {
        assert!(covers(&prefix("/", None), &prefix("/v1", None)));
        assert!(covers(&prefix("/v1", None), &exact("/v1/charges")));
        assert!(!covers(&prefix("/v1/charges", None), &prefix("/v1", None)));
        assert!(!covers(&exact("/v1"), &prefix("/v1", None)));
        assert!(covers(&exact("/v1"), &exact("/v1")));
    }

    #[test]
    fn paths_overlap_where_one_request_can_match_both() {
        assert!(paths_overlap(&exact("/w"), &prefix("/", None)));
        assert!(paths_overlap(&prefix("/", None), &exact("/w")));
        assert!(paths_overlap(&prefix("/w/a", None), &prefix("/w", None)));
        assert!(paths_overlap(&prefix("/w", None), &prefix("/w/a", None)));
        assert!(paths_overlap(&exact("/w"), &exact("/w")));
        assert!(!paths_overlap(&exact("/w"), &exact("/w/")));
        assert!(!paths_overlap(&exact("/w"), &prefix("/x", None)));
        assert!(!paths_overlap(&prefix("/w", None), &prefix("/x", None)));
    }

    #[test]
    fn methods_must_be_a_superset() {
        assert!(covers(
            &prefix("/", Some(&["POST", "PUT"])),
            &prefix("/a", Some(&["POST"]))
        ));
        assert!(!covers(&prefix("/", Some(&["POST"])), &prefix("/a", None)));
        assert!(!covers(
            &prefix("/", Some(&["POST"])),
            &prefix("/a", Some(&["PUT"]))
        ));
        assert!(covers(&prefix("/", None), &prefix("/a", Some(&["PUT"]))));
    }
}
