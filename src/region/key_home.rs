//! Where a key's records are kept, told to an operator who asked a region
//! for them (`GET`/`DELETE /admin/keys/{route}/{key}`, `idemgate keys`):
//! each region answers from its own store only, so a 404 says where to ask.

use std::sync::Arc;

use crate::config::{Config, RegionsConfig, ScopePart};
pub use crate::error::whereabouts::{KeyHome, Whereabouts};

use super::home::home;

/// `scope`: the route's scope parts as configured, `None` when the config
/// has no route of that name. The home as the gateway computes it for a
/// request (`Regions::home_elsewhere`): an empty scope hashes to one value
/// for every request.
pub fn key_home(
    region: &RegionsConfig,
    scope: Option<&[ScopePart]>,
    route: &str,
    key: &str,
) -> Whereabouts {
    let this: Arc<str> = Arc::from(region.name.as_str());
    let home = match scope {
        None => KeyHome::UnknownRoute,
        Some(parts) if !parts.is_empty() => KeyHome::PerScope,
        Some(_) => {
            let names: Vec<&str> = region.peers.keys().map(String::as_str).collect();
            let scope = crate::key::scope_hash::<&[u8]>(&[]);
            // Validation puts this region among the peers: never empty.
            home(&names, route, &scope, key).map_or_else(
                || KeyHome::Region(this.clone()),
                |at| KeyHome::Region(Arc::from(names[at])),
            )
        }
    };
    Whereabouts { this, home }
}

/// [`key_home`] for a running config; `None` without `[region]`.
pub fn key_home_in(config: &Config, route: &str, key: &str) -> Option<Whereabouts> {
    let region = config.region.as_ref()?;
    let scope = (config.routes.iter())
        .find(|candidate| candidate.name == route)
        .map(|found| found.policy.scope.as_slice());
    Some(key_home(region, scope, route, key))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::region::Regions;
    use crate::store::RecordId;

    fn config(scope: &str) -> Config {
        let env = |name: &str| (name == "TOKEN").then(|| "0123456789abcdef0123".to_owned());
        let text = format!(
            "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n\
             [[routes]]\nname = \"charges\"\nupstream = \"api\"\n\
             match = {{ path_prefix = \"/\" }}\nscope = {scope}\n\
             [region]\nname = \"eu\"\ntoken_env = \"TOKEN\"\n\
             [regions.eu]\ngateway = \"http://10.0.0.1:8080\"\n\
             [regions.us]\ngateway = \"http://10.0.0.2:8080\"\n\
             [regions.ap]\ngateway = \"http://10.0.0.3:8080\"\n"
        );
        crate::config::parse(&text, Path::new("t.toml"), &env).expect("valid")
    }

    #[test]
    fn an_unscoped_route_s_home_is_the_one_requests_are_sent_to() {
        let config = config("[]");
        let regions = Regions::new(&config, None).unwrap().unwrap();
        let scope = crate::key::scope_hash::<&[u8]>(&[]);
        for i in 0..200 {
            let key = format!("k{i}");
            let id = RecordId::new("charges", scope.clone(), key.as_str());
            let sent_to = regions
                .home_elsewhere(&id)
                .map_or_else(|| regions.this().clone(), |home| home.name.clone());
            let told = key_home_in(&config, "charges", &key).unwrap();
            assert_eq!(told.this.as_ref(), "eu");
            assert_eq!(told.home, KeyHome::Region(sent_to), "{key}");
        }
    }

    #[test]
    fn a_scoped_or_unknown_route_has_no_home_from_the_key_alone() {
        let config = config("[\"header:Authorization\"]");
        let told = key_home_in(&config, "charges", "k1").unwrap();
        assert_eq!(told.home, KeyHome::PerScope);
        let told = key_home_in(&config, "renamed", "k1").unwrap();
        assert_eq!(told.home, KeyHome::UnknownRoute);
    }

    #[test]
    fn without_regions_nothing_is_told() {
        let env = |_: &str| None;
        let config =
            crate::config::parse(crate::config::ONE_ROUTE, Path::new("t.toml"), &env).unwrap();
        assert_eq!(key_home_in(&config, "all", "k1"), None);
    }
}
