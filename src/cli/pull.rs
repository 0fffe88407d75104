//! `llamay pull`, `llamay create` and `llamay prune`, with Ollama's progress shown as one
//! indicatif bar per layer (bytes, rate, ETA) and a line per step. With a daemon answering at
//! the configured address, pull and create go through its API (`client.rs`); without one they
//! write the store directly.
//!
//! Key types: [`ProgressView`] (turns progress objects into bars, whichever side produced them).

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use llamay::core::{ModelAdmin, PullProgress};
use llamay::pull::modelfile::parse_modelfile;
use llamay::pull::policy::InsecureRegistries;
use llamay::pull::reference::RegistrySettings;
use llamay::pull::service::StoreAdmin;
use llamay::store::Store;

use super::client::Daemon;
use super::CliError;

/// Bars for the layers of a pull, and a line for every other step.
pub struct ProgressView {
    multi: MultiProgress,
    bars: HashMap<String, ProgressBar>,
    spinner: Option<ProgressBar>,
    style: ProgressStyle,
    /// Without a terminal the bars draw nothing: each step is printed once instead.
    last_printed: Option<String>,
}

impl ProgressView {
    pub fn new() -> ProgressView {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template(
            "{prefix} {percent:>3}% ▕{wide_bar}▏ {bytes:>9}/{total_bytes:<9} {bytes_per_sec:>11} {eta:>4}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("██ ");
        ProgressView {
            multi,
            bars: HashMap::new(),
            spinner: None,
            style,
            last_printed: None,
        }
    }

    fn finish_spinner(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish();
        }
    }

    pub fn update(&mut self, progress: &PullProgress) {
        if self.multi.is_hidden() {
            if self.last_printed.as_deref() != Some(progress.status.as_str()) {
                eprintln!("{}", progress.status);
                self.last_printed = Some(progress.status.clone());
            }
            return;
        }
        match (&progress.digest, progress.total) {
            (Some(digest), Some(total)) => {
                self.finish_spinner();
                let bar = self.bars.entry(digest.clone()).or_insert_with(|| {
                    let bar = self.multi.add(ProgressBar::new(total));
                    bar.set_style(self.style.clone());
                    bar.set_prefix(progress.status.clone());
                    bar
                });
                let completed = progress.completed.unwrap_or(0).min(total);
                bar.set_position(completed);
                if completed >= total {
                    bar.finish();
                }
            }
            _ => {
                self.finish_spinner();
                let spinner = self.multi.add(ProgressBar::new_spinner());
                spinner.set_message(progress.status.clone());
                spinner.enable_steady_tick(Duration::from_millis(120));
                self.spinner = Some(spinner);
            }
        }
    }

    pub fn finish(mut self) {
        self.finish_spinner();
        for bar in self.bars.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

/// The store, written directly: this command is the operator, so its `-insecure` allows plain
/// http to any registry.
fn direct_admin(insecure: bool) -> Result<StoreAdmin, CliError> {
    let store = Store::open(&Store::default_home())?;
    let mut settings = RegistrySettings::from_env();
    if insecure {
        settings.insecure = InsecureRegistries::any();
    }
    Ok(StoreAdmin::new(std::sync::Arc::new(store), settings))
}

pub fn pull(model: &str, insecure: bool) -> Result<ExitCode, CliError> {
    let mut view = ProgressView::new();
    let result = match Daemon::find() {
        // The daemon decides which registries plain http may reach (its insecure_registries).
        Some(daemon) => daemon.pull(model, insecure, &mut |p| view.update(&p)),
        None => direct_admin(insecure)?
            .pull(model, &mut |p| {
                view.update(&p);
                true
            })
            .map_err(|e| CliError::Model(e.message)),
    };
    view.finish();
    result.map(|()| ExitCode::SUCCESS)
}

pub fn create(name: &str, file: &Path) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(file).map_err(|source| CliError::Io {
        path: file.display().to_string(),
        source,
    })?;
    let mut request = parse_modelfile(name, &text)
        .map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
    // A relative FROM path is relative to the Modelfile, as in Ollama.
    let relative = file.parent().map(|dir| dir.join(&request.from));
    if let Some(path) = relative.filter(|p| p.is_file()) {
        request.from = path.display().to_string();
    }
    let mut view = ProgressView::new();
    let result = match Daemon::find() {
        Some(daemon) => daemon.create(&request, &mut |p| view.update(&p)),
        None => direct_admin(false)?
            .create(request, &mut |p| {
                view.update(&p);
                true
            })
            .map_err(|e| CliError::Model(e.message)),
    };
    view.finish();
    result.map(|()| ExitCode::SUCCESS)
}

pub fn prune() -> Result<ExitCode, CliError> {
    let store = Store::open(&Store::default_home())?;
    let freed = llamay::pull::prune(&store);
    println!(
        "deleted {} of partial downloads older than a day",
        llamay::store::human_size(freed)
    );
    Ok(ExitCode::SUCCESS)
}
