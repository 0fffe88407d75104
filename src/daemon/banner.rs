//! What `llamay serve` prints at start-up: the route table, the devices and where the model's
//! layers went, the models serving `-embed` and `-rerank`, and a warning for an address others
//! can reach without a key.
//!
//! Key items: [`route_table`], [`device_lines`], [`print_banner`]. Costs: none worth naming.

use std::net::SocketAddr;

use crate::actors::memory::human_binary;
use crate::actors::supervisor::SupervisorStatus;
use crate::config::Config;
use crate::core::ModelInfo;

/// Addresses other machines can reach, served without a key, get a warning at start-up.
pub(super) fn warn_if_exposed(bound: &[SocketAddr], has_key: bool) {
    if has_key {
        return;
    }
    for addr in bound.iter().filter(|addr| !addr.ip().is_loopback()) {
        tracing::warn!(
            %addr,
            "listening beyond loopback without an API key: anyone who can reach this address can use the models; set LLAMAY_API_KEY (or -api-key)"
        );
    }
}

/// `1.59 GB`, as the banner prints a model's size.
pub fn human_bytes(bytes: u64) -> String {
    let bytes = bytes as f64;
    if bytes >= 1e9 {
        format!("{:.2} GB", bytes / 1e9)
    } else if bytes >= 1e6 {
        format!("{:.0} MB", bytes / 1e6)
    } else {
        format!("{:.0} KB", bytes / 1e3)
    }
}

pub fn route_table(base: &str) -> String {
    route_table_with(base, None, None)
}

