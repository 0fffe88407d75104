//! Pulls from a local registry speaking Ollama's protocol (tests/support/src/registry.rs), with the
//! real SmolLM2 GGUF from the store as the model layer, into scratch stores on disk: progress
//! steps, registration with the params/system/template/license layers, the errors a person
//! meets (404, 401, unknown schema, digest mismatch, a full disk), retries over cut connections
//! and 500s, resume after a cancel and after kill -9, concurrent pulls of one blob, names that
//! keep another registry's host and never replace a model from elsewhere, plain http and
//! redirects only where the operator allows, and errors that say the same for a closed port as
//! for an open one that is not a registry.
//!
//! Needs smollm2:135m in the store ($LLAMAY_HOME, else ~/.llamay).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llamay::core::PullProgress;
use llamay::error::ErrorCode;
use llamay::pull::policy::InsecureRegistries;
use llamay::pull::reference::RegistrySettings;
use llamay::pull::service::pull_error;
use llamay::pull::{pull, PullError};
use llamay::store::{ModelName, Store};
use llamay_test_support::process::llamay_command;
use llamay_test_support::registry::{
    Layer, TestRegistry, MEDIA_LICENSE, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_SYSTEM, MEDIA_TEMPLATE,
};

fn model_blob() -> PathBuf {
    let store = Store::open(&Store::default_home()).expect("open the model store");
    let manifest = store
        .resolve(&ModelName::parse("smollm2:135m").expect("name"))
        .expect("smollm2:135m is in the store (scripts/setup installs it)");
    store.blob_path(&manifest)
}

/// A registry serving `library/smollm2-local:latest` and the model layer it serves.
fn registry() -> (TestRegistry, Layer) {
    registry_with_system("You are terse.")
}

/// [`registry`], its model's system prompt `system`.
fn registry_with_system(system: &str) -> (TestRegistry, Layer) {
    let registry = TestRegistry::start().expect("start the registry");
    let model = Layer::file(MEDIA_MODEL, model_blob()).expect("hash the model blob");
    registry.publish(
        "library",
        "smollm2-local",
        "latest",
        vec![
            model.clone(),
            Layer::bytes(MEDIA_TEMPLATE, "{{ .Prompt }}"),
            Layer::bytes(MEDIA_SYSTEM, system),
            Layer::bytes(MEDIA_PARAMS, r#"{"stop":["<|im_end|>"],"temperature":0.2}"#),
            Layer::bytes(MEDIA_LICENSE, "Apache License 2.0"),
        ],
    );
    (registry, model)
}

/// The registry as the default one, configured with its `http://` URL (the operator's choice),
/// and no other registry allowed plain http.
fn settings(registry: &TestRegistry) -> RegistrySettings {
    RegistrySettings {
        default_registry: registry.url(),
        insecure: InsecureRegistries::none(),
    }
}

/// Plain http allowed to `hosts` too, as `insecure_registries` would.
fn allowing(registry: &TestRegistry, hosts: &[String]) -> RegistrySettings {
    RegistrySettings {
        insecure: InsecureRegistries::listed(hosts),
        ..settings(registry)
    }
}

fn scratch_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("scratch dir");
    let store = Store::open(dir.path()).expect("open a scratch store");
    (dir, store)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_pull_reports_ollamas_steps_and_registers_every_layer() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    let mut steps: Vec<PullProgress> = Vec::new();
    let report = pull(&store, "smollm2-local", &settings(&registry), &mut |p| {
        steps.push(p);
        true
    })
    .expect("pull");

    let statuses: Vec<&str> = steps.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses.first(), Some(&"pulling manifest"));
    assert_eq!(
        &statuses[statuses.len() - 3..],
        ["verifying sha256 digest", "writing manifest", "success"]
    );
    let short = &model.digest[7..19];
    let model_steps: Vec<&PullProgress> = steps
        .iter()
        .filter(|s| s.digest.as_deref() == Some(model.digest.as_str()))
        .collect();
    assert!(model_steps
        .iter()
        .all(|s| s.status == format!("pulling {short}") && s.total == Some(model.size)));
    assert_eq!(model_steps.first().and_then(|s| s.completed), Some(0));
    assert_eq!(
        model_steps.last().and_then(|s| s.completed),
        Some(model.size)
    );
    // The config blob and four small layers each report their own digest too.
    let digests: std::collections::HashSet<&str> =
        steps.iter().filter_map(|s| s.digest.as_deref()).collect();
    assert_eq!(digests.len(), 6, "{digests:?}");

    let manifest = &report.manifest;
    assert_eq!(manifest.name.to_string(), "smollm2-local:latest");
    assert_eq!(manifest.digest, model.digest);
    assert_eq!(manifest.facts.architecture, "llama");
    assert!(manifest.facts.parameter_count > 100_000_000);
    assert_eq!(manifest.extras.system.as_deref(), Some("You are terse."));
    assert_eq!(manifest.extras.template.as_deref(), Some("{{ .Prompt }}"));
    assert_eq!(
        manifest.extras.parameters["temperature"],
        serde_json::json!(0.2)
    );
    assert_eq!(
        manifest.extras.parameters["stop"],
        serde_json::json!(["<|im_end|>"])
    );
    assert_eq!(manifest.extras.license, ["Apache License 2.0"]);
    assert_eq!(report.fetched, model.size);
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        std::fs::metadata(store.blob_path(manifest))
            .expect("blob")
            .len(),
        model.size
    );
    // Nothing of the download is left behind but the lock.
    let leftovers: Vec<String> = files_in(&store.pull_dir())
        .into_iter()
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A second pull finds the blob in the store and fetches nothing.
    let sent = registry.blob_bytes_sent();
    let again = pull(
        &store,
        "smollm2-local:latest",
        &settings(&registry),
        &mut |_| true,
    )
    .expect("pull again");
    assert_eq!(again.fetched, 0);
    assert!(registry.blob_bytes_sent() - sent < 4096);
}

