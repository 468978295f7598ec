//! `[admin]`: the bearer tokens `/admin/*` accepts, inline or from the
//! variables `token_env` lists, and `[admin.tls]`.

use std::ops::Range;

use toml::Spanned;

use super::context::Ctx;
use super::env_list::{Listed, listed};
use super::server::{MIN_TOKEN_CHARS, env_name, server_tls};
use crate::config::file::{AdminFile, EnvNamesFile};
use crate::config::{AdminConfig, AdminToken, TokenSource};

pub fn admin(ctx: &mut Ctx<'_>, file: &AdminFile) -> AdminConfig {
    let (token_env, from_env) = match &file.token_env {
        Some(names) => from_env(ctx, names),
        None => (Vec::new(), Vec::new()),
    };
    // Inline, as docs/configuration.md allows any secret (`*_env` or inline).
    let tokens = match (&file.token, &file.token_env) {
        (Some(inline), Some(_)) => {
            ctx.error(
                Some(inline.span()),
                "admin.token",
                "give token or token_env, not both",
            );
            Vec::new()
        }
        (Some(inline), None) => inline_token(ctx, inline).into_iter().collect(),
        (None, _) => from_env,
    };
    let tls = file
        .tls
        .as_ref()
        .and_then(|tls| server_tls(ctx, tls, "admin.tls"));
    AdminConfig {
        token_env,
        tokens,
        tls,
    }
}

/// An empty inline token is a mistake, not a way to disable `/admin/*`
/// (leaving the field out is); the value, a secret, is never quoted back.
fn inline_token(ctx: &mut Ctx<'_>, inline: &Spanned<String>) -> Option<AdminToken> {
    let secret = inline.get_ref().trim();
    if secret.is_empty() {
        ctx.error(
            Some(inline.span()),
            "admin.token",
            "the token is empty; leave admin.token out to disable /admin/*",
        );
        return None;
    }
    let token = AdminToken {
        source: TokenSource::Inline,
        secret: secret.to_owned(),
    };
    usable(ctx, token, inline.span(), "admin.token")
}

/// The listed variables, and the tokens of those that hold one. A variable
/// unset or empty gives no token, by design, not an error: with none
/// holding one `/admin/*` is disabled (and the log says why). While another
/// holds one, it is a warning: a rotation under way, or a token that was
/// meant to be there and is refused.
fn from_env(ctx: &mut Ctx<'_>, names: &Spanned<EnvNamesFile>) -> (Vec<String>, Vec<AdminToken>) {
    let listed = listed(names, "admin.token_env");
    if listed.is_empty() {
        ctx.error(
            Some(names.span()),
            "admin.token_env",
            "empty: give at least one variable holding the admin token (leave token_env \
             out to disable /admin/*)",
        );
    }
    let mut variables: Vec<String> = Vec::new();
    let mut tokens = Vec::new();
    let mut without_token = Vec::new();
    for Listed { name, span, field } in listed {
        let name = match env_name(&name) {
            Ok(name) => name,
            Err(message) => {
                ctx.error(Some(span), field, message);
                continue;
            }
        };
        if variables.contains(&name) {
            ctx.error(Some(span), field, format!("{name} is listed twice"));
            continue;
        }
        variables.push(name.clone());
        // Surrounding whitespace is not part of the token: a secret written
        // from a file often ends in a newline, which no client can send in a
        // header (clients' tokens are read trimmed too).
        let value = (ctx.env)(&name)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty());
        let Some(secret) = value else {
            without_token.push((name, span, field));
            continue;
        };
        let token = AdminToken {
            source: TokenSource::Env(name),
            secret,
        };
        tokens.extend(usable(ctx, token, span, &field));
    }
    if !tokens.is_empty() {
        for (name, span, field) in without_token {
            ctx.warn(
                Some(span),
                field,
                format!(
                    "{name} is not set or empty: /admin/* accepts the tokens of the other \
                     listed variables, not one from {name}"
                ),
            );
        }
    }
    (variables, tokens)
}

/// A client presents the token in `Authorization`, which carries visible
/// ASCII, spaces and tabs only: with any other character in it every call
/// would be refused, and nothing would say why. A short one is said.
fn usable(
    ctx: &mut Ctx<'_>,
    token: AdminToken,
    span: Range<usize>,
    field: &str,
) -> Option<AdminToken> {
    let source = match &token.source {
        TokenSource::Env(variable) => format!("the value of {variable}"),
        TokenSource::Inline => "the token".to_owned(),
    };
    if !sendable(&token.secret) {
        ctx.error(
            Some(span),
            field,
            format!(
                "{source} holds a character a client cannot send in an Authorization \
                 header (a control character, or one beyond ASCII): every call to /admin/* \
                 would be refused; use visible ASCII (e.g. `openssl rand -hex 32`)"
            ),
        );
        return None;
    }
    let length = token.secret.chars().count();
    if length < MIN_TOKEN_CHARS {
        // Not refused: a short token still works, and a test bed may want
        // one. But a placeholder left in place ("CHANGE-ME") guards the purge
        // of any key on any route; the length, never the token, is quoted.
        ctx.warn(
            Some(span),
            field,
            format!(
                "the admin token is {length} characters long; anyone who guesses it can \
                 purge keys and reload: use at least {MIN_TOKEN_CHARS} random \
                 characters (e.g. `openssl rand -hex 32`)"
            ),
        );
    }
    Some(token)
}

/// What an `Authorization` header value can carry and the admin plane
/// reads back: visible ASCII, spaces and tabs.
fn sendable(token: &str) -> bool {
    token
        .bytes()
        .all(|byte| byte == b'\t' || (b' '..=b'~').contains(&byte))
}

#[cfg(test)]
mod tests;
