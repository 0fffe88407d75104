//! The results file of `llamay eval`: one JSON line per answered item, appended as each item
//! ends, and read back on the next run to skip what is answered.
//!
//! A line goes out in one `write` on a file opened for appending, so a killed run leaves whole
//! lines, or at worst one cut-off last line (no newline yet); [`ResultsFile::open`] cuts that
//! line off and the item runs again. A bad line anywhere else is an error naming its number:
//! the file is not eval's to repair.
//!
//! Key type: [`ResultsFile`]. Cost: reading the file once at start; one write per item.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::items::id_key;
use crate::cli::CliError;

/// The open results file.
pub struct ResultsFile {
    path: PathBuf,
    file: File,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |source| CliError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The ids of the lines of `text` (each a result object with an `id`).
fn answered(path: &Path, text: &str) -> Result<HashSet<String>, CliError> {
    let mut ids = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let id = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|value| value.get("id").cloned())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "{}:{}: not a result line of llamay eval; fix or remove it, or write to another file",
                    path.display(),
                    index + 1
                ))
            })?;
        ids.insert(id_key(&id));
    }
    Ok(ids)
}

impl ResultsFile {
    /// Opens (creating) the results file for appending, after reading which items it answers.
    pub fn open(path: &Path) -> Result<(ResultsFile, HashSet<String>), CliError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(io(path)(error)),
        };
        // Whole lines end with a newline; what follows the last one is what a kill interrupted.
        let whole = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        let ids = answered(path, &String::from_utf8_lossy(&bytes[..whole]))?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        if whole < bytes.len() {
            file.set_len(whole as u64).map_err(io(path))?;
            eprintln!(
                "{}: dropped a cut-off last line; its item runs again",
                path.display()
            );
        }
        Ok((
            ResultsFile {
                path: path.to_path_buf(),
                file,
            },
            ids,
        ))
    }

    /// Appends one line (`line` holds no newline) in a single write.
    pub fn append(&mut self, line: &str) -> Result<(), CliError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.file.write_all(&bytes).map_err(io(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_last_line_is_dropped_and_its_item_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(
            &path,
            "{\"id\": 1, \"output\": \"a\"}\n{\"id\": \"x\", \"outp",
        )
        .unwrap();
        let (mut file, ids) = ResultsFile::open(&path).unwrap();
        assert_eq!(ids, ["1".to_string()].into_iter().collect());
        file.append("{\"id\": \"x\", \"output\": \"b\"}").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"id\": 1, \"output\": \"a\"}\n{\"id\": \"x\", \"output\": \"b\"}\n"
        );
        let (_, ids) = ResultsFile::open(&path).unwrap();
        assert_eq!(ids.len(), 2);
    }

    #[test]
    fn a_bad_whole_line_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"id\": 1}\ngarbage\n{\"id\": 2}\n").unwrap();
        let error = ResultsFile::open(&path).err().unwrap().to_string();
        assert!(error.contains("out.jsonl:2: not a result line"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"id\": 1}\ngarbage\n{\"id\": 2}\n"
        );
    }

    #[test]
    fn a_missing_file_is_created_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.jsonl");
        let (_, ids) = ResultsFile::open(&path).unwrap();
        assert!(ids.is_empty());
        assert!(path.exists());
    }
}
