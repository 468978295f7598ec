//! `idemgate check`: the config as it will be served, its warnings, and
//! what `serve` would read besides it.

use std::path::Path;

use super::output::{EXIT_FAILURE, EXIT_OK, say};
use crate::config;

pub fn check(path: &Path) -> i32 {
    match config::load(path) {
        Ok(config) => {
            if let Err(code) = say(&config::describe(&config)) {
                return code;
            }
            // The report above lists the warnings; a script or a test that
            // captures the streams apart finds them on stderr too. Where both
            // go to one place (a terminal, `2>&1`) they are read once.
            let one_place = streams_are_one_file();
            if !one_place {
                for warning in &config.warnings {
                    eprintln!("warning: {warning}");
                }
            }
            for warning in crate::tls::validity_warnings(&config) {
                let warning = format!("warning: {}: {warning}", path.display());
                if let Err(code) = say(&format!("{warning}\n")) {
                    return code;
                }
                if !one_place {
                    eprintln!("{warning}");
                }
            }
            // The files the config names and the store's URLs, read as
            // `serve` (and a reload) would read them.
            let unusable = crate::preflight::unusable(&config);
            for error in &unusable {
                eprintln!("{error}");
            }
            if !unusable.is_empty() {
                return EXIT_FAILURE;
            }
            say(&format!("{}: ok\n", path.display())).map_or_else(|code| code, |()| EXIT_OK)
        }
        Err(errors) => {
            eprintln!("{errors}");
            EXIT_FAILURE
        }
    }
}

/// Whether stdout and stderr are one file: the same terminal, or one pipe
/// or log file under `2>&1`. Where `/proc` cannot say, both are terminals.
fn streams_are_one_file() -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata("/proc/self/fd/1"),
        std::fs::metadata("/proc/self/fd/2"),
    ) {
        (Ok(out), Ok(err)) => out.dev() == err.dev() && out.ino() == err.ino(),
        _ => {
            std::io::IsTerminal::is_terminal(&std::io::stdout())
                && std::io::IsTerminal::is_terminal(&std::io::stderr())
        }
    }
}
