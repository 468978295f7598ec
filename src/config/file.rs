//! The configuration file as written: serde structs that mirror the TOML one to
//! one. Nothing is defaulted or checked here beyond TOML types; every value whose
//! meaning can still be wrong keeps its span so `validate` can name its line.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::units::{DurationInput, SizeInput};

type Text = Spanned<String>;
type TextList = Spanned<Vec<Spanned<String>>>;
type Dur = Spanned<DurationInput>;
type Size = Spanned<SizeInput>;
type Int = Spanned<i64>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub server: ServerFile,
    #[serde(default)]
    pub admin: AdminFile,
    #[serde(default)]
    pub store: StoreFile,
    #[serde(default)]
    pub upstreams: BTreeMap<String, Spanned<UpstreamFile>>,
    #[serde(default)]
    pub defaults: PolicyFile,
    pub routes: Option<Spanned<Vec<Spanned<RouteFile>>>>,
    pub region: Option<Spanned<RegionFile>>,
    #[serde(default)]
    pub regions: BTreeMap<String, Spanned<RegionPeerFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    pub listen: Option<Text>,
    pub admin_listen: Option<Text>,
    pub max_request_body: Option<Size>,
    pub max_stored_response: Option<Size>,
    pub max_buffered_bodies: Option<Size>,
    pub max_header_bytes: Option<Size>,
    pub header_read_timeout: Option<Dur>,
    pub body_read_timeout: Option<Dur>,
    pub max_connections: Option<Int>,
    pub max_headers: Option<Int>,
    pub shutdown_grace: Option<Dur>,
    pub tls: Option<Spanned<TlsFile>>,
    pub problem_base: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert: Option<Text>,
    pub key: Option<Text>,
    pub client_ca: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    pub token: Option<Text>,
    pub token_env: Option<Spanned<EnvNamesFile>>,
    pub tls: Option<Spanned<TlsFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFile {
    pub backend: Option<Text>,
    pub path: Option<Text>,
    pub durability: Option<Text>,
    pub url: Option<Text>,
    pub url_env: Option<Text>,
    pub pool_size: Option<Int>,
    pub connect_timeout: Option<Dur>,
    pub statement_timeout: Option<Dur>,
    pub migrate: Option<Spanned<bool>>,
    pub sweep_interval: Option<Dur>,
    pub sweep_batch: Option<Int>,
    pub redis: Option<Spanned<RedisFile>>,
    pub encryption: Option<Spanned<EncryptionFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionFile {
    pub keys_env: Option<TextList>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisFile {
    pub url: Option<Text>,
    pub url_env: Option<Text>,
    pub key_prefix: Option<Text>,
    pub ca: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamFile {
    pub url: Option<Text>,
    pub connect_timeout: Option<Dur>,
    pub timeout: Option<Dur>,
    pub http2: Option<bool>,
    pub keep_alive: Option<Spanned<bool>>,
    pub max_connections: Option<Int>,
    pub tls: Option<Spanned<UpstreamTlsFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsFile {
    pub ca: Option<Text>,
    pub cert: Option<Text>,
    pub key: Option<Text>,
}

/// `key = { header = "..." }`, `{ json_pointer = "..." }`, `{ query = "..." }`,
/// `{ form_field = "..." }` or `{ derive = [...], namespace = "..." }`; exactly
/// one is checked in `validate` so that both-or-neither is a located,
/// collected error.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    pub header: Option<Text>,
    pub json_pointer: Option<Text>,
    pub query: Option<Text>,
    pub form_field: Option<Text>,
    pub derive: Option<TextList>,
    pub namespace: Option<Text>,
}

pub use super::file_keys::{FingerprintBodyFile, KeyInput, StatusInput};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchFile {
    pub path: Option<Text>,
    pub path_prefix: Option<Text>,
    pub methods: Option<TextList>,
}

/// Declares a struct holding the policy fields plus `extra` fields. Routes and
/// `[defaults]` share the policy fields, but serde's `flatten` cannot be used:
/// it breaks both `deny_unknown_fields` and spans.
macro_rules! with_policy_fields {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        with_policy_fields!(@emit $(#[$meta])* $name { $($(#[$fmeta])* $field: $ty,)* } [
            methods: Option<TextList>,
            key: Option<Spanned<KeyInput>>,
            required: Option<Spanned<bool>>,
            retention: Option<Dur>,
            lock_timeout: Option<Dur>,
            on_in_flight: Option<Text>,
            wait_timeout: Option<Dur>,
            scope: Option<TextList>,
            fingerprint: Option<TextList>,
            canonical_json: Option<Spanned<bool>>,
            release_statuses: Option<Spanned<Vec<Spanned<StatusInput>>>>,
            forward_key: Option<Spanned<bool>>,
            replay_header: Option<Text>,
            replay_exclude_headers: Option<TextList>,
            on_store_error: Option<Text>,
            max_in_flight: Option<Int>,
            key_pattern: Option<Text>,
            fingerprint_body: Option<Spanned<FingerprintBodyFile>>,
            canonical_form: Option<Spanned<bool>>,
            expiry_header: Option<Text>,
            replay_headers: Option<TextList>,
            replay_values: Option<TextList>,
        ]);
    };
    (@emit $(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }
        [$($pfield:ident: $pty:ty,)*]) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            $(pub $pfield: $pty,)*
        }

        // Generated for both structs; only routes need them.
        #[allow(dead_code)]
        impl $name {
            /// The policy fields alone, as written.
            pub fn policy(&self) -> PolicyFile {
                PolicyFile { $($pfield: self.$pfield.clone(),)* }
            }

            /// Names of the policy fields that are set, in declaration order.
            pub fn policy_fields_set(&self) -> Vec<&'static str> {
                let mut set = Vec::new();
                $(if self.$pfield.is_some() { set.push(stringify!($pfield)); })*
                set
            }
        }
    };
}

with_policy_fields! {
    #[derive(Debug, Clone, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    PolicyFile {}
}

with_policy_fields! {
    #[derive(Debug, Clone, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    RouteFile {
        name: Option<Text>,
        upstream: Option<Text>,
        #[serde(rename = "match")]
        matcher: Option<Spanned<MatchFile>>,
        idempotency: Option<Spanned<bool>>,
        preserve_host: Option<bool>,
        webhook: Option<Spanned<WebhookFile>>,
    }
}

/// `webhook = { scheme = "...", secrets_env = [...], tolerance = "5m" }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookFile {
    pub scheme: Option<Text>,
    pub secrets_env: Option<Spanned<EnvNamesFile>>,
    pub tolerance: Option<Dur>,
}

/// `secrets_env`, `admin.token_env`: one variable name, or a list of them
/// (a secret being rotated: any listed one is accepted).
#[derive(Debug, Clone)]
pub enum EnvNamesFile {
    One(String),
    Many(Vec<Spanned<String>>),
}

// By hand: serde's untagged enums buffer the value and lose toml's spans.
impl<'de> Deserialize<'de> for EnvNamesFile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = EnvNamesFile;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an environment variable name or a list of them")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(EnvNamesFile::One(name.to_owned()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element()? {
                    names.push(name);
                }
                Ok(EnvNamesFile::Many(names))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `[region]`: which region this gateway is, and where its token is.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionFile {
    pub name: Option<Text>,
    pub token_env: Option<Text>,
}

/// `[regions.NAME]`: how to reach that region's gateway.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionPeerFile {
    pub gateway: Option<Text>,
    pub connect_timeout: Option<Dur>,
    pub timeout: Option<Dur>,
    pub ca: Option<Text>,
    pub http2: Option<bool>,
}
