//! Test harness: a counting mock upstream, the real `idemgate` binary started
//! on free loopback ports, and a small HTTP client.
#![allow(dead_code, unused_imports)]

pub mod admin;
pub mod certs;
pub mod client;
pub mod config;
pub mod gateway;
pub mod h2;
pub mod owned_store;
pub mod raw;
pub mod tls_client;
pub mod upstream;

pub use client::{Client, Reply};
pub use gateway::{GatewayProcess, TestDir};
pub use upstream::MockUpstream;