#[test]
fn registry_errors_name_the_model_and_leave_nothing() {
    let (registry, _) = registry();
    let (_dir, store) = scratch_store();
    let error = pull(
        &store,
        "smollm2-local:nope",
        &settings(&registry),
        &mut |_| true,
    )
    .unwrap_err();
    assert!(matches!(error, PullError::NotFound { .. }), "{error}");
    assert!(
        error.to_string().contains("library/smollm2-local:nope"),
        "{error}"
    );

    registry
        .faults()
        .missing_tags
        .lock()
        .unwrap()
        .insert("library/smollm2-local:latest".into());
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(
        error.to_string().contains("smollm2-local:latest")
            && error.to_string().contains("not found"),
        "{error}"
    );
    registry.faults().missing_tags.lock().unwrap().clear();

    registry
        .faults()
        .manifest_status
        .store(401, Ordering::Release);
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(
        matches!(error, PullError::Unauthorized { status: 401, .. }),
        "{error}"
    );
    registry
        .faults()
        .manifest_status
        .store(403, Ordering::Release);
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(error.to_string().contains("403"), "{error}");
    registry
        .faults()
        .manifest_status
        .store(0, Ordering::Release);

    *registry.faults().manifest_override.lock().unwrap() =
        Some(r#"{"schemaVersion":1,"fsLayers":[]}"#.into());
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(
        matches!(error, PullError::UnknownManifest { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("schemaVersion is 1"), "{error}");
    assert!(store.list().expect("list").is_empty());
}

#[test]
fn a_digest_mismatch_deletes_the_download_and_registers_nothing() {
    let (registry, model) = registry();
    let (dir, store) = scratch_store();
    registry
        .faults()
        .corrupt_blobs
        .lock()
        .unwrap()
        .insert(model.digest.clone());
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::DigestMismatch { .. }), "{error}");
    assert!(error.to_string().contains(&model.digest), "{error}");
    assert!(store.list().expect("list").is_empty());
    let partials: Vec<String> = files_in(&store.pull_dir())
        .into_iter()
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert!(partials.is_empty(), "{partials:?}");
    assert!(files_in(&dir.path().join("blobs")).is_empty());
}

#[test]
fn cut_connections_and_500s_are_retried_and_resumed_not_restarted() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    registry
        .faults()
        .errors_remaining
        .store(2, Ordering::Release);
    registry.faults().cuts_remaining.store(3, Ordering::Release);
    let report = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).expect("pull");
    assert_eq!(report.manifest.digest, model.digest);
    let sent = registry.blob_bytes_sent();
    assert!(
        sent < model.size * 12 / 10,
        "sent {sent} bytes for a {} byte blob",
        model.size
    );
    assert_eq!(registry.faults().cuts_remaining.load(Ordering::Acquire), 0);
    let ranged = registry
        .requests()
        .iter()
        .filter(|r| r.contains("bytes="))
        .count();
    assert!(ranged >= 3, "{:?}", registry.requests());
}

