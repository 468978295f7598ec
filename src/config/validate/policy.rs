//! The idempotency policy: built-in defaults, `[defaults]` on top of them, and a
//! route's own fields on top of that. A list given at a level replaces the
//! inherited list whole; a value that fails its check is reported and the
//! inherited value stands in, so later rules still run.

use std::time::Duration;

use http::{HeaderName, Method, header};
use toml::Spanned;

use super::context::Ctx;
use super::keys::{self, Released};
use super::names;
use super::server::positive_duration;
use crate::config::file::PolicyFile;
use crate::config::file_keys::StatusInput;
use crate::config::quoted;
use crate::config::{
    FingerprintBody, FingerprintPart, InFlightMode, KeySource, Policy, ReplayHeader, ReplayValues,
    ScopePart, StatusClass, StoreErrorMode,
};

/// The policy when `[defaults]` says nothing (docs/configuration.md).
pub fn builtin() -> Policy {
    Policy {
        methods: vec![Method::POST, Method::PATCH],
        key: vec![KeySource::Header(HeaderName::from_static(
            "idempotency-key",
        ))],
        required: false,
        retention: Duration::from_secs(24 * 3600),
        lock_timeout: Duration::from_secs(60),
        on_in_flight: InFlightMode::Conflict,
        wait_timeout: Duration::from_secs(10),
        scope: vec![ScopePart::Header(header::AUTHORIZATION)],
        fingerprint: vec![
            FingerprintPart::Method,
            FingerprintPart::Path,
            FingerprintPart::Query,
            FingerprintPart::Body,
        ],
        canonical_json: false,
        release_statuses: vec![429, 503],
        forward_key: true,
        replay_header: ReplayHeader::new(
            HeaderName::from_static("idempotent-replayed"),
            "Idempotent-Replayed",
        ),
        replay_exclude_headers: vec![header::SET_COOKIE],
        on_store_error: StoreErrorMode::Reject,
        max_in_flight: 0,
        key_pattern: None,
        fingerprint_body: FingerprintBody::Whole,
        canonical_form: false,
        release_classes: Vec::new(),
        expiry_header: None,
        replay_headers: Vec::new(),
        replay_values: ReplayValues::default(),
    }
}

/// `file` over `base`; `prefix` is `defaults` or `routes[N]`.
pub fn resolve(ctx: &mut Ctx<'_>, base: &Policy, file: &PolicyFile, prefix: &str) -> Policy {
    let field = |name: &str| format!("{prefix}.{name}");
    let flag = |value: &Option<Spanned<bool>>, inherited: bool| {
        value.as_ref().map_or(inherited, |v| *v.get_ref())
    };
    let mut policy = base.clone();
    if let Some(methods) = list(ctx, file.methods.as_ref(), &field("methods"), names::method) {
        policy.methods = methods;
    }
    if let Some(sources) = keys::sources(ctx, file.key.as_ref(), &field("key")) {
        policy.key = sources;
    }
    policy.required = flag(&file.required, base.required);
    policy.retention = ctx.value(
        file.retention.as_ref(),
        &field("retention"),
        base.retention,
        positive_duration,
    );
    policy.lock_timeout = ctx.value(
        file.lock_timeout.as_ref(),
        &field("lock_timeout"),
        base.lock_timeout,
        positive_duration,
    );
    policy.on_in_flight = ctx.value(
        file.on_in_flight.as_ref(),
        &field("on_in_flight"),
        base.on_in_flight,
        |mode| match mode.as_str() {
            "conflict" => Ok(InFlightMode::Conflict),
            "wait" => Ok(InFlightMode::Wait),
            other => Err(format!("{} is not \"conflict\" or \"wait\"", quoted(other))),
        },
    );
    policy.wait_timeout = ctx.value(
        file.wait_timeout.as_ref(),
        &field("wait_timeout"),
        base.wait_timeout,
        positive_duration,
    );
    if let Some(scope) = list(ctx, file.scope.as_ref(), &field("scope"), scope_part) {
        policy.scope = scope;
    }
    if let Some(parts) = list(
        ctx,
        file.fingerprint.as_ref(),
        &field("fingerprint"),
        fingerprint_part,
    ) {
        policy.fingerprint = parts;
    }
    policy.canonical_json = flag(&file.canonical_json, base.canonical_json);
    if let Some((statuses, classes)) = release_statuses(ctx, file, &field("release_statuses")) {
        policy.release_statuses = statuses;
        policy.release_classes = classes;
    }
    policy.forward_key = flag(&file.forward_key, base.forward_key);
    policy.replay_header = ctx.value(
        file.replay_header.as_ref(),
        &field("replay_header"),
        base.replay_header.clone(),
        |written| {
            names::replay_header_name(written, "the marker", "Idempotent-Replayed")
                .map(|name| ReplayHeader::new(name, written))
        },
    );
    if let Some(headers) = list(
        ctx,
        file.replay_exclude_headers.as_ref(),
        &field("replay_exclude_headers"),
        names::header_name,
    ) {
        policy.replay_exclude_headers = headers;
    }
    policy.on_store_error = ctx.value(
        file.on_store_error.as_ref(),
        &field("on_store_error"),
        base.on_store_error,
        |mode| match mode.as_str() {
            "reject" => Ok(StoreErrorMode::Reject),
            "pass" => Ok(StoreErrorMode::Pass),
            other => Err(format!("{} is not \"reject\" or \"pass\"", quoted(other))),
        },
    );
    policy.max_in_flight = ctx.value(
        file.max_in_flight.as_ref(),
        &field("max_in_flight"),
        base.max_in_flight,
        |n| usize::try_from(*n).map_err(|_| format!("must be 0 (no limit) or more (got {n})")),
    );
    key_and_fingerprint(ctx, base, file, &mut policy, &field);
    if let Some(methods) = &file.methods
        && methods.get_ref().is_empty()
    {
        ctx.error(
            Some(methods.span()),
            field("methods"),
            "empty: no request would be idempotent; use idempotency = false instead",
        );
    }
    policy
}

