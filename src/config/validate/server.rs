//! `[server]`: the listeners, their limits and TLS; and what other tables
//! use too (`env_name`, durations, counts, a listener's TLS).

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::context::Ctx;
use super::names;
use crate::config::file::{ServerFile, TlsFile};
use crate::config::quoted;
use crate::config::units::{parse_duration_input, parse_size_input};
use crate::config::{ServerConfig, TlsConfig};

pub fn server(ctx: &mut Ctx<'_>, file: &ServerFile) -> ServerConfig {
    let default_listen = SocketAddr::from(([127, 0, 0, 1], 8080));
    let default_admin = SocketAddr::from(([127, 0, 0, 1], 9090));
    let listen = ctx.value(
        file.listen.as_ref(),
        "server.listen",
        default_listen,
        |text| address(text),
    );
    let admin_listen = ctx.value(
        file.admin_listen.as_ref(),
        "server.admin_listen",
        default_admin,
        |text| address(text),
    );
    if let Some(reason) = super::listeners::clash(listen, admin_listen)
        && let Some(written) = file.admin_listen.as_ref().or(file.listen.as_ref())
    {
        ctx.error(
            Some(written.span()),
            if file.admin_listen.is_some() {
                "server.admin_listen"
            } else {
                "server.listen"
            },
            reason,
        );
    }
    let max_request_body = size(
        ctx,
        file,
        |f| &f.max_request_body,
        "max_request_body",
        1 << 20,
    );
    ServerConfig {
        listen,
        admin_listen,
        max_request_body,
        max_buffered_bodies: buffered_bodies(ctx, file, max_request_body),
        max_stored_response: stored_response(ctx, file),
        max_header_bytes: size(
            ctx,
            file,
            |f| &f.max_header_bytes,
            "max_header_bytes",
            32 << 10,
        ),
        header_read_timeout: ctx.value(
            file.header_read_timeout.as_ref(),
            "server.header_read_timeout",
            Duration::from_secs(10),
            positive_duration,
        ),
        body_read_timeout: ctx.value(
            file.body_read_timeout.as_ref(),
            "server.body_read_timeout",
            Duration::from_secs(60),
            positive_duration,
        ),
        max_connections: ctx.value(
            file.max_connections.as_ref(),
            "server.max_connections",
            10_000,
            |n| count_up_to(*n, MAX_CONNECTIONS),
        ),
        max_headers: ctx.value(file.max_headers.as_ref(), "server.max_headers", 100, |n| {
            count_up_to(*n, MAX_HEADERS)
        }),
        shutdown_grace: ctx.value(
            file.shutdown_grace.as_ref(),
            "server.shutdown_grace",
            Duration::from_secs(30),
            parse_duration_input,
        ),
        tls: file
            .tls
            .as_ref()
            .and_then(|tls| server_tls(ctx, tls, "server.tls")),
        problem_base: self::problem_base_checked(ctx, file.problem_base.as_ref()),
    }
}

fn problem_base_checked(ctx: &mut Ctx<'_>, written: Option<&Spanned<String>>) -> Option<String> {
    let base = ctx.value(written, "server.problem_base", None, |text| {
        problem_base(text).map(Some)
    })?;
    if let Some(message) = glued(&base) {
        ctx.warn(written.map(Spanned::span), "server.problem_base", message);
    }
    Some(base)
}

/// The code is appended to the base as is. A base ending in a letter or a
/// digit glues it onto its last word ("…/errorsinvalid-key", or another
/// host for "https://x"): surely a slip, yet a URI the answers can carry,
/// so a warning that shows the result and the end that was likely meant.
fn glued(base: &str) -> Option<String> {
    if !base.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return None;
    }
    let end = if base.contains("://") { "/" } else { ":" };
    Some(format!(
        "the code is appended as is, giving \"{base}invalid-key\"; end it with \"{end}\" \
         (\"{base}{end}\")"
    ))
}

/// An absolute URI that problem codes are appended to; it goes into a `Link`
/// header between `<` and `>`, so it holds no space, quote or angle bracket.
fn problem_base(text: &str) -> Result<String, String> {
    let plain = text
        .bytes()
        .all(|b| (0x21..=0x7E).contains(&b) && !b"<>\"\\^`{|}".contains(&b));
    // RFC 3986's absolute URI: a scheme, `:`, then anything. `tag:` and
    // `urn:` type URIs have no authority, and RFC 9457 allows them.
    let absolute = text.split_once(':').is_some_and(|(scheme, rest)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            && !rest.is_empty()
    });
    if plain && absolute {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{} is not an absolute URI such as \"https://docs.example.com/errors/\"",
            quoted(text)
        ))
    }
}

fn size(
    ctx: &mut Ctx<'_>,
    file: &ServerFile,
    pick: impl Fn(&ServerFile) -> &Option<Spanned<crate::config::units::SizeInput>>,
    name: &str,
    default: u64,
) -> u64 {
    let field = format!("server.{name}");
    ctx.value(pick(file).as_ref(), &field, default, |input| {
        parse_size_input(input).and_then(|bytes| match bytes {
            0 => Err("must be greater than zero".to_owned()),
            bytes => Ok(bytes),
        })
    })
}

/// Most `server.max_stored_response` may be. Each store keeps an answer's
/// body in one field, and neither takes one much past a gigabyte (SQLite's
/// longest value is 10^9 bytes, a Postgres `bytea` 1 GiB): an answer under the
/// limit that the store then refused would hold its key until its lease
/// ended, and run again on the retry after that. Half of it leaves room for
/// the record's headers and a sealed record's envelope.
pub const MAX_STORED_RESPONSE: u64 = 512 << 20;

