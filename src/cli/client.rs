//! The CLI as a client of a running daemon, as Ollama's CLI is: when a llamay daemon answers at
//! the configured address (`$LLAMAY_ADDR`, else the default `localhost:11435`), `pull`, `cp`,
//! `rm`, `list`, `show`, `ps`, `stop` and `create` go through its API, so they work while it
//! holds the store; without one they open the store directly.
//!
//! Key type: [`Daemon`]. Cost: one `/api/version` probe (300 ms connect timeout) per command.

use std::io::{BufRead, BufReader};
use std::process::ExitCode;
use std::time::Duration;

use llamay::core::{CreateModel, ModelName, PullProgress};
use llamay::store::{human_age, human_size, unix_now};
use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};

use super::CliError;

use llamay::environment::{ADDR_ENV, DEFAULT_ADDR};

/// A daemon that answered.
pub struct Daemon {
    base: String,
    client: Client,
}

fn http_error(error: reqwest::Error) -> CliError {
    CliError::Model(format!("the daemon did not answer: {error}"))
}

/// The `error` of an Ollama-shape error body, or the status.
fn failure(response: Response) -> CliError {
    let status = response.status();
    let text = response.text().unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            // Ollama's routes send {"error": "..."}, the /v1/ routes {"error": {"message": "..."}}.
            let error = v.get("error")?;
            error.as_str().or_else(|| error.get("message").and_then(Value::as_str)).map(str::to_string)
        })
        .unwrap_or_else(|| format!("the daemon answered {status}: {text}"));
    CliError::Model(message)
}

