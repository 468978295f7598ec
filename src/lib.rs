//! idemgate: an idempotency reverse proxy.
//!
//! The request path, by folder: `route` (which route and policy) → `webhook`
//! (a webhook route's signature) → `key` (key, scope, fingerprint) → `region`
//! (a key whose home is another region goes there) → `store` (reserve /
//! complete / release) → `proxy` (the upstream hop) — driven by `gateway`,
//! served by `server`, observed via `admin`, wired into a running process by
//! `app`.

pub mod admin;
pub mod answer;
pub mod app;
pub mod body;
pub mod cli;
pub mod client_info;
pub mod commands;
pub mod config;
pub mod deadline;
pub mod error;
pub mod gateway;
pub mod http1_probe;
pub mod key;
pub mod log_limit;
pub mod metrics;
pub mod preflight;
pub mod proxy;
pub mod region;
pub mod reload;
pub mod retention;
pub mod route;
pub mod server;
pub mod store;
pub mod tls;
pub mod webhook;
pub mod wire;
