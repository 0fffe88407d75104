use super::*;
use std::collections::HashMap;
use std::io::Write;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn defaults_match_the_issue() {
    let config = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
    assert_eq!(config.addr, "localhost:11435");
    assert_eq!(config.max_loaded, 2);
    assert_eq!(config.keep_alive.to_string(), "5m0s");
    assert_eq!(config.kv, KvType::F16);
    assert!(config.flash_attention);
    assert_eq!(config.parallel, 4);
}

#[test]
fn acceleration_is_on_unless_the_env_or_the_flag_turns_it_off() {
    assert!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().accelerate);
    assert!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().close_on_budget);
    let args = ServeArgs { close_on_budget: Some("off".into()), ..ServeArgs::default() };
    assert!(!Config::load_with_env(&args, no_env).unwrap().close_on_budget);
    let env = |key: &str| (key == "LLAMAY_ACCELERATE").then(|| "off".to_string());
    assert!(!Config::load_with_env(&ServeArgs::default(), env).unwrap().accelerate);
    let args = ServeArgs { accelerate: Some("on".into()), ..ServeArgs::default() };
    assert!(Config::load_with_env(&args, env).unwrap().accelerate);
    let args = ServeArgs { accelerate: Some("maybe".into()), ..ServeArgs::default() };
    let error = Config::load_with_env(&args, no_env).unwrap_err().to_string();
    assert!(error.contains("accelerate") && error.contains("on or off"), "{error}");
}

#[test]
fn flash_attention_is_switched_by_file_env_and_flag() {
    let env = |key: &str| (key == "LLAMAY_FLASH_ATTENTION").then(|| "off".to_string());
    assert!(!Config::load_with_env(&ServeArgs::default(), env).unwrap().flash_attention);
    let args = ServeArgs { flash_attn: Some("on".into()), ..ServeArgs::default() };
    assert!(Config::load_with_env(&args, env).unwrap().flash_attention);
    let args = ServeArgs { flash_attn: Some("sometimes".into()), ..ServeArgs::default() };
    let error = Config::load_with_env(&args, no_env).unwrap_err().to_string();
    assert!(error.contains("flash_attention") && error.contains("on or off"), "{error}");
}

#[test]
fn flags_beat_env_which_beats_the_file() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "addr = \"127.0.0.1:9000\"\nmax_loaded = 3\nkeepalive = \"10m\"\nparallel = 2\nkv = \"f16\"").unwrap();
    let env: HashMap<&str, &str> =
        [("LLAMAY_MAX_LOADED", "5"), ("LLAMAY_KEEPALIVE", "-1")].into();
    let args = ServeArgs {
        config: Some(file.path().into()),
        parallel: Some(8),
        ..Default::default()
    };
    let config = Config::load_with_env(&args, |k| env.get(k).map(|v| v.to_string())).unwrap();
    assert_eq!(config.addr, "127.0.0.1:9000");
    assert_eq!(config.max_loaded, 5);
    assert_eq!(config.keep_alive, KeepAlive::Forever);
    assert_eq!(config.parallel, 8);
    assert_eq!(config.kv, KvType::F16);
}

#[test]
fn refuses_bad_values_by_name() {
    let cases: Vec<ServeArgs> = vec![
        ServeArgs {
            max_loaded: Some(0),
            ..Default::default()
        },
        ServeArgs {
            addr: Some("nowhere".into()),
            ..Default::default()
        },
        ServeArgs {
            kv: Some("f8".into()),
            ..Default::default()
        },
        ServeArgs {
            keepalive: Some("soon".into()),
            ..Default::default()
        },
        ServeArgs {
            parallel: Some(0),
            ..Default::default()
        },
        ServeArgs {
            grammar_file: Some("/definitely/not/here.gbnf".into()),
            ..Default::default()
        },
    ];
    for args in cases {
        assert!(
            matches!(
                Config::load_with_env(&args, no_env),
                Err(ConfigError::Invalid { .. })
            ),
            "{args:?}"
        );
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "max_loadd = 3").unwrap();
    let args = ServeArgs {
        config: Some(file.path().into()),
        ..Default::default()
    };
    assert!(matches!(
        Config::load_with_env(&args, no_env),
        Err(ConfigError::Parse { .. })
    ));
    let env = |k: &str| (k == "LLAMAY_THREADS").then(|| "many".to_string());
    assert!(Config::load_with_env(&ServeArgs::default(), env).is_err());
}