/// The route table, naming the models `-embed` and `-rerank` gave (or how to give them).
pub fn route_table_with(base: &str, embed: Option<&str>, rerank: Option<&str>) -> String {
    let embed_note = match embed {
        Some(name) => format!("({name}; and /api/embed)"),
        None => "(start with -embed <encoder.gguf>)".to_string(),
    };
    let rerank_note = match rerank {
        Some(name) => format!("({name}; and /v1/rerank)"),
        None => "(start with -rerank <reranker.gguf>)".to_string(),
    };
    let routes = [
        ("OpenAI", "POST", "/v1/chat/completions", ""),
        ("Responses", "POST", "/v1/responses", "(stored: GET, DELETE /v1/responses/{id})"),
        ("Anthropic", "POST", "/v1/messages", ""),
        ("Embeddings", "POST", "/v1/embeddings", embed_note.as_str()),
        ("Rerank", "POST", "/rerank", rerank_note.as_str()),
        ("Ollama", "POST", "/api/chat", "(and /api/generate)"),
        ("Contexts", "POST", "/v1/contexts", "(then /{id}/fork?n=8, /{id}/snapshot)"),
        (
            "Models",
            "GET",
            "/api/tags",
            "(and /api/ps, /api/show, /v1/models)",
        ),
        (
            "Models",
            "POST",
            "/api/pull",
            "(and /api/copy, /api/create, DELETE /api/delete)",
        ),
        ("Stats", "GET", "/v1/stats", ""),
        ("Health", "GET", "/health", ""),
        ("Metrics", "GET", "/metrics", "(Prometheus text format)"),
    ];
    let mut table = String::from("\n");
    for (api, method, path, note) in routes {
        let url = format!("{base}{path}");
        let line = format!("  {api:<11} {method:<4} {url:<45} {note}");
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

/// `lexicons`: the lists `-lexicon` loaded (files, not entries).
pub(super) fn print_banner(config: &Config, model: Option<&ModelInfo>, bound: &[String], lexicons: usize) {
    let (name, arch, params, context) = match model {
        Some(info) => (
            info.name.as_str(),
            info.architecture.as_str(),
            human_bytes(info.size_bytes),
            info.context_length,
        ),
        None => ("", "", String::new(), config.context),
    };
    tracing::info!(
        addr = %config.addr,
        model = name,
        arch,
        "max-loaded" = config.max_loaded,
        keepalive = %config.keep_alive,
        params = %params,
        context,
        threads = config.threads,
        kv = %config.kv,
        lexicon = lexicons,
        flash_attn = if config.flash_attention { "on" } else { "off" },
        parallel = config.parallel,
        listening = %bound.join(","),
        "llamay serving"
    );
    println!(
        "{}",
        route_table_with(&format!("http://{}", config.addr), config.embed.as_deref(), config.rerank.as_deref())
    );
}

/// One line per GPU (backend, name, free and total memory, the layers each loaded model has
/// there), or one saying the daemon runs on the CPU only and why.
pub fn device_lines(status: &SupervisorStatus) -> Vec<String> {
    if status.devices.is_empty() {
        let backends = crate::llm::devices::compiled_backends();
        let why = if backends.is_empty() {
            "this build has no GPU backend; build with --features cuda, metal, vulkan or rocm".to_string()
        } else {
            format!("no {} device found", backends.join("/"))
        };
        return vec![format!("Devices: CPU only ({why})")];
    }
    let mut lines = Vec::new();
    for device in &status.devices {
        let gpu = &device.device;
        lines.push(format!(
            "Device {} ({}): {}, {} free of {}",
            gpu.name,
            gpu.backend,
            gpu.description,
            human_binary(gpu.free),
            human_binary(gpu.total)
        ));
        for model in &status.models {
            let Some(share) = model.memory.as_ref().and_then(|m| m.device.as_ref()).filter(|s| s.index == gpu.index) else {
                continue;
            };
            lines.push(format!(
                "  {}: {}/{} layers offloaded, {} on the device, {} on the host",
                model.info.name,
                share.layers,
                share.of_layers,
                human_binary(share.bytes),
                human_binary(model.memory.as_ref().map_or(0, |m| m.host_bytes))
            ));
        }
    }
    let on_cpu: Vec<&str> = status
        .models
        .iter()
        .filter(|model| model.memory.as_ref().is_some_and(|m| m.device.is_none()))
        .map(|model| model.info.name.as_str())
        .collect();
    if !on_cpu.is_empty() {
        lines.push(format!("  on the CPU only: {}", on_cpu.join(", ")));
    }
    lines
}

/// For a preloaded model split over RPC workers: what each device holds.
pub(super) fn print_placement(model: Option<&ModelInfo>, placement: &[crate::core::DevicePlacement]) {
    let (Some(model), false) = (model, placement.is_empty()) else {
        return;
    };
    println!("{} is split over the RPC workers:", model.name);
    for part in placement {
        println!(
            "  {:<24} layers {:<8} {} MiB",
            part.device,
            part.layers,
            part.bytes.div_ceil(1024 * 1024)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_pieces() {
        assert_eq!(human_bytes(1_590_000_000), "1.59 GB");
        assert_eq!(human_bytes(270_000_000), "270 MB");
        let table = route_table("http://localhost:11439");
        assert!(table.contains("  OpenAI      POST http://localhost:11439/v1/chat/completions\n"));
        assert!(table.contains("  Stats       GET  http://localhost:11439/v1/stats\n"));
        assert!(table.contains("  Responses   POST http://localhost:11439/v1/responses"));
        assert!(table.contains("  Contexts    POST http://localhost:11439/v1/contexts"));
        assert!(table.contains(
            "  Embeddings  POST http://localhost:11439/v1/embeddings          (start with -embed <encoder.gguf>)\n"
        ));
        let table = route_table_with("http://localhost:11439", Some("all-minilm:l6-v2"), Some("smollm2:135m"));
        assert!(table.contains("  Embeddings  POST http://localhost:11439/v1/embeddings          (all-minilm:l6-v2; and /api/embed)\n"));
        assert!(table.contains("  Rerank      POST http://localhost:11439/rerank                 (smollm2:135m; and /v1/rerank)\n"));
    }
}
