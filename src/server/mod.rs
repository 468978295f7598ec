//! The transport: one accept loop for each plane (`listener`), the
//! gateway's own HTTP/1.1 server connection (`http1/`) and HTTP/2 through
//! hyper, behind TLS when configured. What the requests mean is the
//! handler's (the gateway's, the admin plane's); `app` wires them.

mod accept_failure;
mod asterisk;
mod h2_flood;
pub(crate) mod http1;
mod http2_activity;
mod idle_connections;
mod listener;
mod prefixed;
mod stall;
mod tls_refusal;

pub use idle_connections::OnEviction;
pub use listener::{Limits, serve};
pub use tls_refusal::{OnTlsRefusal, RefusalReason};
