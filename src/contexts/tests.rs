//! The registry and parking lot on their own: forks, the memory bound, expiry, the count cap,
//! paging and the counts per residence.

use super::*;
use crate::core::KeepAlive;
use crate::error::ErrorCode;

#[test]
fn forks_share_tokens_and_outlive_their_parent() {
    let registry = ContextRegistry::new();
    let parent = registry.new_record(
        "m",
        ContextContent::Raw,
        Arc::new(vec![1, 2, 3]),
        None,
        None,
    );
    registry.insert(Arc::clone(&parent)).unwrap();
    let children = registry.fork(&parent, 3).unwrap();
    assert_eq!(children.len(), 3);
    registry.remove(&parent.id).unwrap();
    for child in &children {
        let found = registry.get(&child.id).unwrap();
        assert_eq!(*found.tokens(), vec![1, 2, 3]);
        assert_eq!(found.parent.as_deref(), Some(parent.id.as_str()));
    }
    assert_eq!(
        registry.get(&parent.id).unwrap_err().code,
        ErrorCode::ContextNotFound
    );
}

#[test]
fn parked_state_past_the_memory_bound_goes_to_disk_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    let registry = ContextRegistry::new();
    registry.set_memory_limit(2500);
    let records: Vec<_> = (0..3)
        .map(|i| {
            let record =
                registry.new_record("m", ContextContent::Raw, Arc::new(vec![i]), None, None);
            registry.insert(Arc::clone(&record)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            record
        })
        .collect();
    // Without a spill directory the oldest state is dropped.
    records[0].park(Arc::new(vec![0; 1000]), 1);
    records[1].park(Arc::new(vec![1; 1000]), 1);
    records[0].touch();
    records[2].park(Arc::new(vec![2; 1000]), 1);
    assert_eq!(records[1].residence(), Residence::Cold, "least recently used");
    assert!(records[1].parked_state().is_none());
    assert_eq!(registry.parking().used(), 2000);

    registry.set_spill_dir(dir.path().join("parked")).unwrap();
    records[1].touch();
    records[1].park(Arc::new(vec![1; 1000]), 1);
    assert_eq!(records[2].residence(), Residence::Stored);
    assert_eq!(registry.parking().used(), 2000);
    assert_eq!(*records[2].parked_state().unwrap().bytes, vec![2; 1000]);
    let file = dir.path().join("parked").join(format!("{}.kv", records[2].id));
    assert!(file.exists());
    for record in &records {
        registry.remove(&record.id).unwrap();
    }
    drop(records);
    assert!(!file.exists(), "a deleted context's file goes with it");
    assert_eq!(registry.parking().used(), 0);
}

#[test]
fn ids_carry_the_daemon_id() {
    let registry = ContextRegistry::new();
    registry.set_daemon_id("replica7");
    let record = registry.new_record("m", ContextContent::Raw, Arc::new(vec![]), None, None);
    assert!(record.id.starts_with("ctx_replica7_"), "{}", record.id);
}

#[test]
fn fork_counts_outside_one_to_sixty_four_are_refused() {
    let registry = ContextRegistry::new();
    let parent = registry.new_record("m", ContextContent::Raw, Arc::new(vec![1]), None, None);
    assert_eq!(registry.fork(&parent, 0).unwrap_err().status(), 400);
    assert_eq!(registry.fork(&parent, 65).unwrap_err().status(), 400);
    assert_eq!(registry.fork(&parent, 64).unwrap().len(), 64);
}

#[test]
fn one_commit_at_a_time_and_zero_keep_alive_expires() {
    let registry = ContextRegistry::new();
    let record = registry.new_record(
        "m",
        ContextContent::Raw,
        Arc::new(vec![]),
        Some(KeepAlive::UnloadNow),
        None,
    );
    registry.insert(Arc::clone(&record)).unwrap();
    assert!(record.begin_commit());
    assert!(!record.begin_commit());
    // A committing context is never expired under its request.
    std::thread::sleep(Duration::from_millis(2));
    assert!(registry.get(&record.id).is_ok());
    record.end_commit();
    assert!(registry.get(&record.id).is_err());
}

fn raw(registry: &ContextRegistry, keep_alive: Option<KeepAlive>) -> Arc<ContextRecord> {
    registry.new_record("m", ContextContent::Raw, Arc::new(vec![1]), keep_alive, None)
}

