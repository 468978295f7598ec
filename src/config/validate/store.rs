//! `[store]` and `[store.redis]`: which backend, and its secrets from `*_env`.

use std::time::Duration;

use toml::Spanned;

use super::context::Ctx;
use super::names;
use super::server::{count_up_to, env_name, positive_count, positive_duration};
use crate::config::file::{RedisFile, StoreFile};
use crate::config::quoted;
use crate::config::{
    Durability, EmbeddedStoreConfig, PostgresStoreConfig, RedisConfig, StoreConfig,
};

/// Far past what one Postgres serves (its default `max_connections` is 100);
/// the pool sets aside room for each connection up front.
const MAX_POOL_SIZE: i64 = 10_000;

pub fn store(ctx: &mut Ctx<'_>, file: &StoreFile) -> StoreConfig {
    let backend = file
        .backend
        .as_ref()
        .map_or("embedded", |b| b.get_ref().as_str());
    let sweep_interval = ctx.value(
        file.sweep_interval.as_ref(),
        "store.sweep_interval",
        Duration::from_secs(60),
        positive_duration,
    );
    let sweep_batch = ctx.value(file.sweep_batch.as_ref(), "store.sweep_batch", 1000, |n| {
        positive_count(*n)
    });
    let encryption = super::encryption::encryption(ctx, file.encryption.as_ref());
    match backend {
        "postgres" => {
            for (field, span) in [
                ("store.path", file.path.as_ref().map(Spanned::span)),
                (
                    "store.durability",
                    file.durability.as_ref().map(Spanned::span),
                ),
            ] {
                only_for(ctx, field, span, "embedded");
            }
            StoreConfig::Postgres(PostgresStoreConfig {
                encryption,
                ..postgres(ctx, file, sweep_interval, sweep_batch)
            })
        }
        other => {
            if other != "embedded"
                && let Some(written) = &file.backend
            {
                ctx.error(
                    Some(written.span()),
                    "store.backend",
                    format!(
                        "unknown backend {}: expected \"embedded\" or \"postgres\"",
                        quoted(other)
                    ),
                );
            }
            let postgres_only = [
                ("store.url", file.url.as_ref().map(Spanned::span)),
                ("store.url_env", file.url_env.as_ref().map(Spanned::span)),
                (
                    "store.pool_size",
                    file.pool_size.as_ref().map(Spanned::span),
                ),
                (
                    "store.connect_timeout",
                    file.connect_timeout.as_ref().map(Spanned::span),
                ),
                (
                    "store.statement_timeout",
                    file.statement_timeout.as_ref().map(Spanned::span),
                ),
                ("store.migrate", file.migrate.as_ref().map(Spanned::span)),
                ("store.redis", file.redis.as_ref().map(Spanned::span)),
            ];
            for (field, span) in postgres_only {
                only_for(ctx, field, span, "postgres");
            }
            // Kept for `check`'s look at the file (crate::preflight).
            if let Some(path) = &file.path {
                ctx.place("store.path", "store.path", path.span());
            }
            let path = ctx.value(
                file.path.as_ref(),
                "store.path",
                "data/idemgate.db".into(),
                |p| names::file_path(p),
            );
            let durability = ctx.value(
                file.durability.as_ref(),
                "store.durability",
                Durability::PowerLoss,
                |d| match d.as_str() {
                    "power_loss" => Ok(Durability::PowerLoss),
                    "process_crash" => Ok(Durability::ProcessCrash),
                    other => Err(format!(
                        "{} is not \"power_loss\" or \"process_crash\"",
                        quoted(other)
                    )),
                },
            );
            StoreConfig::Embedded(EmbeddedStoreConfig {
                path,
                durability,
                sweep_interval,
                sweep_batch,
                encryption,
            })
        }
    }
}

fn only_for(ctx: &mut Ctx<'_>, field: &str, span: Option<std::ops::Range<usize>>, backend: &str) {
    if let Some(span) = span {
        ctx.error(
            Some(span),
            field,
            format!("only allowed with backend = \"{backend}\""),
        );
    }
}