#[test]
fn context_memory_reads_sizes_and_refuses_other_text() {
    assert_eq!(parse_memory("context_memory", "2GiB").unwrap(), 2 << 30);
    assert_eq!(parse_memory("context_memory", "512 MiB").unwrap(), 512 << 20);
    assert_eq!(parse_memory("context_memory", "1000").unwrap(), 1000);
    assert!(parse_memory("context_memory", "lots").is_err());
    let args = ServeArgs { context_memory: Some("64M".into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().context_memory, Some(64 << 20));
}

#[test]
fn the_documented_config_file_loads_and_documents_every_key() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/llamay.toml");
    let args = ServeArgs {
        config: Some(path.into()),
        ..Default::default()
    };
    let config = Config::load_with_env(&args, no_env).unwrap();
    assert_eq!(config.addr, Config::default().addr);
    assert_eq!(config.keep_alive, Config::default().keep_alive);
    let text = std::fs::read_to_string(path).unwrap();
    let keys = [
        "addr",
        "model",
        "max_loaded",
        "keepalive",
        "context",
        "threads",
        "kv",
        "parallel",
        "grammar_file",
        "lexicon_files",
        "lexicon_match",
        "max_queue",
        "max_body_bytes",
        "log_format",
        "default_max_tokens",
        "max_tokens_limit",
        "api_key",
        "origins",
        "client_request_timeout",
        "request_body_timeout",
        "http_keep_alive",
        "max_connections",
        "flash_attention",
        "close_on_budget",
        "formats",
        "rpc",
        "split",
        "context_memory",
        "daemon_id",
        "embed",
        "rerank",
    ];
    for key in keys {
        assert!(
            text.contains(&format!("{key} = ")),
            "configs/llamay.toml does not document {key}"
        );
        let probe = format!("{key} = \"x\"");
        if let Err(error) = toml::from_str::<FileConfig>(&probe) {
            assert!(
                !error.to_string().contains("unknown field"),
                "{key} is documented but not a config key"
            );
        }
    }
}

#[test]
fn security_and_connection_limits_load_from_each_source_and_are_checked() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "api_key = \"from-file\"\norigins = [\"http://localhost:3000\"]\nclient_request_timeout = 2\nrequest_body_timeout = \"1m\"\nhttp_keep_alive = \"750ms\"\nmax_connections = 10").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    let config = Config::load_with_env(&args, no_env).unwrap();
    assert_eq!(config.api_key, Some(Secret("from-file".into())));
    assert_eq!(config.origins, ["http://localhost:3000"]);
    assert_eq!(config.client_request_timeout, Duration::from_secs(2));
    assert_eq!(config.request_body_timeout, Duration::from_secs(60));
    assert_eq!(config.http_keep_alive, Duration::from_millis(750));
    assert_eq!(config.max_connections, 10);
    assert!(!format!("{config:?}").contains("from-file"), "the key shows in Debug");

    let env: HashMap<&str, &str> = [
        ("LLAMAY_API_KEY", "from-env"),
        ("LLAMAY_ORIGINS", "https://a.example, http://b.example:8080"),
        ("LLAMAY_REQUEST_BODY_TIMEOUT", "5s"),
    ]
    .into();
    let args = ServeArgs { api_key: Some("from-flag".into()), ..Default::default() };
    let config = Config::load_with_env(&args, |k| env.get(k).map(|v| v.to_string())).unwrap();
    assert_eq!(config.api_key, Some(Secret("from-flag".into())));
    assert_eq!(config.origins, ["https://a.example", "http://b.example:8080"]);
    assert_eq!(config.request_body_timeout, Duration::from_secs(5));
    let defaults = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
    assert_eq!((defaults.api_key, defaults.origins.len()), (None, 0));

    let refused: [(&str, &str); 6] = [
        ("LLAMAY_API_KEY", "has space"),
        ("LLAMAY_ORIGINS", "localhost:3000"),
        ("LLAMAY_ORIGINS", "http://a.example/path"),
        ("LLAMAY_HTTP_KEEP_ALIVE", "0"),
        ("LLAMAY_CLIENT_REQUEST_TIMEOUT", "soon"),
        ("LLAMAY_MAX_CONNECTIONS", "0"),
    ];
    for (variable, value) in refused {
        let env = |k: &str| (k == variable).then(|| value.to_string());
        assert!(
            matches!(Config::load_with_env(&ServeArgs::default(), env), Err(ConfigError::Invalid { .. })),
            "{variable}={value}"
        );
    }
}