fn stored_response(ctx: &mut Ctx<'_>, file: &ServerFile) -> u64 {
    let limit = size(
        ctx,
        file,
        |f| &f.max_stored_response,
        "max_stored_response",
        4 << 20,
    );
    if limit > MAX_STORED_RESPONSE
        && let Some(written) = &file.max_stored_response
    {
        ctx.error(
            Some(written.span()),
            "server.max_stored_response",
            format!(
                "must be at most 512MiB ({MAX_STORED_RESPONSE} bytes), the largest answer \
                 every store can record (got {limit} bytes)"
            ),
        );
    }
    limit
}

/// Room for at least one body of the largest size a request may have: the
/// default grows with `max_request_body`, and a smaller value written down
/// would refuse such a body every time.
fn buffered_bodies(ctx: &mut Ctx<'_>, file: &ServerFile, max_request_body: u64) -> u64 {
    let budget = size(
        ctx,
        file,
        |f| &f.max_buffered_bodies,
        "max_buffered_bodies",
        DEFAULT_BUFFERED_BODIES.max(max_request_body),
    );
    if budget < max_request_body
        && let Some(written) = &file.max_buffered_bodies
    {
        ctx.error(
            Some(written.span()),
            "server.max_buffered_bodies",
            format!(
                "must be at least server.max_request_body ({max_request_body} bytes): \
                 a body of that size could never be read"
            ),
        );
    }
    budget
}

/// `server.max_buffered_bodies` when not written (and `max_request_body` is
/// no larger).
pub const DEFAULT_BUFFERED_BODIES: u64 = 256 << 20;

fn address(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        let problem = super::ip_literal::listen_problem(text)
            .map(|problem| format!(": {problem}"))
            .unwrap_or_default();
        format!(
            "{} is not an address such as \"127.0.0.1:8080\" or \"[::]:8080\"{problem}",
            quoted(text)
        )
    })
}

pub fn positive_duration(input: &crate::config::units::DurationInput) -> Result<Duration, String> {
    match parse_duration_input(input)? {
        Duration::ZERO => Err("must be greater than zero".to_owned()),
        duration => Ok(duration),
    }
}

/// A count that must be at least 1 and fit the target integer type.
pub fn positive_count<T: TryFrom<i64>>(n: i64) -> Result<T, String> {
    if n < 1 {
        return Err(format!("must be at least 1 (got {n})"));
    }
    T::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// Most connections one process can hold: Linux's default `fs.nr_open`
/// (file descriptors per process) is 1048576. A larger count cannot be
/// reached, and one near `usize::MAX` could not even be set up.
pub const MAX_CONNECTIONS: i64 = 1_000_000;
/// Most header fields one request may be allowed: a slot is kept for each.
pub const MAX_HEADERS: i64 = 10_000;

/// [`positive_count`] that is also at most `max`.
pub fn count_up_to<T: TryFrom<i64>>(n: i64, max: i64) -> Result<T, String> {
    if n > max {
        return Err(format!("must be at most {max} (got {n})"));
    }
    positive_count(n)
}

/// A listener's `[TABLE]` (`server.tls`, `admin.tls`): cert and key, optional client_ca.
pub fn server_tls(ctx: &mut Ctx<'_>, tls: &Spanned<TlsFile>, table: &str) -> Option<TlsConfig> {
    let file = tls.get_ref();
    let path = |ctx: &mut Ctx<'_>, value: &Option<Spanned<String>>, name: &str| {
        ctx.file_path(value.as_ref(), &format!("{table}.{name}"))
    };
    let cert = path(ctx, &file.cert, "cert");
    let key = path(ctx, &file.key, "key");
    let client_ca = path(ctx, &file.client_ca, "client_ca");
    for (present, name) in [(file.cert.is_some(), "cert"), (file.key.is_some(), "key")] {
        if !present {
            ctx.error(
                Some(tls.span()),
                format!("{table}.{name}"),
                format!("[{table}] needs both cert and key"),
            );
        }
    }
    Some(TlsConfig {
        cert: cert?,
        key: key?,
        client_ca,
    })
}

/// Shorter admin and region tokens are warned about: a guessable one guards
/// `/admin/*`, or the regions' one-home rule.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The name of an environment variable, as given in a `*_env` field.
/// A shell's `$NAME` or `${NAME}` is refused with the name to write: read
/// as a name it is a variable no one sets, and an unset admin token
/// disables `/admin/*` without an error.
pub fn env_name(text: &str) -> Result<String, String> {
    // Before all else: the messages below and those about the variable
    // (listed twice, not set) say its name whole.
    names::at_most(
        text,
        "the environment variable name",
        names::ENV_NAME_MAX_BYTES,
    )?;
    if let Some(bare) = text.strip_prefix('$') {
        let bare = bare
            .strip_prefix('{')
            .and_then(|b| b.strip_suffix('}'))
            .unwrap_or(bare);
        return Err(format!(
            "{} is a shell expansion, not a variable name: write the name alone, as in {}",
            quoted(text),
            quoted(bare)
        ));
    }
    if text.is_empty() || text.contains(['=', '\0']) {
        Err(format!(
            "{} is not an environment variable name",
            quoted(text)
        ))
    } else {
        Ok(text.to_owned())
    }
}
