//! Supervisor behaviour with a fake loader: loading on demand, eviction, keepalive, refcounts,
//! the bounded queue, one load at a time, shutdown, one copy per model however it is spelled,
//! and retiring a deleted model.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::*;

#[derive(Default)]
struct Journal {
    events: Mutex<Vec<String>>,
    loads_running: AtomicUsize,
    most_loads_at_once: AtomicUsize,
    /// Models loaded so far, and how many of the first ones are lost (their runner ended).
    loads_done: AtomicUsize,
    lost_below: AtomicUsize,
    /// Names whose store entry is gone: loading them answers "not found", as the store does.
    deleted: Mutex<HashSet<String>>,
}

impl Journal {
    fn record(&self, event: String) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event);
        }
    }
    fn events(&self) -> Vec<String> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
    fn delete(&self, name: &str) {
        if let Ok(mut deleted) = self.deleted.lock() {
            deleted.insert(name.to_string());
        }
    }
    fn is_deleted(&self, name: &str) -> bool {
        self.deleted.lock().is_ok_and(|d| d.contains(name))
    }
}

struct FakeModel {
    info: ModelInfo,
    journal: Arc<Journal>,
    load_index: usize,
}

impl LoadedModel for FakeModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn sequences_in_use(&self) -> usize {
        0
    }
    fn totals(&self) -> ModelTotals {
        ModelTotals::default()
    }
    fn is_lost(&self) -> bool {
        self.load_index < self.journal.lost_below.load(Ordering::SeqCst)
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.journal.record(format!("unload {}", self.info.name));
    }
}

struct FakeLoader {
    journal: Arc<Journal>,
    delay: Duration,
}

impl ModelLoader for FakeLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn LoadedModel>, CoreError> {
        let running = self.journal.loads_running.fetch_add(1, Ordering::SeqCst) + 1;
        self.journal
            .most_loads_at_once
            .fetch_max(running, Ordering::SeqCst);
        // Like the store, the entry is looked up first; the slow part comes after.
        let gone = name.starts_with("missing") || self.journal.is_deleted(name);
        std::thread::sleep(self.delay);
        self.journal.loads_running.fetch_sub(1, Ordering::SeqCst);
        if gone {
            return Err(CoreError::model_not_found(name));
        }
        self.journal.record(format!("load {name}"));
        let info = ModelInfo {
            name: name.to_string(),
            architecture: "fake".into(),
            parameter_count: 1,
            quantization: "F32".into(),
            context_length: 64,
            trained_context_length: 64,
            size_bytes: 1,
            digest: "sha256:00".into(),
            parallel: 1,
        };
        Ok(Arc::new(FakeModel {
            info,
            journal: self.journal.clone(),
            load_index: self.journal.loads_done.fetch_add(1, Ordering::SeqCst),
        }))
    }

    fn check_installed(&self, name: &str) -> Result<(), CoreError> {
        match self.journal.is_deleted(name) {
            true => Err(CoreError::model_not_found(name)),
            false => Ok(()),
        }
    }
}

fn start(
    max_loaded: usize,
    keep_alive: KeepAlive,
    max_queue: usize,
    delay_ms: u64,
) -> (Addr<Supervisor>, Arc<Journal>) {
    let journal = Arc::new(Journal::default());
    let loader = Arc::new(FakeLoader {
        journal: journal.clone(),
        delay: Duration::from_millis(delay_ms),
    });
    let config = SupervisorConfig {
        max_loaded,
        default_keep_alive: keep_alive,
        max_queue,
    };
    (Supervisor::new(loader, config).start(), journal)
}

async fn acquire(
    addr: &Addr<Supervisor>,
    name: &str,
    keep_alive: Option<KeepAlive>,
) -> Result<ModelLease, CoreError> {
    super::acquire(addr, name, keep_alive).await
}

async fn loaded_names(addr: &Addr<Supervisor>) -> Vec<String> {
    match addr.send(GetStatus).await {
        Ok(status) => status.models.into_iter().map(|m| m.info.name).collect(),
        Err(_) => vec!["<mailbox closed>".into()],
    }
}

async fn sleep_ms(ms: u64) {
    actix::clock::sleep(Duration::from_millis(ms)).await;
}

const LONG: KeepAlive = KeepAlive::For(Duration::from_secs(600));

#[actix::test]
async fn loads_once_and_shares_between_requests() {
    let (addr, journal) = start(2, LONG, 8, 0);
    let first = acquire(&addr, "a", None).await.unwrap();
    let second = acquire(&addr, "a", None).await.unwrap();
    assert!(Arc::ptr_eq(first.model(), second.model()));
    assert_eq!(journal.events(), vec!["load a:latest"]);
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!(status.models[0].requests_in_flight, 2);
}

