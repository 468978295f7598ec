//! Settings a running process cannot change: a reload reports them, rather
//! than ignore them silently.

use crate::config::{Config, StoreConfig, StoreKey};

/// What changed from `current` (the file the process started with) to `new`
/// that only a restart applies.
pub fn changes(current: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    let mut note = |changed: bool, field: &str| {
        if changed {
            notes.push(format!(
                "{field} changed in the file; it takes effect only after a restart"
            ));
        }
    };
    note(current.server.listen != new.server.listen, "server.listen");
    note(
        current.server.admin_listen != new.server.admin_listen,
        "server.admin_listen",
    );
    note(
        current.server.tls.is_some() != new.server.tls.is_some(),
        "server.tls (turning TLS on or off)",
    );
    // The head limits too: the HTTP/1 parser of every connection is sized by
    // the values the listener started with (a lower value still applies, as
    // the gateway checks each head again; a higher one does not).
    note(
        current.server.max_connections != new.server.max_connections
            || current.server.header_read_timeout != new.server.header_read_timeout
            || current.server.body_read_timeout != new.server.body_read_timeout
            || current.server.shutdown_grace != new.server.shutdown_grace
            || current.server.max_header_bytes != new.server.max_header_bytes
            || current.server.max_headers != new.server.max_headers,
        "server connection limits",
    );
    note(
        current.server.max_buffered_bodies != new.server.max_buffered_bodies,
        "server.max_buffered_bodies",
    );
    let (keys_now, keys_new) = (store_keys(&current.store), store_keys(&new.store));
    // Said apart: an operator rotating keys must know that answers are still
    // sealed with the key the process started with (docs/data-protection.md).
    note(
        keys_now != keys_new,
        "store.encryption (the keys answers are sealed and opened with)",
    );
    note(
        without_keys(&current.store) != without_keys(&new.store),
        "store",
    );
    note(
        current.admin.tls.is_some() != new.admin.tls.is_some(),
        "admin.tls (turning TLS on or off)",
    );
    notes
}

fn store_keys(store: &StoreConfig) -> &[StoreKey] {
    match store {
        StoreConfig::Embedded(embedded) => &embedded.encryption,
        StoreConfig::Postgres(pg) => &pg.encryption,
    }
}

/// The store's settings but its keys, which are noted on their own.
fn without_keys(store: &StoreConfig) -> StoreConfig {
    let mut store = store.clone();
    match &mut store {
        StoreConfig::Embedded(embedded) => embedded.encryption.clear(),
        StoreConfig::Postgres(pg) => pg.encryption.clear(),
    }
    store
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::changes;

    const BASE: &str = crate::config::ONE_ROUTE;

    fn config(extra: &str) -> crate::config::Config {
        let env = |name: &str| match name {
            "K1" => Some("QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=".to_owned()),
            "K2" => Some("QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=".to_owned()),
            "TOKEN" => Some("0123456789abcdef0123".to_owned()),
            _ => None,
        };
        let text = format!("{extra}{BASE}");
        crate::config::parse(&text, Path::new("t.toml"), &env).expect("valid")
    }

    #[test]
    fn new_encryption_keys_are_said_to_need_a_restart_by_name() {
        let one = config("[store.encryption]\nkeys_env = [\"K1\"]\n");
        let two = config("[store.encryption]\nkeys_env = [\"K2\", \"K1\"]\n");
        let notes = changes(&one, &two);
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(notes[0].starts_with("store.encryption"), "{}", notes[0]);
        assert!(notes[0].contains("only after a restart"), "{}", notes[0]);

        let moved =
            config("[store]\npath = \"elsewhere.db\"\n[store.encryption]\nkeys_env = [\"K1\"]\n");
        let notes = changes(&one, &moved);
        assert_eq!(notes.len(), 1, "{notes:#?}");
        assert!(notes[0].starts_with("store changed"), "{}", notes[0]);
        assert!(changes(&one, &one).is_empty());
    }
}