fn postgres(
    ctx: &mut Ctx<'_>,
    file: &StoreFile,
    sweep_interval: Duration,
    sweep_batch: u32,
) -> PostgresStoreConfig {
    let at = file.backend.as_ref().map(Spanned::span);
    // The schemes tokio-postgres takes a URL by. Its `key=value` form would
    // open too, but the docs promise a URL, and a URL is what `check` can
    // tell from a mistyped scheme (`mysql://...`, which `serve` refuses).
    let url = secret_url(
        ctx,
        "store",
        at,
        file.url.as_ref(),
        file.url_env.as_ref(),
        &["postgres://", "postgresql://"],
    );
    PostgresStoreConfig {
        url,
        pool_size: ctx.value(file.pool_size.as_ref(), "store.pool_size", 16, |n| {
            count_up_to(*n, MAX_POOL_SIZE)
        }),
        connect_timeout: ctx.value(
            file.connect_timeout.as_ref(),
            "store.connect_timeout",
            Duration::from_secs(5),
            positive_duration,
        ),
        statement_timeout: ctx.value(
            file.statement_timeout.as_ref(),
            "store.statement_timeout",
            Duration::from_secs(5),
            positive_duration,
        ),
        migrate: file.migrate.as_ref().is_none_or(|m| *m.get_ref()),
        sweep_interval,
        sweep_batch,
        redis: file.redis.as_ref().map(|redis| self::redis(ctx, redis)),
        encryption: Vec::new(),
    }
}

fn redis(ctx: &mut Ctx<'_>, redis: &Spanned<RedisFile>) -> RedisConfig {
    let file = redis.get_ref();
    // `rediss://`: TLS, verified against the platform's roots or `ca`.
    let url = secret_url(
        ctx,
        "store.redis",
        Some(redis.span()),
        file.url.as_ref(),
        file.url_env.as_ref(),
        &["redis://", "rediss://"],
    );
    let key_prefix = ctx.value(
        file.key_prefix.as_ref(),
        "store.redis.key_prefix",
        "idemgate:".to_owned(),
        |prefix| {
            names::at_most(prefix, "the key prefix", names::KEY_PREFIX_MAX_BYTES)
                .map(|()| prefix.clone())
        },
    );
    let ca = ctx.file_path(file.ca.as_ref(), "store.redis.ca");
    if ca.is_some() && !url.is_empty() && !url.starts_with("rediss://") {
        ctx.error(
            file.ca.as_ref().map(Spanned::span),
            "store.redis.ca",
            "only used with a rediss:// URL (TLS)",
        );
    }
    RedisConfig {
        url,
        key_prefix,
        ca,
    }
}

/// Exactly one of `url` / `url_env`; an unset variable is an error because the
/// backend cannot work without it. The value is a secret: never quoted back.
fn secret_url(
    ctx: &mut Ctx<'_>,
    table: &str,
    at: Option<std::ops::Range<usize>>,
    url: Option<&Spanned<String>>,
    url_env: Option<&Spanned<String>>,
    schemes: &[&str],
) -> String {
    let (value, span, field) = match (url, url_env) {
        (Some(url), None) => (
            Some(url.get_ref().clone()),
            url.span(),
            format!("{table}.url"),
        ),
        (None, Some(var)) => {
            let field = format!("{table}.url_env");
            let Some(name) = ctx.value(Some(var), &field, None, |n| env_name(n).map(Some)) else {
                return String::new();
            };
            // A URL holds no whitespace: what surrounds it (a secret file's
            // final newline) is not part of it, and would end up in the
            // database name or the Redis address.
            let value = (ctx.env)(&name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty());
            if value.is_none() {
                ctx.error(Some(var.span()), &field, super::context::no_value(&name));
                return String::new();
            }
            (value, var.span(), field)
        }
        (Some(url), Some(_)) => {
            ctx.error(
                Some(url.span()),
                format!("{table}.url"),
                "give url or url_env, not both",
            );
            return String::new();
        }
        (None, None) => {
            ctx.error(at, format!("{table}.url"), "url or url_env is required");
            return String::new();
        }
    };
    let value = value.unwrap_or_default();
    // What opening the store reads of the URL (its TLS parameters) is
    // checked later, as `{table}.url`, said as the file writes it.
    ctx.place(&format!("{table}.url"), &field, span.clone());
    if value.trim().is_empty() {
        ctx.error(Some(span), field, "the URL is empty");
    } else if !schemes.is_empty() && !schemes.iter().any(|s| value.starts_with(s)) {
        // The Redis client's `unix://` and `redis+unix://` name a socket
        // file; the gateway takes its Redis over TCP only (a Postgres URL
        // names a socket directory by its host instead).
        let unix = table == "store.redis"
            && (value.split_once("://"))
                .is_some_and(|(scheme, _)| scheme == "unix" || scheme.ends_with("+unix"));
        let prefix = match unix {
            true => "Unix socket URLs are not supported: ",
            false => "",
        };
        ctx.error(
            Some(span),
            field,
            format!("{prefix}the URL must start with {}", schemes.join(" or ")),
        );
    }
    value
}