#[actix::test]
async fn evicts_an_idle_model_when_full() {
    let (addr, journal) = start(1, LONG, 8, 0);
    drop(acquire(&addr, "a", None).await.unwrap());
    let _b = acquire(&addr, "b", None).await.unwrap();
    assert_eq!(journal.events(), vec!["load a:latest", "unload a:latest", "load b:latest"]);
    assert_eq!(loaded_names(&addr).await, vec!["b:latest"]);
}

#[actix::test]
async fn never_evicts_a_model_with_requests_in_flight() {
    let (addr, journal) = start(1, LONG, 8, 0);
    let a = acquire(&addr, "a", None).await.unwrap();
    let waiting = actix::spawn({
        let addr = addr.clone();
        async move {
            acquire(&addr, "b", None)
                .await
                .map(|lease| lease.model().info().name.clone())
        }
    });
    sleep_ms(50).await;
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!(status.queue_depth, 1);
    assert_eq!(journal.events(), vec!["load a:latest"]);
    drop(a);
    assert_eq!(waiting.await.unwrap().unwrap(), "b:latest");
    assert_eq!(journal.events(), vec!["load a:latest", "unload a:latest", "load b:latest"]);
}

#[actix::test]
async fn evicts_the_model_that_expires_soonest() {
    let (addr, journal) = start(2, LONG, 8, 0);
    drop(acquire(&addr, "long", None).await.unwrap());
    drop(
        acquire(
            &addr,
            "short",
            Some(KeepAlive::For(Duration::from_secs(60))),
        )
        .await
        .unwrap(),
    );
    drop(
        acquire(&addr, "forever", Some(KeepAlive::Forever))
            .await
            .unwrap(),
    );
    assert!(
        journal.events().contains(&"unload short:latest".to_string()),
        "{:?}",
        journal.events()
    );
    assert_eq!(loaded_names(&addr).await, vec!["forever:latest", "long:latest"]);
    drop(acquire(&addr, "c", None).await.unwrap());
    assert_eq!(
        loaded_names(&addr).await,
        vec!["c:latest", "forever:latest"],
        "a model kept forever is evicted last"
    );
}

#[actix::test]
async fn keepalive_expires_only_after_the_last_request() {
    // Margins are wide so a busy machine's late timers cannot flip the outcome.
    let (addr, _journal) = start(2, KeepAlive::For(Duration::from_millis(600)), 8, 0);
    let lease = acquire(&addr, "a", None).await.unwrap();
    sleep_ms(900).await;
    assert_eq!(
        loaded_names(&addr).await,
        vec!["a:latest"],
        "no idle timer while in use"
    );
    drop(lease);
    sleep_ms(50).await;
    assert_eq!(loaded_names(&addr).await, vec!["a:latest"]);
    let status = addr.send(GetStatus).await.unwrap();
    assert!(status.models[0].expires_at.is_some());
    sleep_ms(1200).await;
    assert!(
        loaded_names(&addr).await.is_empty(),
        "expired after keepalive"
    );
}

#[actix::test]
async fn each_request_sets_the_keepalive_and_none_means_the_default() {
    let (addr, _journal) = start(2, LONG, 8, 0);
    drop(acquire(&addr, "a", Some(KeepAlive::Forever)).await.unwrap());
    assert_eq!(
        addr.send(GetStatus).await.unwrap().models[0].keep_alive,
        "-1"
    );
    drop(acquire(&addr, "a", None).await.unwrap());
    assert_eq!(
        addr.send(GetStatus).await.unwrap().models[0].keep_alive,
        "10m0s"
    );
}

#[actix::test]
async fn a_new_request_cancels_the_idle_timer() {
    let (addr, _journal) = start(2, KeepAlive::For(Duration::from_millis(600)), 8, 0);
    drop(acquire(&addr, "a", None).await.unwrap());
    sleep_ms(100).await;
    let lease = acquire(&addr, "a", None).await.unwrap();
    sleep_ms(1000).await;
    assert_eq!(loaded_names(&addr).await, vec!["a:latest"]);
    drop(lease);
}

