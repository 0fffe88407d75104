//! Model references on the command line (a store name or a file path). The name rule itself
//! lives in `core::name`, shared with the HTTP API, where a model is only ever a name.
//!
//! Key types: [`ModelRef`], which decides whether a command-line model argument names a file or
//! a store entry, and [`ModelName`] (re-exported from core). Cost: string checks only, plus one
//! `stat` in [`ModelRef::parse`].

use std::fmt;
use std::path::PathBuf;

use super::StoreError;
pub use crate::core::name::{InvalidModelName, ModelName, DEFAULT_TAG, MAX_PART_LEN};

/// What a `-m MODEL` argument refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A GGUF file on disk, used in place.
    Path(PathBuf),
    /// A model in the store.
    Name(ModelName),
}

impl ModelRef {
    /// A string that looks like a path (contains a separator, ends in `.gguf`, or starts with
    /// `.` or `~`) is a file, which must exist; anything else is a store name. A name with a
    /// namespace or host (`team/model`, `host:5000/team/model:tag`) contains `/` too: it is a
    /// name unless a file of that name exists.
    pub fn parse(input: &str) -> Result<Self, StoreError> {
        let surely_path = input.contains('\\')
            || input.to_ascii_lowercase().ends_with(".gguf")
            || input.starts_with(['.', '~', '/']);
        if !surely_path && !input.contains('/') {
            return Ok(ModelRef::Name(ModelName::parse(input)?));
        }
        let path = expand_home(input);
        if path.exists() {
            return Ok(ModelRef::Path(path));
        }
        match ModelName::parse(input) {
            Ok(name) if !surely_path => Ok(ModelRef::Name(name)),
            _ => Err(StoreError::MissingFile { path }),
        }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Path(path) => write!(f, "{}", path.display()),
            ModelRef::Name(name) => write!(f, "{name}"),
        }
    }
}

/// `~/x` means `$HOME/x` when the shell did not expand it (e.g. inside quotes).
fn expand_home(input: &str) -> PathBuf {
    match (input.strip_prefix("~/"), crate::environment::environment().user_home()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_refs_tell_files_from_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tiny.gguf");
        std::fs::write(&file, b"GGUF").expect("write");
        let as_path = file.to_str().expect("utf-8 path");
        assert_eq!(ModelRef::parse(as_path).expect("exists"), ModelRef::Path(file.clone()));
        assert_eq!(
            ModelRef::parse("smollm2:135m").expect("name"),
            ModelRef::Name(ModelName::parse("smollm2:135m").expect("valid"))
        );
        let missing = dir.path().join("missing.gguf");
        match ModelRef::parse(missing.to_str().expect("utf-8")) {
            Err(StoreError::MissingFile { path }) => assert_eq!(path, missing),
            other => panic!("expected MissingFile, got {other:?}"),
        }
        assert!(matches!(ModelRef::parse("nothere.gguf"), Err(StoreError::MissingFile { .. })));
        assert!(matches!(ModelRef::parse("./nothere"), Err(StoreError::MissingFile { .. })));
        assert!(matches!(ModelRef::parse("no/such/dir/x.y"), Err(StoreError::MissingFile { .. })));
        assert_eq!(
            ModelRef::parse("127.0.0.1:5000/library/SmolLM2:135m").expect("name"),
            ModelRef::Name(
                ModelName::parse("127.0.0.1:5000/library/smollm2:135m").expect("valid")
            )
        );
        assert!(matches!(ModelRef::parse("team/model"), Ok(ModelRef::Name(_))));
        assert!(matches!(ModelRef::parse("bad name"), Err(StoreError::InvalidName { .. })));
    }
}
