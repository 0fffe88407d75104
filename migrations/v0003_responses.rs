//! Store schema version 3: the `responses` tree (stored responses of `/v1/responses`, issue 61).
//!
//! Layout after this migration: sled tree `responses`, key the response id
//! (`resp_<16 hex digits of the creation time in microseconds><16 random hex digits>`, so the
//! tree's order is the order of creation and the oldest is first), value the JSON of a stored
//! response (its owner's key digest, the response object, its input items and the conversation
//! up to its answer). Opening a tree is idempotent, so running this twice is harmless.

use crate::{Migration, RESPONSES_TREE};

pub struct Responses;

impl Migration for Responses {
    fn version(&self) -> u64 {
        3
    }

    fn description(&self) -> &'static str {
        "create the responses tree"
    }

    fn apply(&self, db: &sled::Db) -> sled::Result<()> {
        db.open_tree(RESPONSES_TREE)?;
        Ok(())
    }
}