#[test]
fn single_dash_long_flags_become_double_dash() {
    let argv = [
        "llamay",
        "serve",
        "-m",
        "smollm2:135m",
        "-addr",
        "localhost:1",
        "-keepalive=-1",
        "-max-loaded",
        "1",
        "--kv",
        "f16",
    ];
    let normalized =
        normalize_single_dash_flags(argv.iter().map(|s| s.to_string()), SINGLE_DASH_LONG_FLAGS);
    assert_eq!(
        normalized,
        [
            "llamay",
            "serve",
            "-m",
            "smollm2:135m",
            "--addr",
            "localhost:1",
            "--keepalive=-1",
            "--max-loaded",
            "1",
            "--kv",
            "f16"
        ]
    );
}

#[test]
fn serve_args_parse_with_clap() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let argv = normalize_single_dash_flags(
        [
            "llamay",
            "-m",
            "a",
            "-c",
            "2048",
            "-t",
            "3",
            "-keepalive",
            "-1",
            "-parallel",
            "2",
        ]
        .iter()
        .map(|s| s.to_string()),
        SINGLE_DASH_LONG_FLAGS,
    );
    let cli = Cli::try_parse_from(argv).unwrap();
    assert_eq!(cli.serve.model.as_deref(), Some("a"));
    assert_eq!(cli.serve.context, Some(2048));
    assert_eq!(cli.serve.threads, Some(3));
    assert_eq!(cli.serve.keepalive.as_deref(), Some("-1"));
    assert_eq!(cli.serve.parallel, Some(2));
}

#[test]
fn token_limits_come_from_the_file_and_env_and_are_checked() {
    let defaults = Config::load_with_env(&ServeArgs::default(), no_env).unwrap();
    assert_eq!(
        (defaults.default_max_tokens, defaults.max_tokens_limit),
        (2048, 32768)
    );
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "default_max_tokens = 100\nmax_tokens_limit = 500").unwrap();
    let args = ServeArgs {
        config: Some(file.path().into()),
        ..Default::default()
    };
    let config = Config::load_with_env(&args, no_env).unwrap();
    assert_eq!((config.default_max_tokens, config.max_tokens_limit), (100, 500));
    let env = |k: &str| (k == "LLAMAY_MAX_TOKENS_LIMIT").then(|| "50".to_string());
    assert!(matches!(
        Config::load_with_env(&args, env),
        Err(ConfigError::Invalid { key: "default_max_tokens", .. })
    ));
    let env = |k: &str| (k == "LLAMAY_DEFAULT_MAX_TOKENS").then(|| "0".to_string());
    assert!(matches!(
        Config::load_with_env(&ServeArgs::default(), env),
        Err(ConfigError::Invalid { key: "default_max_tokens", .. })
    ));
}
#[test]
fn formats_load_from_the_file_and_the_environment_and_are_checked() {
    use crate::grammar::schema::FormatMode;
    assert_eq!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().formats, FormatMode::Ignore);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "formats = \"enforce\"").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().formats, FormatMode::Enforce);
    let ignore = |k: &str| (k == "LLAMAY_FORMATS").then(|| "ignore".to_string());
    assert_eq!(Config::load_with_env(&args, ignore).unwrap().formats, FormatMode::Ignore);
    let typo = |k: &str| (k == "LLAMAY_FORMATS").then(|| "enforced".to_string());
    assert!(matches!(
        Config::load_with_env(&ServeArgs::default(), typo),
        Err(ConfigError::Invalid { key: "formats", .. })
    ));
}

