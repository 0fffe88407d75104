//! llamay's integration tests in one binary, a module per subject: every test binary links
//! llama.cpp, so one binary links it once. They run the real binary, the real models from the
//! store (`$LLAMAY_HOME`, filled by scripts/setup) and real stores on disk; what they share with
//! each other and with the benches (daemons, requests, fixtures) is the `llamay-test-support`
//! crate in tests/support. The modules share one process: none sets environment variables or
//! counts the process's threads, files or memory.
//!
//! All: `cargo test --release --test it`; one subject: `cargo test --release --test it rpc::`.

mod accelerate;
mod architecture;
mod bounded_queues;
mod budget_close;
mod cli_run;
mod constrained_generation;
mod constrained_greedy_reference;
mod context_snapshots;
mod daemon_guards;
mod deep_schemas;
mod embed_actor;
mod embed_real;
mod embed_routes;
mod eval;
mod http_fuzz;
mod in_process;
mod json_schema_suite;
mod lexicons;
mod llm_real;
mod mask_exactness_real;
mod metrics;
mod model_files;
mod offload_estimate;
mod prefix_reuse;
mod pull;
mod readme;
mod rpc;
mod scoring;
mod store_crash;
