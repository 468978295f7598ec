//! What the commands print and exit with.

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;

/// Writes (part of) a report to stdout. A reader that went away (`idemgate keys
/// show … | head`) is no failure of the command: the rest is dropped
/// quietly (`println!` would panic, with a backtrace). Any other write error (a
/// full disk) is said on stderr and fails the command: a script must not take
/// a cut report for a whole one.
pub(super) fn say(text: &str) -> Result<(), i32> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => {
            eprintln!("idemgate: cannot write to stdout: {err}");
            Err(EXIT_FAILURE)
        }
    }
}

/// The line `sweep` and `keys purge` end with: "1 record deleted",
/// "2 expired records deleted".
pub(super) fn deleted(count: u64, kind: &str) -> String {
    let records = if count == 1 { "record" } else { "records" };
    format!("{count} {kind}{records} deleted\n")
}
