//! How a field's path is shown in a message. A table key written in the
//! file (`upstreams.NAME`, a field toml does not know) is part of the path,
//! and a key of a MiB would be printed whole, once per message about it.

use std::fmt;

use super::quoted::escaped;

/// The characters of one key that are shown: every name a file may have
/// (at most 128 bytes, all ASCII) is shown whole.
const KEY_CHARS: usize = 128;

/// The characters of a whole path that are shown, for a key written with
/// dots in it (`"a.b.c…"`), which reads as many short keys.
const PATH_CHARS: usize = 512;

/// `path` as it is, when every key in it is short; a longer key is shown by
/// its first [`KEY_CHARS`] characters and `…` (`upstreams.aaaa….url`), the
/// line and column telling where the rest is. A key's control characters
/// are escaped (`upstreams.a\nb`): the path stays on its line.
pub fn field_path(path: &str) -> FieldPath<'_> {
    FieldPath(path)
}

pub struct FieldPath<'a>(&'a str);

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = 0;
        for (i, key) in self.0.split('.').enumerate() {
            if i > 0 {
                f.write_str(".")?;
                shown += 1;
            }
            if shown >= PATH_CHARS {
                return f.write_str("…");
            }
            let room = KEY_CHARS.min(PATH_CHARS - shown);
            match key.char_indices().nth(room) {
                None => {
                    write!(f, "{}", escaped(key))?;
                    shown += key.chars().count();
                }
                Some((end, _)) => {
                    write!(f, "{}…", escaped(&key[..end]))?;
                    shown += room;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::field_path;

    #[test]
    fn a_path_of_short_keys_is_shown_whole() {
        let name = "n".repeat(128);
        for path in [
            "",
            "routes[0].key[1].json_pointer",
            &format!("upstreams.{name}.url"),
        ] {
            assert_eq!(field_path(path).to_string(), path);
        }
    }

    #[test]
    fn a_long_key_is_shown_by_its_start() {
        let key = "é".repeat(100_000);
        assert_eq!(
            field_path(&format!("regions.{key}.gateway")).to_string(),
            format!("regions.{}….gateway", "é".repeat(128))
        );
        // Many short keys are a long path all the same.
        let dotted = "a.".repeat(100_000);
        let shown = field_path(&dotted).to_string();
        assert!(shown.starts_with("a.a.a."), "{shown}");
        assert!(shown.ends_with('…'), "{shown}");
        assert!(shown.chars().count() <= 514, "{shown}");
    }
}
