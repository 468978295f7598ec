//! A config with every policy field set away from its default, header names
//! in mixed case and an extension method: what `check` and `/admin/routes`
//! print of each is pinned against it (their tests).

pub const CONFIG: &str = r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[defaults]
methods = ["post", "put", "purge"]
key = [{ header = "X-Key" }, { derive = ["/id", "header:X-Customer"], namespace = "6ba7b811-9dad-11d1-80b4-00c04fd430c8" }]
key_pattern = "ord_[0-9]+"
required = true
retention = "90m"
lock_timeout = "2m"
on_in_flight = "wait"
wait_timeout = "1500ms"
scope = ["header:X-Tenant", "header:Authorization"]
fingerprint = ["method", "path", "header:X-Region", "body"]
canonical_json = true
fingerprint_body = { exclude = ["/sent_at"] }
canonical_form = true
release_statuses = [409, "5xx"]
forward_key = false
replay_header = "X-Was-Replayed"
replay_exclude_headers = ["Set-Cookie", "X-Secret"]
replay_headers = ["Location", "ETag"]
replay_values = ["no", "yes"]
expiry_header = "Idempotency-Expires"
on_store_error = "pass"
max_in_flight = 8

[[routes]]
name = "orders"
upstream = "api"
match = { path_prefix = "/v1/orders", methods = ["post", "PURGE"] }

[[routes]]
name = "health"
upstream = "api"
match = { path = "/health" }
idempotency = false
"#;
