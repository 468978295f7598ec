//! How long an upstream connection is reused, HTTP/1 and HTTP/2 alike: the
//! requests it carries, and the longest it is kept, as nginx's
//! `keepalive_requests` and `keepalive_time` defaults. Under steady load a
//! kept connection never idles, so without an end, upstream instances
//! added behind a balancer (a Kubernetes Service, a DNS name) would get no
//! share of what the open connections carry.

use std::time::Duration;

pub const MAX_REQUESTS: u32 = 1000;
pub const MAX_AGE: Duration = Duration::from_secs(3600);
