//! `llamay rpc-worker`: serves this machine's CPU to a `llamay serve -rpc` coordinator over
//! llama.cpp's RPC protocol, so a model too large for one machine runs across several.
//!
//! Key type: [`RpcWorkerArgs`]. Cost: the worker holds the layers a coordinator gives it and
//! computes them when asked; it blocks until killed.

use std::process::ExitCode;

use clap::Args;

use super::CliError;

#[derive(Debug, Args)]
pub struct RpcWorkerArgs {
    /// Listen address, IPV4:PORT (localhost allowed). Loopback only unless -allow-remote.
    #[arg(long = "addr", default_value = "127.0.0.1:50052")]
    addr: String,
    /// CPU threads for the layers this worker computes (default: half the logical CPUs).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Listen beyond this machine. The protocol has no authentication: trusted networks only.
    #[arg(long = "allow-remote")]
    allow_remote: bool,
    /// Taken out: ggml's RPC server tells coordinators this machine's real free memory, and
    /// llamay no longer patches ggml to say otherwise. Kept only to name the replacement.
    #[arg(long = "mem", hide = true)]
    mem: Option<u64>,
}

pub fn rpc_worker(args: RpcWorkerArgs) -> Result<ExitCode, CliError> {
    let listen = llamay::llm::rpc::worker_listen_address(&args.addr, args.allow_remote)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let threads = args.threads.unwrap_or_else(llamay::config::default_threads);
    if !(1..=1024).contains(&threads) {
        return Err(CliError::Usage(format!(
            "-t {threads} is not valid: expected 1 to 1024"
        )));
    }
    if let Some(mib) = args.mem {
        return Err(CliError::Usage(format!(
            "-mem {mib}: a worker no longer advertises a chosen amount of memory (coordinators \
             see its real free memory); weigh workers on the coordinator with `serve -split`"
        )));
    }
    let ip_is_loopback = listen
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().is_loopback())
        .unwrap_or(false);
    if !ip_is_loopback {
        eprintln!(
            "warning: llamay rpc-worker listens on {listen}: the RPC protocol has no authentication \
             and no encryption; anyone who reaches this port can run computations and read what \
             is sent. Run it only on a trusted network."
        );
    }
    eprintln!("llamay rpc-worker: serving this machine's CPU ({threads} threads) on {listen}");
    llamay::llm::rpc::serve_worker(&listen, threads)
        .map_err(|e| CliError::Model(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
