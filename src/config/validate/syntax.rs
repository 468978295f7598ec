//! Maps a toml/serde error (syntax, unknown field, wrong type) to one located
//! [`ConfigError`]. toml stops at the first such error; we keep its span for the
//! line, and name the field from the key path toml tracked or, for pure syntax
//! errors, from the table header and key written on that line.

use std::fmt::Write as _;

use toml::de::{DeTable, DeValue, Error as TomlError};

use super::context::Ctx;
use super::toml_quoted::{self, unknown_field};
use crate::config::ConfigError;

pub fn toml_error(ctx: &Ctx<'_>, text: &str, error: &TomlError) -> ConfigError {
    let message = in_toml_words(
        &error
            .message()
            .trim_end()
            .replace('\n', "; ")
            .replace("expected i64", "expected an integer")
            .replace("expected a sequence", "expected an array"),
    );
    let message = with_guess(message);
    let offset = error.span().map(|span| span.start);
    let unknown = unknown_field(&message);
    let mut field = key_path(error);
    if field.is_empty() && unknown.is_some() {
        // toml tracks no path for the root table: a top-level `foo = 1` or
        // `[foo]` is the field `foo` itself, whatever table came before it.
    } else if field.is_empty() {
        field = offset.map(|at| written_field(text, at)).unwrap_or_default();
    } else if let Some(at) = offset {
        field = index_lists(text, at, &index_routes(text, at, &field));
    }
    if let Some(unknown) = unknown {
        field = join(&field, unknown);
    }
    let message = toml_quoted::shortened(&message);
    ctx.located(error.span(), field, message)
}

/// toml keeps the key path private but prints it as "in `a.b`" when it has no
/// input to quote; rendering a copy without input recovers it.
fn key_path(error: &TomlError) -> String {
    let mut bare = error.clone();
    bare.set_input(None);
    let rendered = bare.to_string();
    rendered
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("in `")?.strip_suffix('`'))
        .unwrap_or_default()
        .to_owned()
}

/// serde names the Rust struct a table is read into (`expected struct
/// MatchFile`); the person reading the message wrote a TOML table.
fn in_toml_words(message: &str) -> String {
    const STRUCT: &str = "expected struct ";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(STRUCT) {
        out.push_str(&rest[..at]);
        out.push_str("expected a table");
        rest =
            rest[at + STRUCT.len()..].trim_start_matches(|c: char| c.is_alphanumeric() || c == '_');
    }
    out.push_str(rest);
    out
}

/// "unknown field `retentoin`, expected one of …": the field it most
/// likely meant goes first, the whole list after it.
fn with_guess(message: String) -> String {
    let Some(unknown) = unknown_field(&message) else {
        return message;
    };
    let Some((head, expected)) = message.split_once(", expected") else {
        return message;
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match super::spelling::closest(unknown, &known) {
        Some(meant) => format!("{head} (did you mean `{meant}`?), expected{expected}"),
        None => message,
    }
}

/// toml's path says `routes`, not which one: count `[[routes]]` headers up to
/// the error to name `routes[N]` (0-based, like every list index in messages).
fn index_routes(text: &str, offset: usize, field: &str) -> String {
    let rest = match field.strip_prefix("routes") {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => rest,
        _ => return field.to_owned(),
    };
    // Only the entry: the header may name a table inside it too.
    match header_at(text, offset) {
        Some(header) if header.starts_with("routes[") => {
            let entry = header.split('.').next().unwrap_or(&header);
            format!("{entry}{rest}")
        }
        _ => field.to_owned(),
    }
}

/// toml's path names no entry of an inline list either: `routes[0].key` for a
/// fault in the second table of `key = [{ ... }, { ... }]`. Walk the parsed
/// file along the path and name, at each list, the entry whose span holds
/// the error (`routes[0].key[1]`). A path the walk cannot follow is kept.
fn index_lists(text: &str, offset: usize, field: &str) -> String {
    let Ok(root) = DeTable::parse(text) else {
        return field.to_owned();
    };
    let mut table = Some(root.get_ref());
    let mut out = String::with_capacity(field.len() + 4);
    for segment in field.split('.') {
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(segment);
        let (name, index) = match segment.strip_suffix(']').and_then(|s| s.split_once('[')) {
            Some((name, index)) => (name, index.parse::<usize>().ok()),
            None => (segment, None),
        };
        let Some(mut value) = table.take().and_then(|table| {
            table
                .iter()
                .find(|(key, _)| key.get_ref() == name)
                .map(|(_, value)| value)
        }) else {
            continue;
        };
        if let DeValue::Array(items) = value.get_ref() {
            let entry = index.or_else(|| {
                let at = items
                    .iter()
                    .position(|item| item.span().contains(&offset))?;
                let _ = write!(out, "[{at}]");
                Some(at)
            });
            match entry.and_then(|at| items.get(at)) {
                Some(item) => value = item,
                None => continue,
            }
        }
        if let DeValue::Table(inner) = value.get_ref() {
            table = Some(inner);
        }
    }
    out
}

/// For a syntax error: `table.key` from the nearest header and the `key =` on the line,
/// or the table of the header on the line.
fn written_field(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let line = text
        .get(line_start..)
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(key, _)| key.trim())
        .filter(|key| !key.is_empty() && !key.starts_with('['))
        .unwrap_or("");
    // A fault in a header (a table written twice) is in the table it
    // opens, not in the one written before it.
    let through = match line.trim_start().starts_with('[') {
        true => line_start + line.len(),
        false => line_start,
    };
    let table = header_at(text, through).unwrap_or_default();
    join(&table, key)
}

/// The table the text at `offset` belongs to, from the last header before it.
fn header_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset).unwrap_or(text);
    let mut routes = 0usize;
    let mut current = None;
    for line in before.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let name = name.trim();
            if name == "routes" {
                routes += 1;
                current = Some(format!("routes[{}]", routes - 1));
            } else {
                current = Some(name.to_owned());
            }
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            let name: Vec<&str> = name.split('.').map(str::trim).collect();
            current = Some(match name.split_first() {
                // `[routes.webhook]` opens a table in the last `[[routes]]`.
                Some((&"routes", rest)) if routes > 0 && !rest.is_empty() => {
                    format!("routes[{}].{}", routes - 1, rest.join("."))
                }
                _ => name.join("."),
            });
        }
    }
    current
}

fn join(prefix: &str, key: &str) -> String {
    match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{key}"),
    }
}