impl Daemon {
    /// The daemon at the configured address, if one answers.
    pub fn find() -> Option<Daemon> {
        let environment = llamay::environment::environment();
        let base = environment.daemon_base_url();
        // A daemon that requires a key gets the one `serve` reads from the environment.
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(value) = environment.api_key().and_then(|k| format!("Bearer {k}").parse().ok()) {
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let probe = Client::builder()
            .default_headers(headers.clone())
            .connect_timeout(Duration::from_millis(300))
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let answer = probe.get(format!("{base}/api/version")).send().ok()?;
        if !answer.status().is_success() {
            return None;
        }
        let client = Client::builder()
            .default_headers(headers)
            .timeout(None)
            .build()
            .ok()?;
        Some(Daemon { base, client })
    }

    fn post(&self, path: &str, body: &Value) -> Result<Response, CliError> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .map_err(http_error)?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(failure(response))
        }
    }

    fn get(&self, path: &str) -> Result<Value, CliError> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .map_err(http_error)?;
        if !response.status().is_success() {
            return Err(failure(response));
        }
        response.json().map_err(http_error)
    }

    /// One call to the daemon's API: its JSON answer, or its error message.
    pub(super) fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().map_err(http_error)?;
        if !response.status().is_success() {
            return Err(failure(response));
        }
        response.json().map_err(http_error)
    }

    /// Reads NDJSON progress until `success` or an `{"error"}` line.
    fn follow(response: Response, show: &mut dyn FnMut(PullProgress)) -> Result<(), CliError> {
        for line in BufReader::new(response).lines() {
            let line =
                line.map_err(|e| CliError::Model(format!("the daemon stopped answering: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&line)
                .map_err(|e| CliError::Model(format!("the daemon sent '{line}': {e}")))?;
            if let Some(error) = value.get("error").and_then(Value::as_str) {
                return Err(CliError::Model(error.to_string()));
            }
            show(PullProgress {
                status: value
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                digest: value
                    .get("digest")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                total: value.get("total").and_then(Value::as_u64),
                completed: value.get("completed").and_then(Value::as_u64),
            });
        }
        Ok(())
    }

    pub fn pull(
        &self,
        model: &str,
        insecure: bool,
        show: &mut dyn FnMut(PullProgress),
    ) -> Result<(), CliError> {
        let response = self.post(
            "/api/pull",
            &json!({"model": model, "insecure": insecure, "stream": true}),
        )?;
        Self::follow(response, show)
    }

    pub fn create(
        &self,
        request: &CreateModel,
        show: &mut dyn FnMut(PullProgress),
    ) -> Result<(), CliError> {
        if std::path::Path::new(&request.from).is_file() {
            return Err(CliError::Usage(format!(
                "FROM {} is a file, and the running daemon takes no file paths: `llamay import` it \
                 first (with the daemon stopped) or FROM a model name",
                request.from
            )));
        }
        let body = json!({
            "model": request.name,
            "from": request.from,
            "parameters": request.parameters,
            "system": request.system,
            "template": request.template,
            "license": request.license,
            "stream": true,
        });
        Self::follow(self.post("/api/create", &body)?, show)
    }

    pub fn copy(&self, from: &str, to: &str) -> Result<ExitCode, CliError> {
        self.post("/api/copy", &json!({"source": from, "destination": to}))?;
        println!("copied '{from}' to '{to}'");
        Ok(ExitCode::SUCCESS)
    }

    pub fn remove(&self, model: &str) -> Result<ExitCode, CliError> {
        let response = self
            .client
            .delete(format!("{}/api/delete", self.base))
            .json(&json!({"model": model}))
            .send()
            .map_err(http_error)?;
        if !response.status().is_success() {
            return Err(failure(response));
        }
        println!("deleted '{}'", ModelName::parse(model)?);
        Ok(ExitCode::SUCCESS)
    }

    pub fn list(&self) -> Result<ExitCode, CliError> {
        let tags = self.get("/api/tags")?;
        let now = unix_now();
        let models = tags["models"].as_array().cloned().unwrap_or_default();
        let rows = models.iter().map(|m| {
            let modified = m["modified_at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or(0, |t| t.timestamp().max(0) as u64);
            let [name, id, size] = model_cells(m);
            [name, id, size, human_age(modified, now)]
        });
        print!(
            "{}",
            table(["NAME", "ID", "SIZE", "MODIFIED"], rows.collect())
        );
        Ok(ExitCode::SUCCESS)
    }

    pub fn show(&self, model: &str) -> Result<ExitCode, CliError> {
        let shown: Value = self
            .post("/api/show", &json!({"model": model}))?
            .json()
            .map_err(http_error)?;
        let details = &shown["details"];
        println!("  name            {}", ModelName::parse(model)?);
        println!(
            "  architecture    {}",
            details["family"].as_str().unwrap_or_default()
        );
        println!(
            "  parameters      {}",
            details["parameter_size"].as_str().unwrap_or_default()
        );
        println!(
            "  quantization    {}",
            details["quantization_level"].as_str().unwrap_or_default()
        );
        for (label, key) in [
            ("parameters", "parameters"),
            ("system", "system"),
            ("license", "license"),
        ] {
            if let Some(text) = shown[key].as_str().filter(|t| !t.is_empty()) {
                println!(
                    "  {label:<15} {}",
                    text.replace('\n', "\n                  ")
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    pub fn ps(&self) -> Result<ExitCode, CliError> {
        let loaded = self.get("/api/ps")?;
        let now = chrono::Utc::now();
        let models = loaded["models"].as_array().cloned().unwrap_or_default();
        let rows = models.iter().map(|m| {
            let until = m["expires_at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc));
            let expires = match until {
                Some(t) if t.timestamp() > now.timestamp() + 100 * 365 * 24 * 3600 => {
                    "Forever".to_string()
                }
                Some(t) if t > now => format!(
                    "{} from now",
                    human_duration((t - now).num_seconds().max(0) as u64)
                ),
                Some(_) => "Stopping...".to_string(),
                None => String::new(),
            };
            let [name, id, size] = model_cells(m);
            [
                name,
                id,
                size,
                "100% CPU".to_string(),
                m["context_length"]
                    .as_u64()
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                expires,
            ]
        });
        print!(
            "{}",
            table(
                ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"],
                rows.collect()
            )
        );
        Ok(ExitCode::SUCCESS)
    }

    /// Unloads `model` now (keep_alive 0), as `ollama stop` does; an error when it is not loaded.
    pub fn stop(&self, model: &str) -> Result<ExitCode, CliError> {
        let wanted = ModelName::parse(model)?;
        let loaded = self.get("/api/ps")?;
        let running = loaded["models"].as_array().is_some_and(|all| {
            all.iter().any(|m| {
                m["name"].as_str().and_then(|name| ModelName::parse(name).ok())
                    == Some(wanted.clone())
            })
        });
        if !running {
            return Err(CliError::Model(format!("model '{model}' is not running")));
        }
        self.post("/api/generate", &json!({"model": model, "keep_alive": 0}))?;
        Ok(ExitCode::SUCCESS)
    }
}

fn human_duration(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s} seconds"),
        s if s < 3600 => format!("{} minutes", s / 60),
        s => format!("{} hours", s / 3600),
    }
}

/// Left-aligned columns four spaces apart, as `llamay list` prints.
fn table<const N: usize>(header: [&str; N], rows: Vec<[String; N]>) -> String {
    let header = header.map(str::to_string);
    let mut widths = header.clone().map(|cell| cell.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 4));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `llamay ps` without a daemon: nothing is loaded anywhere.
pub fn no_daemon(command: &str) -> Result<ExitCode, CliError> {
    Err(CliError::Model(format!(
        "no llamay daemon answers at ${ADDR_ENV} (default {DEFAULT_ADDR}); `llamay {command}` \
         asks a running `llamay serve`"
    )))
}

/// The NAME, ID (the digest's first 12 characters) and SIZE cells `list` and `ps` share.
fn model_cells(model: &serde_json::Value) -> [String; 3] {
    [
        model["name"].as_str().unwrap_or_default().to_string(),
        model["digest"].as_str().unwrap_or_default().chars().take(12).collect(),
        human_size(model["size"].as_u64().unwrap_or(0)),
    ]
}
