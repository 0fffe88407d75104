//! Store commands (`import`, `list`, `show`, `rm`, `cp`) and `serve`, which wires the store
//! and the real model loader into the daemon.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use llamay::store::{render_list_table, ModelName, ModelRef, Store};

use super::CliError;

impl From<llamay::store::InvalidModelName> for CliError {
    fn from(error: llamay::store::InvalidModelName) -> Self {
        CliError::Store(error.into())
    }
}

fn open_store() -> Result<Store, CliError> {
    Ok(Store::open(&Store::default_home())?)
}

/// The store, when `reference` names a model in it (a path needs none).
pub fn open_store_if_needed(reference: &str) -> Result<Option<Arc<Store>>, CliError> {
    match ModelRef::parse(reference)? {
        ModelRef::Path(_) => Ok(None),
        ModelRef::Name(_) => Ok(Some(Arc::new(open_store()?))),
    }
}

pub fn import(file: &Path, name: &str) -> Result<ExitCode, CliError> {
    let name = ModelName::parse(name)?;
    let store = open_store()?;
    let converted = if file.is_dir() { Some(ConvertedFile::from_directory(file)?) } else { None };
    let source = converted.as_ref().map_or(file, |c| c.path.as_path());
    let manifest = store.import_file_with_progress(source, &name, &super::doctor::HashBar::default())?;
    drop(converted);
    println!("imported {} ({}, {} {} params, {})", manifest.name, manifest.short_id(),
        manifest.facts.architecture, manifest.facts.parameter_count, manifest.facts.quantization);
    Ok(ExitCode::SUCCESS)
}

pub fn list() -> Result<ExitCode, CliError> {
    let store = open_store()?;
    print!("{}", render_list_table(&store.list()?, chrono::Utc::now()));
    Ok(ExitCode::SUCCESS)
}

pub fn show(name: &str) -> Result<ExitCode, CliError> {
    let store = open_store()?;
    let manifest = store.resolve(&ModelName::parse(name)?)?;
    let facts = &manifest.facts;
    println!("  name            {}", manifest.name);
    println!("  id              {}", manifest.short_id());
    println!("  digest          {}", manifest.digest);
    println!("  size            {} bytes", manifest.size);
    println!("  architecture    {}", facts.architecture);
    println!("  parameters      {}", facts.parameter_count);
    println!("  quantization    {}", facts.quantization);
    match facts.context_length {
        Some(length) => println!("  context length  {length}"),
        None => println!("  context length  unknown"),
    }
    println!("  chat template   {}", if facts.has_chat_template { "yes" } else { "no (fallback)" });
    let extras = &manifest.extras;
    let indent = |text: &str| text.trim_end().replace('\n', "\n                  ");
    if let Some(source) = &extras.source {
        println!("  pulled from     {source}");
    }
    for (key, value) in &extras.parameters {
        println!("  parameter       {key} {value}");
    }
    if let Some(system) = &extras.system {
        println!("  system          {}", indent(system));
    }
    if let Some(template) = &extras.template {
        println!("  template        {} (shown, not used: the GGUF's template renders prompts)", indent(template));
    }
    for license in &extras.license {
        println!("  license         {}", indent(license.lines().next().unwrap_or_default()));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn remove(name: &str) -> Result<ExitCode, CliError> {
    let name = ModelName::parse(name)?;
    open_store()?.remove(&name)?;
    println!("deleted '{name}'");
    Ok(ExitCode::SUCCESS)
}

pub fn copy(from: &str, to: &str) -> Result<ExitCode, CliError> {
    let (from, to) = (ModelName::parse(from)?, ModelName::parse(to)?);
    open_store()?.copy(&from, &to)?;
    println!("copied '{from}' to '{to}'");
    Ok(ExitCode::SUCCESS)
}

pub fn serve(args: llamay::config::ServeArgs) -> Result<ExitCode, CliError> {
    let config = llamay::config::Config::load(args).map_err(|e| CliError::Usage(e.to_string()))?;
    super::init_logging(config.log_format == llamay::config::LogFormat::Json);
    let store = Arc::new(open_store()?);
    llamay::daemon::serve_store(config, store).map_err(|e| CliError::Model(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

/// A GGUF converted from a Hugging Face directory into the temporary directory, removed when
/// dropped (the store keeps its own copy).
struct ConvertedFile {
    path: std::path::PathBuf,
}

impl ConvertedFile {
    fn from_directory(dir: &Path) -> Result<Self, CliError> {
        let path = std::env::temp_dir().join(format!("llamay-import-{}.gguf", std::process::id()));
        let converted = ConvertedFile { path };
        let summary = llamay::gguf::convert::convert_directory(dir, &converted.path)
            .map_err(|e| CliError::Model(format!("cannot import {}: {e}", dir.display())))?;
        println!(
            "converted {} ({}, {} layers, {} dimensions, {} tokens, {} pooling{}, {} tensors)",
            dir.display(),
            summary.architecture,
            summary.layers,
            summary.embedding_length,
            summary.vocabulary,
            summary.pooling,
            if summary.normalize { ", normalized" } else { "" },
            summary.tensors
        );
        Ok(converted)
    }
}

impl Drop for ConvertedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
