//! `[store.encryption]`: the keys that seal stored answers, read from the
//! environment. Every message names the field and the variable, never the
//! value: a key quoted into a log or a CI transcript is a key lost.

use base64::Engine;
use base64::alphabet::{self, Alphabet};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use toml::Spanned;

use super::context::{Ctx, Secrets};
use super::server::env_name;
use crate::config::StoreKey;
use crate::config::file::EncryptionFile;

const FIELD: &str = "store.encryption.keys_env";

pub fn encryption(ctx: &mut Ctx<'_>, file: Option<&Spanned<EncryptionFile>>) -> Vec<StoreKey> {
    let Some(table) = file else {
        return Vec::new();
    };
    let Some(list) = &table.get_ref().keys_env else {
        ctx.error(
            Some(table.span()),
            FIELD,
            "list the variables that hold the keys (the first one seals)",
        );
        return Vec::new();
    };
    if list.get_ref().is_empty() {
        ctx.error(
            Some(list.span()),
            FIELD,
            "list at least one variable; leave [store.encryption] out to store answers clear",
        );
        return Vec::new();
    }
    let mut keys: Vec<StoreKey> = Vec::new();
    // Every name seen, read or not: a variable listed twice is said so
    // whether or not it is set.
    let mut names: Vec<String> = Vec::new();
    for (i, var) in list.get_ref().iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let Some(name) = ctx.value(Some(var), &field, None, |n| env_name(n).map(Some)) else {
            continue;
        };
        if names.contains(&name) {
            ctx.error(Some(var.span()), &field, format!("{name} is listed twice"));
            continue;
        }
        names.push(name.clone());
        // The one-shot store commands never seal nor open an answer.
        if ctx.secrets == Secrets::Skip {
            continue;
        }
        let Some(bytes) = read_key(ctx, var, &field, &name) else {
            continue;
        };
        if let Some(same) = keys.iter().find(|k| k.bytes == bytes) {
            ctx.error(
                Some(var.span()),
                &field,
                format!("{name} holds the same key as {}", same.env),
            );
            continue;
        }
        keys.push(StoreKey { env: name, bytes });
    }
    keys
}

fn read_key(ctx: &mut Ctx<'_>, var: &Spanned<String>, field: &str, name: &str) -> Option<[u8; 32]> {
    // A secret written from a file often ends in a newline: not part of it.
    let Some(text) = (ctx.env)(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
    else {
        ctx.error(Some(var.span()), field, super::context::no_value(name));
        return None;
    };
    let hint = "a key is 32 random bytes in base64, e.g. `openssl rand -base64 32`";
    let Some(decoded) = decode(&text) else {
        ctx.error(
            Some(var.span()),
            field,
            format!("environment variable {name} is not base64; {hint}"),
        );
        return None;
    };
    match <[u8; 32]>::try_from(decoded.as_slice()) {
        Ok(bytes) => Some(bytes),
        // `openssl rand -hex 32`: read as base64, 48 bytes. Said as what it
        // is, with the conversion, rather than as a count that puzzles.
        Err(_) if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) => {
            ctx.error(
                Some(var.span()),
                field,
                format!(
                    "environment variable {name} holds 64 hex digits, not base64 \
                     (the same 32 bytes in base64: `xxd -r -p <<< \"${name}\" | base64`); {hint}"
                ),
            );
            None
        }
        Err(_) => {
            ctx.error(
                Some(var.span()),
                field,
                format!(
                    "environment variable {name} holds {} bytes once decoded; {hint}",
                    decoded.len()
                ),
            );
            None
        }
    }
}

