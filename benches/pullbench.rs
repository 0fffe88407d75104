//! Pull throughput against curl, in one run, from one local registry serving the real SmolLM2
//! GGUF from the store (`$LLAMAY_HOME`, model `$LLAMAY_BENCH_MODEL`, default smollm2:135m).
//!
//! For each round: `curl -o FILE` of the model blob (the anchor), then `llamay`'s pull of the
//! whole model into an empty store (manifest, small layers, the blob in parallel ranged parts,
//! sha256 while writing, registration). Prints a table with MB/s for both, the ratio (goal >=
//! 0.9x), and the CPU time spent hashing.
//!
//!   cargo bench --bench pullbench            3 rounds
//!   LLAMAY_BENCH_ROUNDS=5 cargo bench --bench pullbench

use std::process::Command;
use std::time::{Duration, Instant};

use llamay::pull::reference::RegistrySettings;
use llamay::store::{ModelName, Store};
use llamay_test_support::registry::{Layer, TestRegistry, MEDIA_MODEL, MEDIA_PARAMS};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let home = Store::default_home();
    let model = std::env::var("LLAMAY_BENCH_MODEL").unwrap_or_else(|_| "smollm2:135m".into());
    let rounds: usize = std::env::var("LLAMAY_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let store = Store::open(&home).expect("open the model store");
    let manifest = store
        .resolve(&ModelName::parse(&model).expect("model name"))
        .expect("the benchmark model is in the store");
    let blob_path = store.blob_path(&manifest);
    drop(store);

    let registry = TestRegistry::start().expect("start the registry");
    let model_layer = Layer::file(MEDIA_MODEL, blob_path).expect("read the blob");
    let params = Layer::bytes(MEDIA_PARAMS, br#"{"temperature":0.7}"#.to_vec());
    let blob_url = format!(
        "{}/v2/library/bench/blobs/{}",
        registry.url(),
        model_layer.digest
    );
    let size = model_layer.size;
    registry.publish("library", "bench", "latest", vec![model_layer, params]);
    let settings = RegistrySettings {
        default_registry: registry.url(),
        insecure: llamay::pull::policy::InsecureRegistries::none(),
    };

    let scratch = tempfile::tempdir().expect("scratch directory");
    let (mut curl_rates, mut pull_rates, mut hash_ms) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let target = scratch.path().join(format!("curl-{round}"));
        let started = Instant::now();
        let status = Command::new("curl")
            .args(["-s", "-f", "-o"])
            .arg(&target)
            .arg(&blob_url)
            .status()
            .expect("run curl");
        let curl_time = started.elapsed();
        assert!(status.success(), "curl failed");
        let _ = std::fs::remove_file(&target);

        let store_home = scratch.path().join(format!("store-{round}"));
        let store = Store::open(&store_home).expect("open a scratch store");
        let started = Instant::now();
        let report = llamay::pull::pull(&store, "bench", &settings, &mut |_| true).expect("pull");
        let pull_time = started.elapsed();
        drop(store);
        let _ = std::fs::remove_dir_all(&store_home);

        let rate = |time: Duration| size as f64 / 1e6 / time.as_secs_f64();
        curl_rates.push(rate(curl_time));
        pull_rates.push(rate(pull_time));
        hash_ms.push(report.hash_time.as_secs_f64() * 1e3);
        println!(
            "round {round}: curl {:.0} MB/s, llamay pull {:.0} MB/s, hashing {:.0} ms",
            rate(curl_time),
            rate(pull_time),
            report.hash_time.as_secs_f64() * 1e3
        );
    }
    let (curl, pull, hash) = (median(curl_rates), median(pull_rates), median(hash_ms));
    println!();
    println!(
        "pull of {model} ({:.1} MB) from a loopback registry, median of {rounds}",
        size as f64 / 1e6
    );
    println!("| what                        | value        |");
    println!("|-----------------------------|--------------|");
    println!("| curl (anchor)               | {curl:>7.0} MB/s |");
    println!("| llamay pull                 | {pull:>7.0} MB/s |");
    println!("| ratio pull / curl (>= 0.9)  | {:>10.2}x  |", pull / curl);
    println!("| sha256 CPU time             | {hash:>9.0} ms |");
    println!(
        "| sha256 rate                 | {:>7.0} MB/s |",
        size as f64 / 1e3 / hash.max(1e-3)
    );
}
