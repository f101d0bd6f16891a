use super::*;

/// A derived configuration is validated as a parsed one is, value and
/// whole; the original is untouched either way.
#[test]
fn with_validates_and_leaves_the_original_alone() {
    let c = Config::from_vars([("FARMEM_LOCAL", "64M")]).unwrap();
    let d = c.with("conns", "3").unwrap();
    assert_eq!((c.conns(), d.conns()), (Config::default().conns(), 3));
    assert_eq!(d.local_bytes(), 64 << 20);
    assert!(matches!(
        c.with("CONNS", "0"),
        Err(ConfigError::Invalid { .. })
    ));
    // A value fine alone, wrong with the rest: a file beside servers.
    let s = c.with("SERVERS", "127.0.0.1:7000").unwrap();
    assert!(matches!(
        s.with("FILE", "/var/tmp/x"),
        Err(ConfigError::TwoBackends)
    ));
    assert_eq!(c.local_bytes(), 64 << 20);
    // Servers given as parsed addresses replace a rendezvous.
    let r = c.with("SERVERS", "@/tmp/farmem-rv").unwrap();
    assert!(r.rendezvous().is_some());
    let w = r.with_servers(s.servers());
    assert_eq!((w.rendezvous(), w.servers()), (None, s.servers()));
    // Without a rendezvous, resolving is the identity.
    let (same, found) = s.resolved().unwrap();
    assert!(found.is_none());
    assert_eq!(same, s);
}

/// docs/configuration.md shows exactly this table: a new option cannot
/// ship undocumented, nor a removed one stay, nor a default drift.
#[test]
fn the_documented_table_is_the_options_table() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    assert!(
        doc.contains(&options_markdown()),
        "docs/configuration.md's table differs from config::OPTIONS; \
         paste the output of `farmem config --markdown` into it"
    );
}

/// `values` names every option, and each value it prints parses back
/// to the same configuration.
#[test]
fn printed_values_parse_back() {
    let c = Config::from_vars([
        ("FARMEM_LOCAL", "300M"),
        ("FARMEM_SERVERS", "h1:7070,unix:@x"),
        ("FARMEM_PREFETCH", "8"),
        ("FARMEM_RAW_SYSCALLS", "allow"),
    ])
    .unwrap();
    let vals = c.values();
    assert_eq!(vals.len(), OPTIONS.len());
    assert!(vals.iter().all(|(_, v)| !v.starts_with("(no value")));
    let mut back = Config::default();
    for (k, v) in &vals {
        if !v.starts_with('(') {
            back.set(k, v).unwrap();
        }
    }
    assert_eq!(back, c);
}

/// Every option in the table is one the parser accepts (its default
/// spelled as the user would write it is not checked: some are prose).
#[test]
fn every_listed_option_is_parsed() {
    for o in OPTIONS {
        let e = Config::default().set(o.key, "\u{1}not-a-value");
        assert!(
            !matches!(e, Err(ConfigError::Unknown(_))),
            "{} is listed but not parsed",
            o.key
        );
    }
    assert!(matches!(
        Config::default().set("NOPE", "1"),
        Err(ConfigError::Unknown(_))
    ));
}

#[test]
fn sizes() {
    assert_eq!(parse_size("4096").unwrap(), 4096);
    assert_eq!(parse_size("64K").unwrap(), 64 << 10);
    assert_eq!(parse_size("256M").unwrap(), 256 << 20);
    assert_eq!(parse_size("2G").unwrap(), 2 << 30);
    assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
    assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
    assert!(parse_size("").is_err());
    assert!(parse_size("12Q").is_err());
    assert!(parse_size("abc").is_err());
    assert!(parse_size("-1G").is_err());
    assert_eq!(format_size(256 << 20), "256M");
}

