//! `[store.encryption]`: the keys that seal stored answers, read from the
//! environment. Every message names the field and the variable, never the
//! value: a key quoted into a log or a CI transcript is a key lost.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use toml::Spanned;

use super::context::Ctx;
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
    for (i, var) in list.get_ref().iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let Some(name) = ctx.value(Some(var), &field, None, |n| env_name(n).map(Some)) else {
            continue;
        };
        if keys.iter().any(|k| k.env == name) {
            ctx.error(Some(var.span()), &field, format!("{name} is listed twice"));
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
        ctx.error(
            Some(var.span()),
            field,
            format!("environment variable {name} is not set or empty"),
        );
        return None;
    };
    let hint = "a key is 32 random bytes in base64, e.g. `openssl rand -base64 32`";
    let Ok(decoded) = STANDARD.decode(text.as_bytes()) else {
        ctx.error(
            Some(var.span()),
            field,
            format!("environment variable {name} is not base64; {hint}"),
        );
        return None;
    };
    match <[u8; 32]>::try_from(decoded.as_slice()) {
        Ok(bytes) => Some(bytes),
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
