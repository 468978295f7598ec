//! The gateway's own HTTP/1.1 client for upstreams: a pool of connections,
//! each carrying one request at a time in the task that sends it.
//!
//! Not hyper's client connection, for a measured reason (docs/adr/0001-own-http1.md):
//! hyper drives each connection from a task of its own and hands
//! requests and answers to it through channels, which cost about a third
//! of a pass-through's instructions; here the request's own task writes the
//! request and reads the answer.

mod body;
mod connection;
mod idle;
mod pool;
pub(crate) mod request_head;
pub(crate) mod response_head;
mod stream;

pub use body::AnswerBody;
pub use pool::{Http1Pool, PoolLimits};
pub use stream::{DialFailure, Dialer, DialerError};
