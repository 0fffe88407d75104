//! Unit tests of the RPC split: addresses, layer ranges, ratios, block bytes, the probe.

use super::*;

#[test]
fn worker_address_refuses_remote_without_flag() {
    assert_eq!(
        worker_listen_address("localhost:50052", false).unwrap(),
        "127.0.0.1:50052"
    );
    assert_eq!(
        worker_listen_address("127.0.0.1:1", false).unwrap(),
        "127.0.0.1:1"
    );
    assert!(matches!(
        worker_listen_address("0.0.0.0:50052", false),
        Err(RpcError::NotLoopback { .. })
    ));
    assert_eq!(
        worker_listen_address("0.0.0.0:50052", true).unwrap(),
        "0.0.0.0:50052"
    );
    assert!(matches!(
        worker_listen_address("example.org:1", true),
        Err(RpcError::BadAddress { .. })
    ));
    assert!(matches!(
        worker_listen_address("127.0.0.1", false),
        Err(RpcError::BadAddress { .. })
    ));
}

#[test]
fn layer_split_follows_free_memory() {
    let plan = RpcPlan {
        workers: vec![worker("a:1", 100), worker("b:2", 300)],
        ratios: None,
    };
    let split = plan.layer_split(30, 20);
    assert_eq!(split.local, 0..11);
    assert_eq!(split.workers[0], ("a:1".to_string(), 11..16));
    assert_eq!(split.workers[1], ("b:2".to_string(), 16..31));
    assert_eq!(
        split.to_string(),
        "local CPU layers 0-10, a:1 layers 11-15, b:2 layers 16-30"
    );
}

fn worker(endpoint: &str, weight: u64) -> RpcWorker {
    RpcWorker {
        endpoint: endpoint.into(),
        device_index: 0,
        free_bytes: weight,
        total_bytes: weight,
        weight: weight as f64,
    }
}

#[test]
fn split_ratios_decide_the_local_share_and_each_workers() {
    // -split 1,1,2 over 30 layers + output: a quarter local, then a quarter and a half.
    let plan = RpcPlan {
        workers: vec![worker("a:1", 1 << 39), worker("b:2", 1 << 40)],
        ratios: Some(vec![1.0, 1.0, 2.0]),
    };
    let offloaded = plan.offloaded_layers(30);
    assert_eq!(offloaded, 23);
    let split = plan.layer_split(30, offloaded);
    assert_eq!(split.local, 0..8);
    assert_eq!(split.workers[0].1, 8..16);
    assert_eq!(split.workers[1].1, 16..31);
    // A worker given 0 holds nothing.
    let plan = RpcPlan {
        workers: vec![worker("a:1", 0), worker("b:2", 1 << 40)],
        ratios: Some(vec![1.0, 0.0, 1.0]),
    };
    let split = plan.layer_split(30, plan.offloaded_layers(30));
    assert!(split.workers[0].1.is_empty());
    assert_eq!(split.workers[1].1, 15..31);
    assert_eq!(split.local, 0..15);
}

#[test]
fn bad_split_ratios_are_named() {
    assert!(check_split(&[1.0, 2.0, 3.0], 2).is_ok());
    let message = check_split(&[1.0, 2.0], 2).unwrap_err().to_string();
    assert!(message.contains("expected 3 ratios"), "{message}");
    let message = check_split(&[1.0, -2.0, 1.0], 2).unwrap_err().to_string();
    assert!(message.contains("-2 is not a ratio"), "{message}");
    let message = check_split(&[0.0, 0.0], 1).unwrap_err().to_string();
    assert!(message.contains("all ratios are zero"), "{message}");
    assert!(check_split(&[f64::NAN, 1.0], 1).is_err());
}

#[test]
fn block_bytes_sort_tensors_into_parts() {
    let tensors = [
        ("token_embd.weight", 100),
        ("blk.0.attn_q.weight", 10),
        ("blk.0.ffn_up.weight", 5),
        ("blk.1.attn_q.weight", 7),
        ("output_norm.weight", 1),
    ];
    // No output.weight: the tied embeddings are placed with the output layer too.
    let bytes = BlockBytes::from_tensors(2, tensors);
    assert_eq!(bytes.input, 100);
    assert_eq!(bytes.per_block, vec![15, 7, 101]);
    let split = LayerSplit {
        local: 0..1,
        workers: vec![("a:1".into(), 1..3)],
        bytes: Vec::new(),
    }
    .with_bytes(&bytes);
    assert_eq!(split.bytes, vec![115, 108]);
    assert_eq!(
        split.to_string(),
        "local CPU layers 0-0 (1 MiB), a:1 layers 1-2 (1 MiB)"
    );
}

#[test]
fn unreachable_worker_is_named() {
    // A port just bound and released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("127.0.0.1:{port}");
    match probe(&endpoint) {
        Err(RpcError::Unreachable { worker, .. }) => assert_eq!(worker, endpoint),
        other => panic!("expected unreachable, got {other:?}"),
    }
}