#[test]
fn the_lexicon_match_mode_loads_from_the_file_env_and_flag_and_is_checked() {
    use crate::grammar::MatchMode;
    assert_eq!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().lexicon_match, None);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "lexicon_match = \"word\"").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().lexicon_match, Some(MatchMode::Word));
    let substring = |k: &str| (k == "LLAMAY_LEXICON_MATCH").then(|| "substring".to_string());
    assert_eq!(Config::load_with_env(&args, substring).unwrap().lexicon_match, Some(MatchMode::Substring));
    let flag = ServeArgs { lexicon_match: Some("prefix".into()), ..args };
    assert_eq!(Config::load_with_env(&flag, substring).unwrap().lexicon_match, Some(MatchMode::Prefix));
    let typo = ServeArgs { lexicon_match: Some("whole".into()), ..Default::default() };
    let error = Config::load_with_env(&typo, no_env).unwrap_err();
    assert!(matches!(error, ConfigError::Invalid { key: "lexicon_match", .. }));
    assert_eq!(error.to_string(), "lexicon_match = \"whole\" is not valid: expected word, prefix or substring");
}

#[test]
fn rpc_workers_come_from_the_file_env_and_flag_and_are_checked() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "rpc = [\"10.0.0.2:50052\"]").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().rpc, ["10.0.0.2:50052"]);
    let env = |k: &str| (k == "LLAMAY_RPC").then(|| "a:1, b:2".to_string());
    assert_eq!(Config::load_with_env(&args, env).unwrap().rpc, ["a:1", "b:2"]);
    let flag = ServeArgs { rpc: Some(String::new()), ..args };
    assert!(Config::load_with_env(&flag, env).unwrap().rpc.is_empty());
    let bad = ServeArgs { rpc: Some("a:1,nohost".into()), ..Default::default() };
    assert!(matches!(
        Config::load_with_env(&bad, no_env),
        Err(ConfigError::Invalid { key: "rpc", value, .. }) if value == "nohost"
    ));
}

#[test]
fn split_ratios_need_one_per_device_and_rpc_workers() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "rpc = [\"a:1\", \"b:2\"]\nsplit = [1.0, 1.0, 2.0]").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().split, [1.0, 1.0, 2.0]);
    let env = |k: &str| (k == "LLAMAY_SPLIT").then(|| "2, 1,0".to_string());
    assert_eq!(Config::load_with_env(&args, env).unwrap().split, [2.0, 1.0, 0.0]);
    let refused = |split: &str, rpc: Option<&str>| {
        let args = ServeArgs { split: Some(split.into()), rpc: rpc.map(str::to_string), ..Default::default() };
        match Config::load_with_env(&args, no_env) {
            Err(ConfigError::Invalid { key: "split", expected, .. }) => expected,
            other => panic!("{split} with {rpc:?}: {other:?}"),
        }
    };
    assert!(refused("1,1", None).contains("only with rpc workers"));
    assert!(refused("1,1", Some("a:1,b:2")).contains("one per rpc worker"));
    assert!(refused("1,-1", Some("a:1")).contains("0 or more"));
    assert!(refused("0,0", Some("a:1")).contains("not all 0"));
    assert!(refused("1,x", Some("a:1")).contains("comma-separated ratios"));
}