/// Checks every element of a written list; `None` when absent or when any
/// element is wrong (each one reported), so the inherited list stays.
fn list<T: PartialEq>(
    ctx: &mut Ctx<'_>,
    input: Option<&Spanned<Vec<Spanned<String>>>>,
    field: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<Vec<T>> {
    let mut ok = true;
    let mut values = Vec::new();
    for (i, item) in input?.get_ref().iter().enumerate() {
        let item_field = format!("{field}[{i}]");
        match parse(item.get_ref()) {
            Ok(value) if values.contains(&value) => {
                ok = false;
                ctx.error(
                    Some(item.span()),
                    item_field,
                    format!("{} is listed twice", quoted(item.get_ref())),
                );
            }
            Ok(value) => values.push(value),
            Err(message) => {
                ok = false;
                ctx.error(Some(item.span()), item_field, message);
            }
        }
    }
    ok.then_some(values)
}

fn scope_part(text: &str) -> Result<ScopePart, String> {
    match text.strip_prefix("header:") {
        Some(name) => names::header_name(name).map(ScopePart::Header),
        None if text == "client_cert" => Ok(ScopePart::ClientCert),
        None => Err(format!(
            "{} is not \"header:NAME\" or \"client_cert\"",
            quoted(text)
        )),
    }
}

fn fingerprint_part(text: &str) -> Result<FingerprintPart, String> {
    match text {
        "method" => Ok(FingerprintPart::Method),
        "path" => Ok(FingerprintPart::Path),
        "query" => Ok(FingerprintPart::Query),
        "body" => Ok(FingerprintPart::Body),
        _ => match text.strip_prefix("header:") {
            Some(name) => names::header_name(name).map(FingerprintPart::Header),
            None => Err(format!(
                "{} is not one of \"method\", \"path\", \"query\", \"body\", \"header:NAME\"",
                quoted(text)
            )),
        },
    }
}

/// `release_statuses`: the codes and the classes apart, each once.
fn release_statuses(
    ctx: &mut Ctx<'_>,
    file: &PolicyFile,
    field: &str,
) -> Option<(Vec<u16>, Vec<StatusClass>)> {
    let mut ok = true;
    let mut statuses = Vec::new();
    let mut classes = Vec::new();
    for (i, entry) in file.release_statuses.as_ref()?.get_ref().iter().enumerate() {
        let repeated = match keys::released(entry.get_ref()) {
            Ok(Released::Status(status)) => {
                statuses.contains(&status) || {
                    statuses.push(status);
                    false
                }
            }
            Ok(Released::Class(class)) => {
                classes.contains(&class) || {
                    classes.push(class);
                    false
                }
            }
            Err(message) => {
                ok = false;
                ctx.error(Some(entry.span()), format!("{field}[{i}]"), message);
                false
            }
        };
        // As a method twice in `match.methods`: a typo for another entry,
        // in a field files written before the classes have, so a warning.
        if repeated {
            let written = match entry.get_ref() {
                StatusInput::Code(code) => code.to_string(),
                StatusInput::Class(class) => format!("{class:?}"),
            };
            ctx.warn(
                Some(entry.span()),
                format!("{field}[{i}]"),
                format!("{written} is listed twice (the repeat is ignored)"),
            );
        }
    }
    ok.then_some((statuses, classes))
}

/// The fields of keys and fingerprints for real clients, over `base`.
fn key_and_fingerprint(
    ctx: &mut Ctx<'_>,
    base: &Policy,
    file: &PolicyFile,
    policy: &mut Policy,
    field: &dyn Fn(&str) -> String,
) {
    policy.key_pattern = ctx.value(
        file.key_pattern.as_ref(),
        &field("key_pattern"),
        base.key_pattern.clone(),
        |text| keys::pattern(text),
    );
    if let Some(body) = keys::fingerprint_body(
        ctx,
        file.fingerprint_body.as_ref(),
        &field("fingerprint_body"),
    ) {
        policy.fingerprint_body = body;
    }
    policy.canonical_form = file
        .canonical_form
        .as_ref()
        .map_or(base.canonical_form, |v| *v.get_ref());
    policy.expiry_header = ctx.value(
        file.expiry_header.as_ref(),
        &field("expiry_header"),
        base.expiry_header.clone(),
        |text| keys::expiry_header(text),
    );
    // Two fields of the gateway's own under one name: one would replace the
    // other on every answer.
    if policy.expiry_header.as_ref() == Some(policy.replay_header.name()) {
        let at = file
            .expiry_header
            .as_ref()
            .map(|v| (v.span(), "expiry_header"));
        let at = at.or(file
            .replay_header
            .as_ref()
            .map(|v| (v.span(), "replay_header")));
        if let Some((span, name)) = at {
            ctx.error(
                Some(span),
                field(name),
                "expiry_header and replay_header name the same field: the expiry would \
                 replace the replay marker",
            );
        }
    }
    if let Some(headers) = list(
        ctx,
        file.replay_headers.as_ref(),
        &field("replay_headers"),
        names::header_name,
    ) {
        policy.replay_headers = headers;
    }
    if let Some(values) = &file.replay_values {
        match keys::replay_values(values) {
            Ok(values) => policy.replay_values = values,
            Err(message) => ctx.error(Some(values.span()), field("replay_values"), message),
        }
    }
}