#[actix::test]
async fn keep_alive_zero_unloads_when_the_request_ends_and_negative_never() {
    let (addr, journal) = start(2, KeepAlive::For(Duration::from_millis(100)), 8, 0);
    drop(
        acquire(&addr, "now", Some(KeepAlive::UnloadNow))
            .await
            .unwrap(),
    );
    assert!(!loaded_names(&addr).await.contains(&"now:latest".to_string()));
    drop(
        acquire(&addr, "kept", Some(KeepAlive::Forever))
            .await
            .unwrap(),
    );
    sleep_ms(300).await;
    assert_eq!(loaded_names(&addr).await, vec!["kept:latest"]);
    assert_eq!(
        journal.events(),
        vec!["load now:latest", "unload now:latest", "load kept:latest"]
    );
}

#[actix::test]
async fn a_full_queue_answers_overloaded() {
    let (addr, _journal) = start(1, LONG, 1, 0);
    let _a = acquire(&addr, "a", None).await.unwrap();
    let _waiting = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "b", None).await.map(|_| ()) }
    });
    sleep_ms(50).await;
    let refused = acquire(&addr, "c", None).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::Overloaded);
    assert_eq!(refused.status(), 503);
    // A request for the loaded model is not queued, so it still gets through.
    assert!(acquire(&addr, "a", None).await.is_ok());
}

#[actix::test]
async fn an_unknown_model_fails_its_waiters_and_nothing_else() {
    let (addr, _journal) = start(2, LONG, 8, 20);
    let missing = acquire(&addr, "missing-model", None);
    let present = acquire(&addr, "a", None);
    let (missing, present) = futures_util::join!(missing, present);
    assert_eq!(missing.unwrap_err().code, ErrorCode::ModelNotFound);
    assert_eq!(present.unwrap().model().info().name, "a:latest");
}

#[actix::test]
async fn loads_one_model_at_a_time() {
    let (addr, journal) = start(3, LONG, 8, 60);
    let (a, b, c) = futures_util::join!(
        acquire(&addr, "a", None),
        acquire(&addr, "b", None),
        acquire(&addr, "c", None)
    );
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
    assert_eq!(journal.most_loads_at_once.load(Ordering::SeqCst), 1);
    assert!(a.unwrap().load_duration() > Duration::ZERO);
}

#[actix::test]
async fn a_waiter_that_goes_away_leaves_the_queue() {
    let (addr, _journal) = start(1, LONG, 1, 0);
    let _a = acquire(&addr, "a", None).await.unwrap();
    let waiting = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "b", None).await.map(|_| ()) }
    });
    sleep_ms(30).await;
    waiting.abort();
    sleep_ms(30).await;
    // The queue holds one; the abandoned waiter no longer counts against it.
    let again = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "c", None).await.map(|_| ()) }
    });
    sleep_ms(30).await;
    assert!(!again.is_finished(), "c waits rather than being refused");
}

#[actix::test]
async fn shutdown_fails_waiters_unloads_idle_and_refuses_new_requests() {
    let (addr, journal) = start(1, LONG, 8, 0);
    let busy = acquire(&addr, "a", None).await.unwrap();
    let waiting = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "b", None).await.map(|_| ()) }
    });
    sleep_ms(30).await;
    assert_eq!(addr.send(Shutdown).await.unwrap(), 1, "a is still busy");
    assert_eq!(
        waiting.await.unwrap().unwrap_err().code,
        ErrorCode::ShuttingDown
    );
    assert_eq!(
        acquire(&addr, "a", None).await.unwrap_err().code,
        ErrorCode::ShuttingDown
    );
    drop(busy);
    assert!(loaded_names(&addr).await.is_empty());
    assert_eq!(journal.events(), vec!["load a:latest", "unload a:latest"]);
}

#[actix::test]
async fn a_lost_model_is_forgotten_and_the_next_request_loads_it_again() {
    let (addr, journal) = start(2, LONG, 8, 0);
    let held = acquire(&addr, "a", None).await.unwrap();
    // Its runner ends while a request still holds it.
    journal.lost_below.store(1, Ordering::SeqCst);
    let again = acquire(&addr, "a", None).await.unwrap();
    assert!(!Arc::ptr_eq(held.model(), again.model()));
    assert_eq!(journal.events(), vec!["load a:latest", "load a:latest"]);
    // The old lease's release does not touch the new model's count.
    drop(held);
    sleep_ms(20).await;
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!(status.models.len(), 1);
    assert_eq!(status.models[0].requests_in_flight, 1);
    assert_eq!(journal.events(), vec!["load a:latest", "load a:latest", "unload a:latest"]);
}

