//! The messages a PostgreSQL client sends, told apart in its byte stream
//! (protocol 3): the untyped startup message first, then messages of a
//! type byte and a length. A relay counts them by type: `S` (Sync) ends
//! each round trip of the extended protocol, `E` (Execute) runs a
//! statement, `Q` is a simple query. A session without TLS (no
//! `SSLRequest`, which would come before the startup message).

use std::collections::HashMap;
use std::sync::Mutex;

/// How many messages of each type the sessions sent.
#[derive(Default)]
pub struct Sent(Mutex<HashMap<u8, u64>>);

impl Sent {
    pub fn of(&self, kind: u8) -> u64 {
        self.0.lock().unwrap().get(&kind).copied().unwrap_or(0)
    }

    fn count(&self, kind: u8) {
        *self.0.lock().unwrap().entry(kind).or_default() += 1;
    }
}

/// Where one session's stream is: in a message's head, or in its body.
#[derive(Default)]
pub struct Framing {
    /// The startup message is behind.
    started: bool,
    /// The head read so far: type and length, or the startup's length.
    head: Vec<u8>,
    /// Bytes of the current message's body still to come.
    body_left: usize,
}

impl Framing {
    /// Reads `bytes`, the next of the session's stream, counting each
    /// message whose head it completes in `sent`.
    pub fn feed(&mut self, mut bytes: &[u8], sent: &Sent) {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let head_len = if self.started { 5 } else { 4 };
            let n = (head_len - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.head.len() < head_len {
                return;
            }
            let length: [u8; 4] = self.head[head_len - 4..].try_into().unwrap();
            if self.started {
                sent.count(self.head[0]);
            }
            self.body_left = (u32::from_be_bytes(length) as usize).saturating_sub(4);
            self.started = true;
            self.head.clear();
        }
    }
}