#[test]
fn a_cancelled_pull_resumes_from_its_partial() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    registry
        .faults()
        .slow_chunk_micros
        .store(20_000, Ordering::Release);
    let half = model.size / 2;
    let error = pull(&store, "smollm2-local", &settings(&registry), &mut |p| {
        !(p.digest.as_deref() == Some(model.digest.as_str()) && p.completed.unwrap_or(0) > half / 2)
    })
    .unwrap_err();
    assert!(matches!(error, PullError::Cancelled), "{error}");
    assert!(store.list().expect("list").is_empty());
    registry
        .faults()
        .slow_chunk_micros
        .store(0, Ordering::Release);
    let report =
        pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).expect("resume");
    assert!(
        report.fetched < model.size,
        "fetched {} of {}",
        report.fetched,
        model.size
    );
    let sent = registry.blob_bytes_sent();
    assert!(
        sent < model.size * 12 / 10,
        "sent {sent} bytes for a {} byte blob",
        model.size
    );
}

#[test]
fn concurrent_pulls_of_one_model_download_it_once() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    let store = Arc::new(store);
    registry
        .faults()
        .slow_chunk_micros
        .store(2_000, Ordering::Release);
    let settings = settings(&registry);
    let pulls: Vec<_> = (0..3)
        .map(|_| {
            let (store, settings) = (Arc::clone(&store), settings.clone());
            std::thread::spawn(move || pull(&store, "smollm2-local", &settings, &mut |_| true))
        })
        .collect();
    for handle in pulls {
        let report = handle.join().expect("thread").expect("pull");
        assert_eq!(report.manifest.digest, model.digest);
    }
    let sent = registry.blob_bytes_sent();
    assert!(
        sent < model.size * 12 / 10,
        "sent {sent} bytes for a {} byte blob",
        model.size
    );
    assert_eq!(store.list().expect("list").len(), 1);
}

#[test]
fn a_url_pull_checks_the_gguf_and_names_the_model_after_the_file() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    let url = format!("{}/files/SmolLM2-135M-Instruct.Q8_0.gguf", registry.url());
    let insecure = allowing(&registry, &[registry.host()]);
    let report = pull(&store, &url, &insecure, &mut |_| true).expect("pull a URL");
    assert_eq!(
        report.manifest.name.to_string(),
        "smollm2-135m-instruct.q8_0:latest"
    );
    assert_eq!(report.manifest.digest, model.digest);
    assert_eq!(report.manifest.extras.source.as_deref(), Some(url.as_str()));
    let missing = format!("{}/files/nothing.bin", registry.url());
    let error = pull(&store, &missing, &insecure, &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::NotFound { .. }), "{error}");
}

/// `llamay pull` killed with SIGKILL mid-download, then pulled again: the second pull resumes.
#[test]
fn kill_9_mid_pull_then_pull_again_resumes() {
    let (registry, model) = registry();
    let dir = tempfile::tempdir().expect("scratch dir");
    registry
        .faults()
        .slow_chunk_micros
        .store(20_000, Ordering::Release);
    let mut child = llamay_command()
        .args(["pull", "smollm2-local"])
        .env("LLAMAY_HOME", dir.path())
        .env("LLAMAY_REGISTRY", registry.url())
        .env("LLAMAY_ADDR", "127.0.0.1:1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start llamay pull");
    // Waits (bounded) until a good part of the blob is recorded as done.
    let state = dir
        .path()
        .join("tmp/pulls")
        .join(format!("sha256-{}.state", &model.digest[7..]));
    let started = Instant::now();
    let recorded = |path: &Path| -> u64 {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v["done"]
                    .as_array()
                    .map(|d| d.iter().filter_map(|x| x.as_u64()).sum())
            })
            .unwrap_or(0)
    };
    while recorded(&state) < model.size / 3 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let before = registry.blob_bytes_sent();
    assert!(
        before < model.size,
        "the pull finished before it was killed"
    );
    registry
        .faults()
        .slow_chunk_micros
        .store(0, Ordering::Release);
    let store = Store::open(dir.path()).expect("reopen the store");
    assert!(store.list().expect("list").is_empty());
    let report =
        pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).expect("pull again");
    assert!(
        report.fetched < model.size * 3 / 4,
        "fetched {} of {}",
        report.fetched,
        model.size
    );
    let sent = registry.blob_bytes_sent();
    assert!(
        sent < model.size * 12 / 10,
        "sent {sent} bytes for a {} byte blob",
        model.size
    );
}