#[test]
fn past_the_cap_creates_and_forks_are_refused_until_one_is_deleted() {
    let registry = ContextRegistry::new();
    registry.set_max_contexts(4);
    let first = raw(&registry, None);
    registry.insert(Arc::clone(&first)).unwrap();
    assert_eq!(registry.fork(&first, 3).unwrap().len(), 3);
    let refused = registry.insert(raw(&registry, None)).unwrap_err();
    assert_eq!((refused.code, refused.status()), (ErrorCode::ContextLimit, 503));
    assert!(refused.message.contains("max_contexts 4"), "{}", refused.message);
    let refused = registry.fork(&first, 1).unwrap_err();
    assert_eq!(refused.code, ErrorCode::ContextLimit);
    assert_eq!(registry.check_room(1).unwrap_err().code, ErrorCode::ContextLimit);
    assert_eq!(registry.len(), 4);

    registry.remove(&first.id).unwrap();
    registry.check_room(1).unwrap();
    let last = raw(&registry, None);
    registry.insert(Arc::clone(&last)).unwrap();
    assert_eq!(registry.counts().total, 4);
    // A fork that does not fit whole makes no child at all.
    registry.remove(&last.id).unwrap();
    let parent = registry.page(None, 1).unwrap().contexts[0].clone();
    assert_eq!(registry.fork(&parent, 2).unwrap_err().code, ErrorCode::ContextLimit);
    assert_eq!((registry.len(), registry.counts().total), (3, 3));
}

#[test]
fn a_full_registry_sweeps_expired_contexts_before_refusing() {
    let registry = ContextRegistry::new();
    registry.set_max_contexts(2);
    for _ in 0..2 {
        registry.insert(raw(&registry, Some(KeepAlive::UnloadNow))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2));
    // The registry was made less than a second ago, so this sweep is not yet due.
    assert_eq!(registry.insert(raw(&registry, None)).unwrap_err().code, ErrorCode::ContextLimit);
    std::thread::sleep(Duration::from_millis(1000));
    registry.insert(raw(&registry, None)).unwrap();
    assert_eq!(registry.len(), 1);
}

#[test]
fn pages_go_oldest_first_with_has_more_and_skip_expired_contexts() {
    let registry = ContextRegistry::new();
    let records: Vec<_> = (0..7)
        .map(|i| {
            let keep_alive = (i == 3).then_some(KeepAlive::UnloadNow);
            let record = raw(&registry, keep_alive);
            registry.insert(Arc::clone(&record)).unwrap();
            record
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2));
    let ids = |page: &ContextPage| page.contexts.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    let first = registry.page(None, 3).unwrap();
    assert_eq!(ids(&first), vec![records[0].id.clone(), records[1].id.clone(), records[2].id.clone()]);
    assert!(first.has_more);
    let second = registry.page(Some(&records[2].id), 3).unwrap();
    assert_eq!(ids(&second), vec![records[4].id.clone(), records[5].id.clone(), records[6].id.clone()]);
    assert!(!second.has_more, "the expired context is not listed");
    assert_eq!(registry.page(None, MAX_PAGE + 5).unwrap().contexts.len(), 6);
    registry.expire();
    let error = registry.page(Some(&records[3].id), 3).unwrap_err();
    assert_eq!((error.code, error.param.as_deref()), (ErrorCode::ContextNotFound, Some("after")));
}

#[test]
fn counts_per_residence_follow_the_records_without_a_scan() {
    let registry = ContextRegistry::new();
    let record = raw(&registry, None);
    record.set_residence(Residence::Hot);
    assert_eq!(registry.counts().total, 0, "a record is counted once listed");
    registry.insert(Arc::clone(&record)).unwrap();
    assert_eq!(registry.counts(), ResidenceCounts { hot: 1, total: 1, ..Default::default() });
    record.park(Arc::new(vec![0; 10]), 1);
    let children = registry.fork(&record, 2).unwrap();
    assert_eq!(registry.counts(), ResidenceCounts { parked: 3, total: 3, ..Default::default() });
    children[0].set_residence(Residence::Cold);
    registry.remove(&children[1].id).unwrap();
    assert_eq!(
        registry.counts(),
        ResidenceCounts { parked: 1, cold: 1, total: 2, ..Default::default() }
    );
    // A record taken out is not counted again when it changes.
    children[1].set_residence(Residence::Hot);
    assert_eq!(registry.counts().total, 2);
}

#[test]
fn a_fork_is_listed_whole_while_others_read_the_listing() {
    let registry = ContextRegistry::new();
    let parent = raw(&registry, None);
    registry.insert(Arc::clone(&parent)).unwrap();
    let forks = 100;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..forks {
                registry.fork(&parent, 4).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        while !done.load(Ordering::Acquire) {
            let page = registry.page(None, MAX_PAGE).unwrap();
            let children = page.contexts.len() - 1;
            assert_eq!(children % 4, 0, "a page showed part of a fork");
            assert!(registry.len() >= page.contexts.len());
        }
    });
    let page = registry.page(None, MAX_PAGE).unwrap();
    assert_eq!(page.contexts.len(), 1 + 4 * forks);
    assert_eq!((registry.len(), registry.counts().total), (page.contexts.len(), page.contexts.len()));
    for child in &page.contexts[1..] {
        registry.remove(&child.id).unwrap();
        assert!(registry.get(&child.id).is_err());
    }
    assert_eq!((registry.len(), registry.counts().total), (1, 1));
}
