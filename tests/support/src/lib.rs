//! What llamay's integration tests (`tests/it`) and benches (`benches/`) share, so that none
//! carries its own copy: the binary under test and the processes it runs as ([`process`],
//! [`daemon`]), small JSON requests ([`http`]), a local registry speaking Ollama's protocol
//! ([`registry`]), and the fixtures several of them judge or measure with
//! ([`decimal_validation`], [`json_pointers`], [`cpu_timing`], [`vocabularies`], [`extraction`]).
//!
//! A crate of its own that does not depend on llamay: it builds once, and touching llamay's
//! sources relinks only the test and bench binaries. Environment variables are read here
//! (test and bench knobs), never in llamay's library.
//!
//! The llamay binary is found beside the running test or bench executable, as cargo lays them
//! out ([`process::llamay_binary`]); cargo builds it for every test and bench target.

pub mod cpu_timing;
pub mod daemon;
pub mod decimal_validation;
pub mod extraction;
pub mod http;
pub mod json_pointers;
pub mod process;
pub mod registry;
pub mod vocabularies;