#[test]
fn prune_deletes_partials_older_than_a_day_and_keeps_fresh_ones() {
    let (_dir, store) = scratch_store();
    let pulls = store.pull_dir();
    std::fs::create_dir_all(&pulls).expect("pull dir");
    let two_days_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
    for name in ["sha256-old.partial", "sha256-old.state"] {
        let file = std::fs::File::create(pulls.join(name)).expect("create");
        file.set_len(1000).expect("size");
        file.set_modified(two_days_ago).expect("age it");
    }
    std::fs::write(pulls.join("sha256-new.partial"), b"fresh").expect("create");
    let freed = llamay::pull::prune(&store);
    assert_eq!(freed, 2000);
    assert_eq!(files_in(&pulls), ["sha256-new.partial"]);
}

/// Settings whose default registry is one no test reaches, plain http allowed to `hosts`.
fn elsewhere_allowing(hosts: &[String]) -> RegistrySettings {
    RegistrySettings {
        default_registry: "https://registry.invalid".to_string(),
        insecure: InsecureRegistries::listed(hosts),
    }
}

#[test]
fn a_model_from_another_registry_keeps_its_host_and_replaces_nothing() {
    let (home, _) = registry();
    let (other, _) = registry_with_system("From the other registry.");
    let (_dir, store) = scratch_store();
    let local = pull(&store, "smollm2-local", &settings(&home), &mut |_| true).expect("pull");
    assert_eq!(local.manifest.name.to_string(), "smollm2-local:latest");
    let from_other = format!("{}/library/smollm2-local", other.host());
    let settings = allowing(&home, &[other.host()]);
    let pulled = pull(&store, &from_other, &settings, &mut |_| true).expect("pull elsewhere");
    assert_eq!(
        pulled.manifest.name.to_string(),
        format!("{}/library/smollm2-local:latest", other.host())
    );
    // Both stay, each what its registry served.
    let kept = store
        .resolve(&ModelName::parse("smollm2-local").unwrap())
        .expect("the local model is still there");
    assert_eq!(kept, local.manifest);
    assert_eq!(kept.extras.system.as_deref(), Some("You are terse."));
    let other_name = ModelName::parse(&format!("{}/Library/SmolLM2-Local:LATEST", other.host()))
        .unwrap();
    let theirs = store.resolve(&other_name).expect("the other registry's model");
    assert_eq!(theirs.extras.system.as_deref(), Some("From the other registry."));
    assert_eq!(store.list().expect("list").len(), 2);
    // Pulling again from where it came from updates it.
    pull(&store, &from_other, &settings, &mut |_| true).expect("pull it again");
}

#[test]
fn a_pull_never_replaces_a_model_from_another_source() {
    let (registry, _) = registry();
    let (_dir, store) = scratch_store();
    let name = ModelName::parse("smollm2-local").unwrap();
    let imported = store.import_file(&model_blob(), &name).expect("import");
    for source in [
        "smollm2-local".to_string(),
        format!("{}/files/smollm2-local.gguf", registry.url()),
    ] {
        let settings = allowing(&registry, &[registry.host()]);
        let error = pull(&store, &source, &settings, &mut |_| true).unwrap_err();
        assert!(matches!(error, PullError::WouldReplace { .. }), "{source}: {error}");
        let message = error.to_string();
        assert!(
            message.contains("smollm2-local:latest")
                && message.contains("imported or created here")
                && message.contains("llamay rm smollm2-local:latest"),
            "{message}"
        );
        assert_eq!(pull_error(error).status(), 409);
    }
    assert_eq!(store.resolve(&name).expect("untouched"), imported);
    assert_eq!(registry.blob_bytes_sent(), 0, "nothing was downloaded");
    // Once the caller removes it, the pull puts the registry's model there.
    store.remove(&name).expect("rm");
    let report = pull(&store, "smollm2-local", &settings(&registry), &mut |_| true).expect("pull");
    assert_eq!(
        report.manifest.extras.source,
        Some(format!("{}/library/smollm2-local:latest", registry.host()))
    );
}

