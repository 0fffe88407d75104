//! `llamay doctor [-repair]`: checks the model store and prints one line per problem and a
//! summary; with `-repair`, removes what no model references and says what it did and left.
//! Exit status 0 when the store is (or was made) consistent, 1 otherwise.
//!
//! Also owns [`HashBar`], the progress bar any command shows while a large blob is hashed.
//! Cost: reads every blob once (see `store/doctor.rs`).

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use llamay::store::{Progress, RepairAction, Store, StoreError};

use super::CliError;

/// Blobs smaller than this hash in well under a second: no bar.
const BAR_MIN_BYTES: u64 = 32 << 20;

/// A progress bar on stderr for each long hash; indicatif draws nothing when stderr is not a
/// terminal.
#[derive(Default)]
pub struct HashBar {
    bar: Mutex<Option<ProgressBar>>,
}

impl HashBar {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Progress for HashBar {
    fn begin(&self, label: &str, total_bytes: u64) {
        if total_bytes < BAR_MIN_BYTES {
            return;
        }
        let style = ProgressStyle::with_template(
            "{msg} {wide_bar} {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::new(total_bytes).with_style(style).with_message(label.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        *self.slot() = Some(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = self.slot().as_ref() {
            bar.inc(bytes);
        }
    }

    fn end(&self) {
        if let Some(bar) = self.slot().take() {
            bar.finish_and_clear();
        }
    }
}

pub fn doctor(repair: bool) -> Result<ExitCode, CliError> {
    let home = Store::default_home();
    let store = Store::open_for_check(&home)?;
    if repair && store.is_read_only() {
        return Err(CliError::Usage(format!(
            "-repair needs the store at {} to itself, and another llamay process (a running \
             `llamay serve`?) has it open; stop that process and run `llamay doctor -repair` again",
            home.display()
        )));
    }
    println!("checking the model store at {}", home.display());
    let report = store.check(&HashBar::default())?;
    for finding in &report.findings {
        println!("{:<17}{finding}", finding.label());
    }
    println!("{}", report.summary());
    if !repair {
        if !report.is_consistent() {
            println!(
                "`llamay doctor -repair` removes orphan blobs and temporary files and rewrites \
                 the snapshot; it never removes a model"
            );
        }
        return Ok(if report.is_consistent() { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if report.is_consistent() {
        return Ok(ExitCode::SUCCESS);
    }
    let outcome = store.repair(&report).map_err(|error| match error {
        StoreError::Locked { .. } => CliError::Usage(format!(
            "-repair needs the store at {} to itself; stop the other llamay process first",
            home.display()
        )),
        other => CliError::Store(other),
    })?;
    for action in &outcome.actions {
        println!("{action}");
    }
    let left = outcome.unrepaired();
    let repaired =
        outcome.actions.iter().filter(|a| !matches!(a, RepairAction::Kept { .. })).count();
    if left == 0 {
        println!("repaired {repaired} of {}: the store is consistent", report.findings.len());
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "repaired {repaired} of {}; {left} left as they are (see `not repaired` above)",
            report.findings.len()
        );
        Ok(ExitCode::FAILURE)
    }
}
