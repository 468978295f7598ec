//! Where a key's records are kept, as a region that holds none of them
//! tells the operator who asked (the admin API's 404, `idemgate keys`).
//! Computed by `region::key_home`; kept here, beside the problems that
//! carry it, so that the answer is made without knowing of regions.

use std::sync::Arc;

/// The home of a key's records, as far as the route and the key tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyHome {
    /// The region whose store keeps them: this one or another.
    Region(Arc<str>),
    /// The route's scope reads each request (a header, a client
    /// certificate): each scope of the key has a home of its own.
    PerScope,
    /// The config has no route of that name (renamed or removed): its
    /// scope, and so the home, is not known.
    UnknownRoute,
}

/// What a region that holds no record of a key tells of it: its own name
/// and the key's home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whereabouts {
    pub this: Arc<str>,
    pub home: KeyHome,
}
