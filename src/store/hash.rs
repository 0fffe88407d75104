//! Streaming SHA-256 of blobs, with progress for whoever waits on it.
//!
//! One loop serves both the import (hash while copying into a partial file) and `doctor`
//! (hash to verify a stored blob), so both report progress the same way through [`Progress`],
//! which the CLI implements with a progress bar and the library leaves silent ([`Silent`]).
//!
//! Key types: [`Progress`], [`Silent`], [`HashError`]. Cost: one pass over the bytes with a
//! 1 MiB buffer; SHA-256 runs at several hundred MB/s, so a 1 GB model takes seconds.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

const BUFFER: usize = 1 << 20;

/// Told about a long pass over a blob's bytes. Calls come from the thread doing the work.
pub trait Progress: Sync {
    /// A pass over `total_bytes` bytes begins; `label` says what it is (`verifying sha256-3a2f…`).
    fn begin(&self, label: &str, total_bytes: u64);
    /// `bytes` more bytes are done.
    fn advance(&self, bytes: u64);
    /// The pass is over (finished or failed).
    fn end(&self);
}

/// Progress nobody watches.
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _label: &str, _total_bytes: u64) {}
    fn advance(&self, _bytes: u64) {}
    fn end(&self) {}
}

/// Which side of a hashing copy failed.
#[derive(Debug)]
pub enum HashError {
    Read(io::Error),
    Write(io::Error),
}

/// Hashes everything `source` yields, writing it to `sink` as well; returns the lowercase hex
/// SHA-256 and the byte count. `progress` hears one `begin`, the advances and one `end`.
pub fn hash_copy(
    source: &mut dyn Read,
    sink: &mut dyn Write,
    label: &str,
    expected_bytes: u64,
    progress: &dyn Progress,
) -> Result<(String, u64), HashError> {
    progress.begin(label, expected_bytes);
    let result = hash_loop(source, sink, progress);
    progress.end();
    result
}

fn hash_loop(
    source: &mut dyn Read,
    sink: &mut dyn Write,
    progress: &dyn Progress,
) -> Result<(String, u64), HashError> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; BUFFER];
    let mut size = 0u64;
    loop {
        let read = match source.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HashError::Read(e)),
        };
        let chunk = buffer.get(..read).unwrap_or_default();
        hasher.update(chunk);
        sink.write_all(chunk).map_err(HashError::Write)?;
        size += read as u64;
        progress.advance(read as u64);
    }
    Ok((hex::encode(hasher.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Progress for Recorder {
        fn begin(&self, label: &str, total_bytes: u64) {
            self.0.lock().expect("lock").push(format!("begin {label} {total_bytes}"));
        }
        fn advance(&self, bytes: u64) {
            self.0.lock().expect("lock").push(format!("advance {bytes}"));
        }
        fn end(&self) {
            self.0.lock().expect("lock").push("end".into());
        }
    }

    #[test]
    fn hashes_copies_and_reports_every_byte() {
        let data = vec![7u8; BUFFER + 10];
        let mut copy = Vec::new();
        let recorder = Recorder::default();
        let (hex, size) =
            hash_copy(&mut data.as_slice(), &mut copy, "x", data.len() as u64, &recorder)
                .expect("hash");
        assert_eq!(hex, hex::encode(Sha256::digest(&data)));
        assert_eq!(size, data.len() as u64);
        assert_eq!(copy, data);
        let calls = recorder.0.lock().expect("lock").clone();
        assert_eq!(
            calls,
            [
                format!("begin x {}", BUFFER + 10),
                format!("advance {BUFFER}"),
                "advance 10".to_string(),
                "end".to_string()
            ]
        );
    }

    #[test]
    fn the_empty_input_has_the_empty_digest() {
        let (hex, size) =
            hash_copy(&mut io::empty(), &mut io::sink(), "e", 0, &Silent).expect("hash");
        assert_eq!(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(size, 0);
    }
}