/// The key's bytes from base64 as secret tools write it: the standard
/// alphabet (`openssl rand -base64 32`) or the URL-safe one (Python's
/// `secrets.token_urlsafe(32)`), with or without padding. Both alphabets
/// read 32 bytes alike, so no key is taken for another.
fn decode(text: &str) -> Option<Vec<u8>> {
    const fn lenient(alphabet: &Alphabet) -> GeneralPurpose {
        GeneralPurpose::new(
            alphabet,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        )
    }
    const ENGINES: [GeneralPurpose; 2] =
        [lenient(&alphabet::STANDARD), lenient(&alphabet::URL_SAFE)];
    ENGINES
        .iter()
        .find_map(|engine| engine.decode(text.as_bytes()).ok())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ConfigErrors, StoreConfig, parse};

    const ROUTE: &str = "[upstreams.api]\nurl = \"http://127.0.0.1:9\"\n\n[[routes]]\nname = \"r\"\nupstream = \"api\"\nmatch = { path_prefix = \"/\" }\n\n";
    const KEY: &str = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=";

    fn load(text: &str) -> Result<crate::config::Config, ConfigErrors> {
        parse(&format!("{ROUTE}{text}"), Path::new("t.toml"), &|name| {
            (name == "KEY").then(|| KEY.to_owned())
        })
    }

    fn errors(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    #[test]
    fn keys_resolve_in_order_on_both_backends() {
        let config = load("[store]\n[store.encryption]\nkeys_env = [\"KEY\"]\n").unwrap();
        let StoreConfig::Embedded(embedded) = &config.store else {
            panic!("embedded expected");
        };
        assert_eq!(embedded.encryption.len(), 1);
        assert_eq!(embedded.encryption[0].env, "KEY");
        assert!(!format!("{:?}", embedded.encryption).contains(KEY));
        let config = load(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n[store.encryption]\nkeys_env = [\"KEY\"]\n",
        )
        .unwrap();
        let StoreConfig::Postgres(pg) = &config.store else {
            panic!("postgres expected");
        };
        assert_eq!(pg.encryption.len(), 1);
        let off = load("[store]\n").unwrap();
        let StoreConfig::Embedded(embedded) = &off.store else {
            panic!("embedded expected");
        };
        assert!(embedded.encryption.is_empty(), "absent = stored clear");
    }

    #[test]
    fn an_empty_or_missing_list_is_an_error() {
        assert!(
            errors("[store.encryption]\nkeys_env = []\n").contains("store.encryption.keys_env")
        );
        assert!(errors("[store.encryption]\n").contains("store.encryption.keys_env"));
        assert!(errors("[store.encryption]\nkeys = [\"KEY\"]\n").contains("keys"));
    }

    #[test]
    fn keys_read_in_either_base64_alphabet_with_or_without_padding() {
        use base64::Engine as _;
        let bytes: Vec<u8> = (0u8..32)
            .map(|b| b.wrapping_mul(37).wrapping_add(250))
            .collect();
        let standard = base64::engine::general_purpose::STANDARD.encode(&bytes);
        assert!(standard.contains(['+', '/']), "{standard}");
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
        for text in [
            standard.clone(),
            standard.trim_end_matches('=').to_owned(),
            url_safe.clone(),
            format!("{url_safe}="),
        ] {
            assert_eq!(super::decode(&text).as_deref(), Some(&bytes[..]), "{text}");
        }
        // Alphabets mixed, or not base64 at all.
        let mixed = format!("+_{}", &url_safe[2..]);
        assert!(super::decode(&mixed).is_none(), "{mixed}");
        assert!(super::decode("not base64!").is_none());
        let text = parse(
            &format!("{ROUTE}[store.encryption]\nkeys_env = [\"KEY\"]\n"),
            Path::new("t.toml"),
            &|_| Some(url_safe.clone()),
        );
        assert!(text.is_ok(), "{text:?}");
    }

    #[test]
    fn a_variable_listed_twice_is_said_so_even_when_unset() {
        let text = errors("[store.encryption]\nkeys_env = [\"GONE\", \"GONE\"]\n");
        assert!(
            text.contains("store.encryption.keys_env[0]: environment variable GONE is not set"),
            "{text}"
        );
        assert!(
            text.contains("store.encryption.keys_env[1]: GONE is listed twice"),
            "{text}"
        );
        let text = errors("[store.encryption]\nkeys_env = [\"KEY\", \"KEY\"]\n");
        assert!(
            text.contains("store.encryption.keys_env[1]: KEY is listed twice"),
            "{text}"
        );
    }

    #[test]
    fn redis_ca_needs_rediss() {
        let pg = "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n";
        let plain = format!("{pg}[store.redis]\nurl = \"redis://r\"\nca = \"/ca.pem\"\n");
        assert!(errors(&plain).contains("store.redis.ca"));
        let tls = format!("{pg}[store.redis]\nurl = \"rediss://r\"\nca = \"/ca.pem\"\n");
        let config = load(&tls).unwrap();
        let StoreConfig::Postgres(pg) = &config.store else {
            panic!("postgres expected");
        };
        let redis = pg.redis.as_ref().unwrap();
        assert_eq!(redis.ca.as_deref(), Some(Path::new("/ca.pem")));
    }

    #[test]
    fn admin_tls_needs_cert_and_key_and_names_its_table() {
        let text = errors("[admin.tls]\ncert = \"/c.pem\"\n");
        assert!(text.contains("admin.tls.key"), "{text}");
        assert!(
            text.contains("[admin.tls] needs both cert and key"),
            "{text}"
        );
        let config =
            load("[admin.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\nclient_ca = \"/ca.pem\"\n")
                .unwrap();
        let tls = config.admin.tls.unwrap();
        assert_eq!(tls.client_ca.as_deref(), Some(Path::new("/ca.pem")));
        assert!(load("").unwrap().admin.tls.is_none());
    }
}
