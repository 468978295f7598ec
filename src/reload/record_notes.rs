//! What a reload means for the records stored before it: a route dropped,
//! a route's scope, fingerprint or key options changed, the regions changed.
//! The new file applies to new requests at once; these notes say what
//! older keys then meet. Applied, but said.

use std::collections::HashMap;

use crate::config::{Config, Policy, RouteConfig};

/// Every note of the change from `current` to `new`.
pub fn notes(current: &Config, new: &Config) -> Vec<String> {
    let mut notes = dropped_routes(current, new);
    notes.extend(changed_identities(current, new));
    notes.extend(moved_homes(current, new));
    notes
}

/// Records are kept per route name: an idempotent route that is renamed,
/// removed or made a pass-through leaves its answers and leases behind, and a
/// retry of one of its keys runs again. Applied, but said.
fn dropped_routes(current: &Config, new: &Config) -> Vec<String> {
    let kept = idempotent_routes(new);
    current
        .routes
        .iter()
        .filter(|route| route.idempotency)
        .filter(|route| !kept.contains_key(route.name.as_str()))
        .map(|route| {
            format!(
                "route {:?} is no longer an idempotent route: the answers and leases stored \
                 under it no longer apply, so a retry of one of its keys runs again",
                route.name
            )
        })
        .collect()
}

/// The idempotent routes of a config by name: a reload of thousands of
/// routes looks each one up, rather than scanning the other file for it.
fn idempotent_routes(config: &Config) -> HashMap<&str, &RouteConfig> {
    (config.routes.iter())
        .filter(|route| route.idempotency)
        .map(|route| (route.name.as_str(), route))
        .collect()
}

/// A record is found by its scope and matched by its fingerprint, both
/// computed under the policy of the moment: changing how they are made
/// orphans or refuses what was stored before. Applied, but said.
fn changed_identities(current: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    let kept_routes = idempotent_routes(new);
    for route in current.routes.iter().filter(|route| route.idempotency) {
        let Some(kept) = kept_routes.get(route.name.as_str()) else {
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
        notes.extend(key_notes(&route.name, old, now));
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

/// A route's key and body options, changed.
fn key_notes(route: &str, old: &Policy, now: &Policy) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |changed: bool, text: &str| {
        if changed {
            notes.push(format!("route {route:?}: {text}"));
        }
    };
    note(
        old.key != now.key,
        "key source changed: a retry finds its record only if the new source yields the \
         same key (a derived key differs from the key a client sent)",
    );
    note(
        old.key_pattern != now.key_pattern,
        "key_pattern changed: keys of the old form are now refused with 400 invalid-key, \
         their stored answers no longer reached",
    );
    note(
        old.fingerprint_body != now.fingerprint_body || old.canonical_form != now.canonical_form,
        "fingerprint_body or canonical_form changed: retries of keys stored before compare \
         differently and get 422 fingerprint-mismatch",
    );
    note(
        old.replay_headers != now.replay_headers,
        "replay_headers changed: replays of older answers keep only the headers both lists \
         allow (a header not stored before cannot come back)",
    );
    note(
        old.replay_header != now.replay_header || old.replay_values != now.replay_values,
        "replay marker changed: every answer, of older records too, carries the new one",
    );
    notes
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::moved_homes;

    fn regions(names: &[&str]) -> crate::config::Config {
        let mut text = format!("[region]\nname = \"{}\"\ntoken_env = \"TOKEN\"\n", names[0]);
        for (i, name) in names.iter().enumerate() {
            text += &format!("[regions.{name}]\ngateway = \"http://10.0.0.{i}:8080\"\n");
        }
        let text = format!("{text}{}", crate::config::ONE_ROUTE);
        let env = |name: &str| (name == "TOKEN").then(|| "0123456789abcdef0123".to_owned());
        crate::config::parse(&text, Path::new("t.toml"), &env).expect("valid")
    }

    #[test]
    fn a_change_of_regions_is_said_to_move_keys() {
        let none = crate::config::parse(crate::config::ONE_ROUTE, Path::new("t.toml"), &|_| None)
            .expect("valid");
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