#[test]
fn env_is_validated() {
    let ok = Config::from_vars([
        ("FARMEM_LOCAL", "64M"),
        ("FARMEM_SERVERS", "127.0.0.1:7000,localhost:7001"),
    ])
    .unwrap();
    assert_eq!(ok.local_bytes, 64 << 20);
    assert_eq!(ok.servers().len(), 2);
    let e = Config::from_vars([("FARMEM_LOCAL", "lots")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("FARMEM_LOCAL") && e.contains("256M"), "{e}");
    let e = Config::from_vars([("FARMEM_LOCAL", "100T")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("physical memory"), "{e}");
    assert!(Config::from_vars([("FARMEM_SERVERS", "nohost")]).is_err());
    assert!(Config::from_vars([("FARMEM_SERVERS", "h:0")]).is_err());
    assert!(Config::from_vars([("FARMEM_LOCALL", "1G")])
        .unwrap_err()
        .to_string()
        .contains("unknown"));
    assert!(Config::from_vars([("FARMEM_THRESHOLD", "0")]).is_err());
    assert!(Config::from_vars([("FARMEM_RAW_SYSCALLS", "sometimes")]).is_err());
    assert_eq!(
        Config::from_vars([("FARMEM_RAW_SYSCALLS", "allow")])
            .unwrap()
            .raw_syscalls,
        RawSyscalls::Allow
    );
    assert!(Config::from_vars([("FARMEM_PREFETCH", "65")]).is_err());
    // The queues number pages in 32 bits: no arena beyond 2^32 pages.
    assert_eq!(
        Config::from_vars([("FARMEM_ARENA", "16T")])
            .unwrap()
            .arena_bytes,
        MAX_ARENA
    );
    let e = Config::from_vars([("FARMEM_ARENA", "17T")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("FARMEM_ARENA") && e.contains("16T"), "{e}");
    assert!(Config::default().arena_bytes <= MAX_ARENA);
    assert_eq!(
        Config::from_vars([("FARMEM_SERVERS", "h:1"), ("FARMEM_FILE", "/tmp/x")]),
        Err(ConfigError::TwoBackends)
    );
    // Other variables are none of farmem's business.
    assert!(Config::from_vars([("HOME", "/root")]).is_ok());
}

#[test]
fn init_string() {
    let c = Config::from_str_config("local=8M prefetch=0 stats=1").unwrap();
    assert_eq!(
        (c.local_bytes, c.prefetch_pages, c.stats_at_exit),
        (8 << 20, 0, true)
    );
    assert!(Config::from_str_config("local").is_err());
}

/// `FARMEM_EVICT_BATCH` is `auto` (a 64th of the budget, between 32 and
/// 128) or a number of victims that leaves a round room for blocks; what is
/// out of range names the range and `auto`.
#[test]
fn eviction_rounds_follow_the_budget_unless_set() {
    let c = Config::default();
    assert_eq!(c.evict_batch(), None);
    assert_eq!(eviction_round(None, 1421), 32);
    assert_eq!(eviction_round(None, 4096), 64);
    assert_eq!(eviction_round(None, 55_552), MAX_EVICT_BATCH);
    assert_eq!(eviction_round(Some(8), 55_552), 8);
    for (v, want) in [
        ("auto", None),
        ("AUTO", None),
        ("1", Some(1)),
        ("128", Some(128)),
    ] {
        let c = Config::from_vars([("FARMEM_EVICT_BATCH", v)]).unwrap();
        assert_eq!(c.evict_batch(), want, "{v}");
    }
    for v in ["0", "129", "-1", "lots", ""] {
        let e = Config::from_vars([("FARMEM_EVICT_BATCH", v)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("FARMEM_EVICT_BATCH") && e.contains("1..=128") && e.contains("auto"),
            "{v}: {e}"
        );
    }
    let shown = Config::from_vars([("FARMEM_EVICT_BATCH", "auto")])
        .unwrap()
        .values();
    assert!(
        shown
            .iter()
            .any(|(k, v)| k.contains("EVICT_BATCH") && v == "auto"),
        "{shown:?}"
    );
}