#[test]
fn limits_and_allowed_hosts_come_from_the_file_env_and_flags_and_are_checked() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        "compile_threads = 3\ncompile_queue = 10\nmax_contexts = 7\nallowed_hosts = [\"box.lan\"]\nlog_format = \"json\""
    )
    .unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    let config = Config::load_with_env(&args, no_env).unwrap();
    assert_eq!((config.compile_threads, config.compile_queue, config.max_contexts), (Some(3), Some(10), Some(7)));
    assert_eq!((config.allowed_hosts.clone(), config.log_format), (vec!["box.lan".to_string()], LogFormat::Json));
    let env = |k: &str| (k == "LLAMAY_ALLOWED_HOSTS").then(|| "a.example, b.example:8080".to_string());
    assert_eq!(Config::load_with_env(&args, env).unwrap().allowed_hosts, ["a.example", "b.example:8080"]);
    let flags = ServeArgs { allowed_hosts: Some("*".into()), log_format: Some("text".into()), ..args };
    let config = Config::load_with_env(&flags, env).unwrap();
    assert_eq!((config.allowed_hosts, config.log_format), (vec!["*".to_string()], LogFormat::Text));
    for (args, key) in [
        (ServeArgs { allowed_hosts: Some("http://a.example/".into()), ..Default::default() }, "allowed_hosts"),
        (ServeArgs { log_format: Some("yaml".into()), ..Default::default() }, "log_format"),
    ] {
        assert!(matches!(Config::load_with_env(&args, no_env), Err(ConfigError::Invalid { key: k, .. }) if k == key));
    }
    for (variable, key) in [
        ("LLAMAY_COMPILE_THREADS", "compile_threads"),
        ("LLAMAY_COMPILE_QUEUE", "compile_queue"),
        ("LLAMAY_MAX_CONTEXTS", "max_contexts"),
    ] {
        let zero = |k: &str| (k == variable).then(|| "0".to_string());
        assert!(
            matches!(Config::load_with_env(&ServeArgs::default(), zero), Err(ConfigError::Invalid { key: k, .. }) if k == key),
            "{variable}"
        );
    }
}

#[test]
fn gpu_layers_come_from_the_file_env_and_flag() {
    assert_eq!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().gpu_layers, None, "auto by default");
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "gpu_layers = 12").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&args, no_env).unwrap().gpu_layers, Some(12));
    let env = |key: &str| (key == "LLAMAY_GPU_LAYERS").then(|| "all".to_string());
    assert_eq!(Config::load_with_env(&args, env).unwrap().gpu_layers, Some(u32::MAX));
    let flag = |value: &str| ServeArgs { gpu_layers: Some(value.into()), ..args.clone() };
    assert_eq!(Config::load_with_env(&flag("0"), env).unwrap().gpu_layers, Some(0));
    assert_eq!(Config::load_with_env(&flag("-1"), env).unwrap().gpu_layers, None);
    assert_eq!(Config::load_with_env(&flag("auto"), env).unwrap().gpu_layers, None);
    let mut auto = tempfile::NamedTempFile::new().unwrap();
    writeln!(auto, "gpu_layers = \"auto\"").unwrap();
    let from_auto = ServeArgs { config: Some(auto.path().into()), ..Default::default() };
    assert_eq!(Config::load_with_env(&from_auto, no_env).unwrap().gpu_layers, None);
    let error = Config::load_with_env(&flag("lots"), no_env).unwrap_err().to_string();
    assert!(error.contains("gpu_layers") && error.contains("lots"), "{error}");
}

