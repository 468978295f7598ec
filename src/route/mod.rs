//! Which route a request belongs to, and the policy that applies to it.
//!
//! Built once per loaded config (and again on reload) from the model
//! `crate::config` parsed: building cannot fail, and the request path only
//! compares.

mod index;
mod path;
mod policy;
mod table;
#[cfg(test)]
mod table_tests;

pub use path::resolve_dot_segments;
pub use policy::RoutePolicy;
pub use table::{Route, RouteTable};
