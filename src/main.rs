//! The `llamay` command line: `run`, `serve`, `import`, `list`, `show`, `rm`, `cp`,
//! `grammar check`, `schema check`, `doctor`.
//!
//! Flags are written llama.cpp-style with one dash (`-chat`, `-temp 0`); two dashes work too.
//! Every failure prints one clear line on stderr and exits 1.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = llamay::config::normalize_single_dash_flags(
        std::env::args_os().map(|a| a.to_string_lossy().into_owned()),
        llamay::config::SINGLE_DASH_LONG_FLAGS,
    );
    match cli::main(args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("llamay: {error}");
            ExitCode::FAILURE
        }
    }
}
