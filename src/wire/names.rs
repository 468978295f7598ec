//! The field names of a connection's last head, in their order: the next
//! head from the same peer (a client's next request, an upstream's next
//! answer) mostly repeats them, and a name found here is not parsed again.

use http::header::{HeaderName, InvalidHeaderName};

/// Fields past this many, and names longer than `LONGEST`, are parsed
/// every time: the copy kept per connection stays small.
const KEPT: usize = 32;
const LONGEST: usize = 64;

#[derive(Debug, Default)]
pub struct FieldNames {
    /// The name as it was written, and what it parsed to.
    seen: Vec<(Box<[u8]>, HeaderName)>,
}

impl FieldNames {
    /// The name of the head's field number `at`, written as `written`.
    pub fn name(&mut self, at: usize, written: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
        if let Some((bytes, name)) = self.seen.get(at)
            && **bytes == *written
        {
            return Ok(name.clone());
        }
        let name = HeaderName::from_bytes(written)?;
        if at < KEPT && written.len() <= LONGEST {
            let entry = (Box::from(written), name.clone());
            match self.seen.len() {
                len if at < len => self.seen[at] = entry,
                len if at == len => self.seen.push(entry),
                // A field before it was not kept: neither is this one.
                _ => {}
            }
        }
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_what_its_bytes_parse_to_whether_kept_or_not() {
        let mut names = FieldNames::default();
        assert_eq!(names.name(0, b"Content-Type").unwrap(), "content-type");
        assert_eq!(names.name(1, b"X-Custom").unwrap(), "x-custom");
        // The same head again, then another in its place.
        assert_eq!(names.name(0, b"Content-Type").unwrap(), "content-type");
        assert_eq!(names.name(1, b"X-Custom").unwrap(), "x-custom");
        assert_eq!(names.name(0, b"Location").unwrap(), "location");
        assert_eq!(names.name(0, b"location").unwrap(), "location");
        assert_eq!(names.name(1, b"X-Custom").unwrap(), "x-custom");
        // Past what was kept, and too long to keep: parsed, right.
        assert_eq!(names.name(5, b"Date").unwrap(), "date");
        let long = "x".repeat(LONGEST + 1);
        assert_eq!(names.name(2, long.as_bytes()).unwrap(), long.as_str());
        assert_eq!(names.name(2, long.as_bytes()).unwrap(), long.as_str());
        assert!(names.name(0, b"bad name").is_err());
        assert_eq!(names.name(0, b"Location").unwrap(), "location");
    }
}