#[test]
fn gpu_layers_are_refused_with_rpc_workers() {
    let args = |layers: &str| ServeArgs {
        rpc: Some("10.0.0.2:50052".into()),
        gpu_layers: Some(layers.into()),
        ..Default::default()
    };
    let error = Config::load_with_env(&args("8"), no_env).unwrap_err().to_string();
    assert!(error.contains("gpu_layers") && error.contains("rpc"), "{error}");
    assert_eq!(Config::load_with_env(&args("0"), no_env).unwrap().gpu_layers, Some(0));
}

#[test]
fn ngl_is_spelled_as_llama_cpp_spells_it() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    for (spelling, value) in [("-ngl", "99"), ("--gpu-layers", "all"), ("-n-gpu-layers", "-1"), ("--ngl", "0")] {
        let argv = normalize_single_dash_flags(
            ["llamay", spelling, value].iter().map(|s| s.to_string()),
            SINGLE_DASH_LONG_FLAGS,
        );
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert_eq!(cli.serve.gpu_layers.as_deref(), Some(value), "{argv:?}");
    }
}

#[test]
fn insecure_registries_come_from_the_operator_only() {
    assert!(Config::load_with_env(&ServeArgs::default(), no_env).unwrap().insecure_registries.is_empty());
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "insecure_registries = [\"127.0.0.1:5000\", \"registry.lan\"]").unwrap();
    let from_file = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    let config = Config::load_with_env(&from_file, no_env).unwrap();
    assert_eq!(config.insecure_registries, ["127.0.0.1:5000", "registry.lan"]);
    let env = |key: &str| (key == "LLAMAY_INSECURE_REGISTRIES").then(|| "a.lan, [::1]:5000".to_string());
    assert_eq!(Config::load_with_env(&from_file, env).unwrap().insecure_registries, ["a.lan", "[::1]:5000"]);
    let flags = ServeArgs {
        insecure_registry: vec!["b.lan:1".into(), "c.lan,d.lan".into()],
        ..from_file
    };
    assert_eq!(Config::load_with_env(&flags, env).unwrap().insecure_registries, ["b.lan:1", "c.lan", "d.lan"]);
    for bad in ["http://x.lan", "x.lan/v2", "x.lan:0", "x.lan:port", ":5000", "a b"] {
        let args = ServeArgs { insecure_registry: vec![bad.into()], ..Default::default() };
        let error = Config::load_with_env(&args, no_env).unwrap_err().to_string();
        assert!(error.contains("insecure_registries") && error.contains("host[:port]"), "{bad}: {error}");
    }
}

#[test]
fn stored_responses_bounds_come_from_the_file_and_env_and_are_checked() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "max_stored_responses = 5\nstored_responses_max_age = \"2h\"").unwrap();
    let args = ServeArgs { config: Some(file.path().into()), ..Default::default() };
    let config = Config::load_with_env(&args, no_env).unwrap();
    assert_eq!((config.max_stored_responses, config.stored_responses_max_age), (5, Duration::from_secs(7200)));
    let env = |k: &str| match k {
        "LLAMAY_MAX_STORED_RESPONSES" => Some("9".to_string()),
        "LLAMAY_STORED_RESPONSES_MAX_AGE" => Some("90s".to_string()),
        _ => None,
    };
    let config = Config::load_with_env(&args, env).unwrap();
    assert_eq!((config.max_stored_responses, config.stored_responses_max_age), (9, Duration::from_secs(90)));
    let zero = |k: &str| (k == "LLAMAY_MAX_STORED_RESPONSES").then(|| "0".to_string());
    assert!(matches!(Config::load_with_env(&ServeArgs::default(), zero), Err(ConfigError::Invalid { key: "max_stored_responses", .. })));
    let never = |k: &str| (k == "LLAMAY_STORED_RESPONSES_MAX_AGE").then(|| "soon".to_string());
    assert!(matches!(Config::load_with_env(&ServeArgs::default(), never), Err(ConfigError::Invalid { key: "stored_responses_max_age", .. })));
}
