//! The written forms of the key and fingerprint fields that take more than
//! one shape: `key` (one source or a list of them), `release_statuses`
//! entries (a code or a class), `fingerprint_body`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

use super::file::KeyFile;

type TextList = Spanned<Vec<Spanned<String>>>;

/// `key = { ... }` or `key = [{ ... }, ...]`.
#[derive(Debug, Clone)]
pub enum KeyInput {
    One(Box<KeyFile>),
    Alternatives(Vec<Spanned<KeyFile>>),
}

impl<'de> Deserialize<'de> for KeyInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key source table, or a list of them")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KeyInput, A::Error> {
                KeyFile::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|file| KeyInput::One(Box::new(file)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<KeyInput, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(KeyInput::Alternatives)
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

/// One entry of `release_statuses`: `503` or `"5xx"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusInput {
    Code(i64),
    Class(String),
}

impl<'de> Deserialize<'de> for StatusInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StatusVisitor;
        impl Visitor<'_> for StatusVisitor {
            type Value = StatusInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an HTTP status code or a class (\"4xx\", \"5xx\")")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StatusInput, E> {
                Ok(StatusInput::Code(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StatusInput, E> {
                Ok(StatusInput::Code(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StatusInput, E> {
                Ok(StatusInput::Class(v.to_owned()))
            }
        }
        deserializer.deserialize_any(StatusVisitor)
    }
}

/// `fingerprint_body = { exclude = [...] }` or `{ include = [...] }`
/// (`{}`: the whole body, as by default).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FingerprintBodyFile {
    pub exclude: Option<TextList>,
    pub include: Option<TextList>,
}