#[test]
fn plain_http_reaches_only_the_registries_the_operator_lists() {
    let (registry, model) = registry();
    let (_dir, store) = scratch_store();
    let name = format!("{}/library/smollm2-local", registry.host());
    // Not listed: spoken to over https, which this plain-http registry cannot answer.
    let error = pull(&store, &name, &elsewhere_allowing(&[]), &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::Unreachable { .. }), "{error}");
    assert!(error.to_string().contains("insecure_registries"), "{error}");
    let url = format!("{}/files/smollm2-local.gguf", registry.url());
    let error = pull(&store, &url, &elsewhere_allowing(&[]), &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::InsecureRefused { .. }), "{error}");
    let refused = pull_error(error);
    assert_eq!(refused.code, ErrorCode::InvalidRequest);
    assert!(refused.message.contains("insecure_registries"), "{}", refused.message);
    assert!(store.list().expect("list").is_empty());
    assert_eq!(registry.blob_bytes_sent(), 0);
    // Listed (by host and port, or by host for any port), it is reached over http.
    for listed in [registry.host(), "127.0.0.1".to_string()] {
        let (_dir, store) = scratch_store();
        let report = pull(&store, &name, &elsewhere_allowing(&[listed]), &mut |_| true)
            .expect("pull from a listed registry");
        assert_eq!(report.manifest.digest, model.digest);
    }
}

#[test]
fn blob_redirects_go_only_where_the_operator_allows() {
    let (origin, model) = registry();
    let (cdn, _) = registry();
    *origin.faults().redirect_blobs_to.lock().unwrap() = Some(cdn.url());
    let (_dir, store) = scratch_store();
    let error = pull(&store, "smollm2-local", &settings(&origin), &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::RedirectRefused { .. }), "{error}");
    let message = error.to_string();
    assert!(!message.contains(&cdn.host()), "the location is the server's text: {message}");
    assert!(message.contains("https"), "{message}");
    assert!(cdn.requests().is_empty(), "{:?}", cdn.requests());
    assert!(store.list().expect("list").is_empty());
    // The operator allows the mirror: the blobs come from it.
    let settings = allowing(&origin, &[cdn.host()]);
    let report = pull(&store, "smollm2-local", &settings, &mut |_| true).expect("pull");
    assert_eq!(report.manifest.digest, model.digest);
    assert!(cdn.blob_bytes_sent() >= model.size);
    assert_eq!(origin.blob_bytes_sent(), 0);
}

#[test]
fn a_closed_port_and_an_open_one_that_is_no_registry_get_the_same_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let banner = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let banner_addr = banner.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut stream in banner.incoming().flatten() {
            use std::io::Write;
            let _ = stream.write_all(b"SSH-2.0-SECRET-banner\r\n");
        }
    });
    let (web, _) = registry();
    *web.faults().manifest_override.lock().unwrap() =
        Some("<html><title>SECRET admin page</title></html>".into());
    let hosts = [closed.to_string(), banner_addr.to_string(), web.host()];
    let pulls: Vec<_> = hosts
        .iter()
        .map(|host| {
            let settings = RegistrySettings {
                default_registry: format!("http://{host}"),
                insecure: InsecureRegistries::none(),
            };
            let host = host.clone();
            std::thread::spawn(move || {
                let (_dir, store) = scratch_store();
                let error = pull(&store, "smollm2-local", &settings, &mut |_| true).unwrap_err();
                assert!(matches!(error, PullError::Unreachable { .. }), "{host}: {error}");
                assert!(store.list().expect("list").is_empty());
                error.to_string().replace(&host, "HOST")
            })
        })
        .collect();
    let messages: Vec<String> = pulls.into_iter().map(|p| p.join().expect("thread")).collect();
    assert!(messages.iter().all(|m| !m.contains("SECRET")), "{messages:?}");
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
    assert!(messages[0].contains("HOST is unreachable"), "{}", messages[0]);
}

#[test]
fn a_full_disk_answers_507_and_does_not_promise_a_resume() {
    let registry = TestRegistry::start().expect("start the registry");
    let model = Layer::file(MEDIA_MODEL, model_blob()).expect("hash the model blob");
    // A layer no disk here has room for: its space is reserved before a byte is fetched.
    let huge = Layer {
        size: 1 << 50,
        ..model
    };
    registry.publish("library", "huge", "latest", vec![huge]);
    let (_dir, store) = scratch_store();
    let error = pull(&store, "huge", &settings(&registry), &mut |_| true).unwrap_err();
    assert!(matches!(error, PullError::DiskFull { kept: false, .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("disk is full")
            && message.contains("nothing of the download is left")
            && !message.contains("resume"),
        "{message}"
    );
    let answer = pull_error(error);
    assert_eq!((answer.code, answer.status()), (ErrorCode::InsufficientStorage, 507));
    let leftovers: Vec<String> = files_in(&store.pull_dir())
        .into_iter()
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(store.list().expect("list").is_empty());
    assert!(registry.blob_bytes_sent() < 4096, "only the small config blob was fetched");
}