#[actix::test]
async fn every_spelling_of_a_model_shares_one_loaded_copy() {
    let (addr, journal) = start(1, LONG, 8, 0);
    let first = acquire(&addr, "m", None).await.unwrap();
    for spelling in ["m:latest", "M", "M:LATEST", "library/m", "registry.ollama.ai/library/M"] {
        let again = acquire(&addr, spelling, None).await.unwrap();
        assert!(Arc::ptr_eq(first.model(), again.model()), "{spelling}");
    }
    drop(first);
    // Alternating spellings with room for one model never reloads it.
    for spelling in ["m", "M:latest", "m", "M:LATEST"] {
        drop(acquire(&addr, spelling, None).await.unwrap());
    }
    assert_eq!(journal.events(), vec!["load m:latest"]);
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!(status.models.len(), 1);
    assert_eq!(status.models[0].info.name, "m:latest");
    assert_eq!(status.lifetime.evictions, 0);
}

fn name(text: &str) -> ModelName {
    ModelName::parse(text).unwrap()
}

#[actix::test]
async fn retiring_an_idle_model_unloads_it_and_loads_nothing() {
    let (addr, journal) = start(2, LONG, 8, 0);
    drop(acquire(&addr, "a", None).await.unwrap());
    drop(acquire(&addr, "other", None).await.unwrap());
    journal.delete("a:latest");
    assert!(addr.send(Retire { model: name("A:LATEST") }).await.unwrap());
    assert_eq!(loaded_names(&addr).await, vec!["other:latest"]);
    assert_eq!(
        journal.events(),
        vec!["load a:latest", "load other:latest", "unload a:latest"]
    );
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!((status.lifetime.deletions, status.lifetime.evictions), (1, 0));
    // Asked for again, it is not found: nothing serves it from memory.
    let refused = acquire(&addr, "a", None).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::ModelNotFound);
    assert!(!addr.send(Retire { model: name("a") }).await.unwrap(), "nothing left to retire");
}

#[actix::test]
async fn retiring_a_busy_model_lets_its_requests_finish_and_evicts_nothing() {
    let (addr, journal) = start(2, LONG, 8, 0);
    drop(acquire(&addr, "other", None).await.unwrap());
    let running = acquire(&addr, "a", None).await.unwrap();
    journal.delete("a:latest");
    assert!(addr.send(Retire { model: name("a") }).await.unwrap());
    // No longer listed nor granted, but the running request keeps its model.
    assert_eq!(loaded_names(&addr).await, vec!["other:latest"]);
    assert_eq!(
        acquire(&addr, "a:latest", None).await.unwrap_err().code,
        ErrorCode::ModelNotFound
    );
    assert_eq!(running.model().info().name, "a:latest");
    assert_eq!(journal.events(), vec!["load other:latest", "load a:latest"]);
    drop(running);
    sleep_ms(20).await;
    assert_eq!(
        journal.events(),
        vec!["load other:latest", "load a:latest", "unload a:latest"]
    );
    let status = addr.send(GetStatus).await.unwrap();
    assert_eq!((status.lifetime.deletions, status.lifetime.evictions), (1, 0));
    assert_eq!(loaded_names(&addr).await, vec!["other:latest"]);
}

#[actix::test]
async fn a_retiring_model_holds_its_place_until_its_requests_end() {
    let (addr, journal) = start(1, LONG, 8, 0);
    let running = acquire(&addr, "a", None).await.unwrap();
    journal.delete("a:latest");
    assert!(addr.send(Retire { model: name("a") }).await.unwrap());
    let waiting = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "b", None).await.map(|_| ()) }
    });
    sleep_ms(50).await;
    assert!(!waiting.is_finished(), "b waits: a still runs and max_loaded is 1");
    assert_eq!(addr.send(GetStatus).await.unwrap().queue_depth, 1);
    drop(running);
    assert!(waiting.await.unwrap().is_ok());
    assert_eq!(
        journal.events(),
        vec!["load a:latest", "unload a:latest", "load b:latest"]
    );
}

#[actix::test]
async fn a_model_deleted_while_it_loads_is_not_kept() {
    let (addr, journal) = start(2, LONG, 8, 100);
    let waiting = actix::spawn({
        let addr = addr.clone();
        async move { acquire(&addr, "a", None).await.map(|_| ()) }
    });
    sleep_ms(30).await;
    journal.delete("a:latest");
    assert!(addr.send(Retire { model: name("a") }).await.unwrap(), "its load was under way");
    let refused = waiting.await.unwrap().unwrap_err();
    assert_eq!(refused.code, ErrorCode::ModelNotFound);
    assert!(loaded_names(&addr).await.is_empty());
    // The copy that finished loading was thrown away, and the retry found nothing to load.
    assert_eq!(journal.events(), vec!["load a:latest", "unload a:latest"]);
}
