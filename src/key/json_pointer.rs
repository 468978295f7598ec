use serde_json::Value;

use super::KeyError;

/// The key at an RFC 6901 `pointer` in a JSON body: a string is taken as is, a
/// number by its JSON text. Not JSON, nothing there, or another type → `Missing`;
/// a value that fails [`super::validate`] → `Invalid`.
pub fn from_json_body(body: &[u8], pointer: &str) -> Result<String, KeyError> {
    // serde_json caps nesting at 128 levels (its default recursion limit), so a
    // hostile deeply nested body is a parse error here, not a stack overflow.
    let doc: Value = serde_json::from_slice(body).map_err(|_| KeyError::Missing)?;
    let key = match doc.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(KeyError::Missing),
    };
    super::validate(&key)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(body: &str, pointer: &str) -> Result<String, KeyError> {
        from_json_body(body.as_bytes(), pointer)
    }

    #[test]
    fn string_and_number() {
        assert_eq!(get(r#"{"id":"abc"}"#, "/id"), Ok("abc".into()));
        assert_eq!(get(r#"{"id":42}"#, "/id"), Ok("42".into()));
        assert_eq!(get(r#"{"id":-7}"#, "/id"), Ok("-7".into()));
        assert_eq!(get(r#"{"id":1.5}"#, "/id"), Ok("1.5".into()));
        assert_eq!(get(r#""whole""#, ""), Ok("whole".into()));
    }

    #[test]
    fn nested_and_escaped_segments() {
        assert_eq!(get(r#"{"data":{"id":"n1"}}"#, "/data/id"), Ok("n1".into()));
        assert_eq!(get(r#"{"a/b":"slash"}"#, "/a~1b"), Ok("slash".into()));
        assert_eq!(get(r#"{"a~b":"tilde"}"#, "/a~0b"), Ok("tilde".into()));
        assert_eq!(get(r#"{"items":["x","y"]}"#, "/items/1"), Ok("y".into()));
    }

    #[test]
    fn missing() {
        assert_eq!(get(r#"{"other":"x"}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":null}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":true}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":{"x":1}}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":["x"]}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"}"#, ""), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"}"#, "id"), Err(KeyError::Missing));
        assert_eq!(get("not json", "/id"), Err(KeyError::Missing));
        assert_eq!(get("", "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"} trailing"#, "/id"), Err(KeyError::Missing));
        assert_eq!(
            from_json_body(b"{\"id\":\"\xff\"}", "/id"),
            Err(KeyError::Missing)
        );
    }

    #[test]
    fn invalid() {
        assert_eq!(get(r#"{"id":""}"#, "/id"), Err(KeyError::Invalid("empty")));
        assert!(matches!(
            get(r#"{"id":"a b"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        assert!(matches!(
            get(r#"{"id":"\u0001"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        assert!(matches!(
            get(r#"{"id":"clé"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        let long = format!(r#"{{"id":"{}"}}"#, "k".repeat(256));
        assert_eq!(
            get(&long, "/id"),
            Err(KeyError::Invalid("longer than 255 characters"))
        );
    }

    #[test]
    fn deep_nesting_is_missing_not_a_crash() {
        let depth = 10_000;
        let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(get(&body, "/0"), Err(KeyError::Missing));
        let body = format!("{}\"k\"{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        assert_eq!(get(&body, "/a"), Err(KeyError::Missing));
        // Within the limit, nesting is fine.
        let body = format!("{}\"k\"{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(get(&body, &"/0".repeat(100)), Ok("k".into()));
    }

    fn xorshift(state: &mut u64) -> u64 {
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        x
    }

    #[test]
    fn never_panics() {
        const ALPHABET: &[u8] = b"{}[]\":,0123456789.-eE\\ u/~ab\x00\xff";
        const POINTERS: &[&str] = &["", "/", "/a", "/0", "/a/0", "/~1", "/~0", "/~2", "a"];
        let mut seed = 0x2545_F491_4F6C_DD1D_u64;
        for i in 0..20_000 {
            let len = (xorshift(&mut seed) % 24) as usize;
            let body: Vec<u8> = (0..len)
                .map(|_| ALPHABET[(xorshift(&mut seed) >> 8) as usize % ALPHABET.len()])
                .collect();
            let pointer = POINTERS[i % POINTERS.len()];
            if let Ok(k) = from_json_body(&body, pointer) {
                assert_eq!(super::super::validate(&k), Ok(()));
            }
        }
    }
}
