//! A TOML value and a table of them, as the config builder writes them.

use std::path::Path;

/// A value as written after `key = `.
#[derive(Clone, Debug, PartialEq)]
pub struct Value(pub(super) String);

/// A value written as is: `raw("{ path_prefix = \"/\" }")`.
pub fn raw(text: &str) -> Value {
    Value(text.to_owned())
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value(quoted(text))
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value(quoted(&text))
    }
}

impl From<&String> for Value {
    fn from(text: &String) -> Value {
        Value(quoted(text))
    }
}

impl From<&Path> for Value {
    fn from(path: &Path) -> Value {
        Value(quoted(&path.display().to_string()))
    }
}

impl From<&std::path::PathBuf> for Value {
    fn from(path: &std::path::PathBuf) -> Value {
        Value::from(path.as_path())
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value(value.to_string())
    }
}

macro_rules! integer_values {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(value: $t) -> Value {
                Value(value.to_string())
            }
        }
    )*};
}
integer_values!(i32, i64, u16, u32, u64, usize);

/// An array of strings.
impl From<&[&str]> for Value {
    fn from(items: &[&str]) -> Value {
        let items: Vec<String> = items.iter().map(|item| quoted(item)).collect();
        Value(format!("[{}]", items.join(", ")))
    }
}

impl<const N: usize> From<[&str; N]> for Value {
    fn from(items: [&str; N]) -> Value {
        Value::from(&items[..])
    }
}

/// The keys of one table, in the order they were first set.
#[derive(Clone, Debug, Default)]
pub struct Table(pub(super) Vec<(String, Value)>);

impl Table {
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    pub fn unset(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A table of one key.
    pub(super) fn of(key: &str, value: impl Into<Value>) -> Table {
        let mut table = Table::default();
        table.set(key, value);
        table
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `header` (`[name]` or `[[name]]`) and its lines; nothing for an
    /// empty `[name]` table.
    pub(super) fn write(&self, header: &str, out: &mut String) {
        if self.is_empty() && !header.starts_with("[[") {
            return;
        }
        out.push('\n');
        out.push_str(header);
        out.push('\n');
        for (key, value) in &self.0 {
            out.push_str(&format!("{key} = {}\n", value.0));
        }
    }
}
