//! What is wrong in a PEM file, in words. The parser's own text shows a
//! missing END line as a list of byte values and a bad character by its
//! code, which sends an operator looking in the wrong place.

use std::fmt;

use pki_types::pem;

#[derive(Debug)]
pub struct PemProblem(pub pem::Error);

impl fmt::Display for PemProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            pem::Error::MissingSectionEnd { end_marker } => write!(
                f,
                "a block has no \"-----END {}-----\" line (is the file cut short?)",
                String::from_utf8_lossy(end_marker)
            ),
            pem::Error::IllegalSectionStart { line } => write!(
                f,
                "malformed BEGIN line {:?}",
                String::from_utf8_lossy(line).trim()
            ),
            pem::Error::Base64Decode(_) => {
                f.write_str("a block's body is not valid base64 (damaged, or edited by hand?)")
            }
            pem::Error::NoItemsFound => f.write_str("no PEM block of the expected kind"),
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for PemProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pki_types::CertificateDer;
    use pki_types::pem::PemObject;

    fn problem(pem: &str) -> String {
        let error = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err();
        PemProblem(error).to_string()
    }

    /// A file cut short names the line it lacks, not its bytes' values.
    #[test]
    fn each_problem_is_said_in_words() {
        let cut = problem("-----BEGIN CERTIFICATE-----\nMIIB\n");
        assert_eq!(
            cut,
            "a block has no \"-----END CERTIFICATE-----\" line (is the file cut short?)"
        );
        let bad = problem("-----BEGIN CERTIFICATE-----\nMII!\n-----END CERTIFICATE-----\n");
        assert!(bad.contains("not valid base64"), "{bad}");
        assert!(!bad.contains("InvalidCharacter"), "{bad}");
    }
}
