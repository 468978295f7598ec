//! Config templates more than one test file starts from (placeholders as
//! `gateway::render` fills them). A file that needs a variant derives it with
//! `replace` on one of these.

/// Embedded store; `charges` keyed on /v1/charges, `rest` a plain reverse
/// proxy for everything else; upstream `timeout = "1s"`, `lock_timeout = "5s"`.
pub const CHARGES_AND_REST: &str = r#"
[server]
listen = "{listen}"
admin_listen = "{admin}"
shutdown_grace = "5s"

[store]
path = "{db}"

[upstreams.api]
url = "{upstream}"
timeout = "1s"

[defaults]
lock_timeout = "5s"

[[routes]]
name = "charges"
upstream = "api"
match = { path_prefix = "/v1/charges" }

[[routes]]
name = "rest"
upstream = "api"
match = { path_prefix = "/" }
idempotency = false
"#;
