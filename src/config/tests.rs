use super::*;

fn errs(text: &str) -> Vec<ConfigError> {
    match parse(text) {
        Ok(_) => panic!("config should be rejected:\n{text}"),
        Err(e) => e,
    }
}

/// The errors of `text`, none if it loads.
fn errs_or_none(text: &str) -> Vec<ConfigError> {
    parse(text).err().unwrap_or_default()
}

fn one_err(text: &str) -> ConfigError {
    let e = errs(text);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    e.into_iter().next().unwrap()
}

/// The one error of a host `h` with these items (the inside of `items = [ ... ]`).
fn bad(items: &str) -> ConfigError {
    one_err(&format!(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ {items} ]\n"
    ))
}

const TEMPLATE: &str = r#"
[[templates]]
name = "icmp"
items = [
  { key = "icmpping", interval = "10s" },
  { key = "icmppingloss[,3]", interval = "10s" },
  { key = "icmppingsec[,3,,,,avg]", interval = "10s" },
]
"#;

#[test]
fn the_lab_example_is_valid() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/lab.toml")).unwrap();
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(cfg.hosts.len(), 4 + 254);
    let agent1 = cfg.hosts.iter().find(|h| &*h.name == "agent-1").unwrap();
    let ping = agent1.items.iter().find(|i| &*i.key == "icmpping").unwrap();
    assert_eq!(
        ping.itemid, 10203,
        "explicit itemid overrides the template's"
    );
    assert_eq!(
        ping.interval_ms, 10_000,
        "interval inherited from the template"
    );
    assert_eq!(ping.value_type, ValueType::Uint);
    let agent4 = cfg.hosts.iter().find(|h| &*h.name == "agent-4").unwrap();
    assert_eq!(&*agent4.snmp.as_ref().unwrap().community, "s3cret");
    assert_eq!(
        agent4.snmp.as_ref().unwrap().port,
        161,
        "port from [snmp] defaults"
    );
    let cpe = cfg
        .hosts
        .iter()
        .find(|h| &*h.name == "cpe-127.1.0.1")
        .unwrap();
    assert!(
        cpe.snmp.is_none(),
        "ICMP-only hosts carry no SNMP parameters"
    );
    assert_eq!(cpe.items.len(), 3);
    assert!(cfg.clickhouse.is_some());
    // Two agents' interfaces are discovered.
    let walked: Vec<&str> = cfg.discovery.iter().map(|t| &*t.host).collect();
    assert_eq!(walked, ["agent-3", "agent-4"]);
}

#[test]
fn the_production_example_is_valid_and_sets_every_daemon_key() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/production.toml"
    ))
    .unwrap();
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    assert!(cfg.clickhouse.is_some());
    assert!(cfg.hosts.iter().any(|h| h.snmp.is_some()));
    // The example documents the [daemon] section: every key the daemon takes is in it.
    let table: toml::Table = text.parse().unwrap();
    let daemon = table["daemon"].as_table().unwrap();
    // serde's own list of the section's keys, from its unknown-field error.
    let e = one_err("[daemon]\nno_such_key = 1\n");
    let keys: Vec<&str> = e
        .message
        .split_once("expected one of ")
        .unwrap()
        .1
        .split(", ")
        .map(|k| k.trim_matches('`'))
        .collect();
    assert!(keys.len() > 10 && keys.contains(&"icmp_phases"), "{keys:?}");
    let missing: Vec<&&str> = keys
        .iter()
        .filter(|k| !daemon.contains_key(**k) && !text.contains(&format!("# {k} =")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in examples/production.toml: {missing:?}"
    );
}

#[test]
fn defaults_apply_without_sections() {
    let cfg = parse(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\ntemplates = [\"icmp\"]\n"
    ))
    .unwrap();
    assert_eq!(cfg.daemon.shards, 4);
    assert_eq!(cfg.daemon.metrics_listen, "127.0.0.1:9464");
    assert_eq!(cfg.daemon.trends_checkpoint, Duration::from_secs(300));
    assert_eq!(cfg.icmp.packets, 3);
    assert_eq!(cfg.snmp.port, 161);
    assert!(
        cfg.clickhouse.is_none(),
        "no [clickhouse]: values go to the spool"
    );
    let loss = cfg.hosts[0]
        .items
        .iter()
        .find(|i| i.key.starts_with("icmppingloss"))
        .unwrap();
    assert_eq!(loss.value_type, ValueType::Float);
}

#[test]
fn ipv4_mapped_addresses_are_refused_wherever_a_target_is_named() {
    // A host's ip, a range and an ICMP key's target: sent as IPv6 they would leave
    // through the default route.
    let e = errs("[[hosts]]\nname = \"a\"\nip = \"::ffff:127.0.0.5\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n[[host_ranges]]\ncidr = \"::ffff:127.0.0.0/124\"\nname = \"r-{ip}\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n[[hosts]]\nname = \"b\"\nip = \"127.0.0.6\"\nitems = [ { key = \"icmpping[::ffff:127.0.0.7]\", interval = \"10s\" } ]\n");
    let got: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        got,
        [
            "hosts[0].ip",
            "host_ranges[0].cidr",
            "hosts[1].items[0].key"
        ],
        "{e:#?}"
    );
    assert!(
        e.iter().all(|e| e.message.contains("IPv4-mapped")),
        "{e:#?}"
    );
    assert!(e[0].message.ends_with("write 127.0.0.5"), "{}", e[0]);
}

#[test]
fn itemids_are_derived_stably() {
    let text = format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\ntemplates = [\"icmp\"]\n"
    );
    let a = parse(&text).unwrap();
    let b = parse(&text).unwrap();
    let ids = |c: &Config| {
        c.hosts[0]
            .items
            .iter()
            .map(|i| i.itemid)
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(a.hosts[0].items[0].itemid, derive_itemid("a", "icmpping"));
    // Explicit ones are Zabbix's: from 1, below the derived range.
    for (id, why) in [(0u64, "start at 1"), (1 << 62, "from 2^62 on")] {
        let e = one_err(&format!("[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\nitems = [ {{ key = \"icmpping\", interval = \"10s\", itemid = {id} }} ]\n"));
        assert_eq!(e.path, "hosts[0].items[0].itemid");
        assert!(e.message.contains(why), "{e}");
    }
}

#[test]
fn five_mistakes_are_all_reported_with_lines() {
    let text = r#"[daemon]
shards = 4
spool_dri = "./spool"

[[templates]]
name = "icmp"
items = [ { key = "icmpping[,3,10]", interval = "10s" } ]

[[hosts]]
name = "a"
ip = "127.0.0.300"
templates = ["icmp"]

[[hosts]]
name = "a"
ip = "127.0.0.2"
templates = ["icnp"]

[[hosts]]
name = "b"
ip = "127.0.0.3"
items = [ { key = "ifInOctets", oid = "1.3.6.x", type = "uint", interval = "60s" } ]
"#;
    let e = errs(text);
    let rendered: Vec<String> = e.iter().map(|e| e.to_string()).collect();
    let want = [
        (3, "daemon.spool_dri", "unknown field `spool_dri`"),
        (
            7,
            "templates[0].items[0].key",
            "below Zabbix's minimum of 20 ms",
        ),
        (11, "hosts[0].ip", "\"127.0.0.300\" is not an IP address"),
        (15, "hosts[1].name", "duplicate host name \"a\""),
        (17, "hosts[1].templates[0]", "unknown template \"icnp\""),
        (22, "hosts[2].items[0].oid", "is not a numeric OID"),
    ];
    for (line, path, msg) in want {
        assert!(
            e.iter()
                .any(|x| x.line == Some(line) && x.path == path && x.message.contains(msg)),
            "missing line {line} {path} {msg:?} in {rendered:#?}"
        );
    }
    assert_eq!(e.len(), want.len(), "{rendered:#?}");
}

#[test]
fn durations_and_timeouts_are_bounded() {
    // Past 100 years no duration is read: an instant plus one could overflow (a panic).
    let e = one_err("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nrequest_timeout = \"18446744073709551615s\"\n");
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        (
            "clickhouse.request_timeout",
            "invalid duration \"18446744073709551615s\": longer than 100 years"
        )
    );
    assert!(
        parse("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nretention = \"99years\"\n").is_ok()
    );
    // SNMP timeouts: 10 ms..10 min, in [snmp] and a host's; retries 0..10. A bad
    // section value is reported once, at its key: not again at host "b", which sets
    // nothing of its own.
    let e = errs("[snmp]\ntimeout = \"0s\"\nretries = 11\n[[hosts]]\nname = \"a\"\nip = \"127.0.20.1\"\nsnmp = { timeout = \"11m\" }\nitems = [ { key = \"k\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" } ]\n[[hosts]]\nname = \"b\"\nip = \"127.0.20.2\"\nitems = [ { key = \"k\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" } ]\n");
    let got: Vec<(&str, &str)> = e
        .iter()
        .map(|e| (e.path.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("snmp.timeout", "0s is outside 10ms..10m"),
            ("snmp.retries", "11 is outside 0..10"),
            ("hosts[0].snmp.timeout", "11m is outside 10ms..10m")
        ]
    );
    // ICMP: Zabbix has no maximum interval or timeout; netpoller's is 10 minutes.
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping[,2,600001,,4294967295]\", interval = \"10s\" } ]\n");
    assert_eq!(e.message, "interval 600001 ms above the maximum of 600000 ms (10 min); timeout 4294967295 ms above the maximum of 600000 ms (10 min)");
    assert!(parse("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping[,2,600000,,600000]\", interval = \"20m\" } ]\n").is_ok());
}

/// Probes that outlast the item's interval are refused: every poll would come late
/// (and hold its sweep: 10,000 packets 10 minutes apart held 4,095 other hosts).
#[test]
fn icmp_probes_longer_than_the_items_interval_are_refused() {
    let e = bad(r#"{ key = "icmppingloss[,20,1000]", interval = "10s" }"#);
    assert_eq!(e.path, "hosts[0].items[0].key", "{e:?}");
    assert!(
        e.message.starts_with("its probes last 20s ((packets - 1) × interval + timeout), longer than the item's interval of 10s"),
        "{e}"
    );
    // From the [icmp] defaults, reported at the item that uses them.
    let e = one_err("[icmp]\npackets = 30\ninterval = \"1s\"\n[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n");
    assert_eq!(e.path, "hosts[0].items[0].key", "{e:?}");
    // As long as the interval: taken (the next poll is due as the probes end).
    assert!(parse("[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ { key = \"icmppingloss[,10,1000,,1000]\", interval = \"10s\" } ]\n").is_ok());
}

/// `icmppingretry` (Zabbix 7.4): an ICMP item of type uint whose probes last, for a
/// silent host, each try's timeout in a row.
#[test]
fn icmppingretry_items() {
    let c = parse("[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ { key = \"icmppingretry[,2,2.0,,1000]\", interval = \"10s\" }, { key = \"icmpping[,3]\", interval = \"10s\" } ]\n").unwrap();
    let items = &c.hosts[0].items;
    assert_eq!(items[0].value_type, ValueType::Uint);
    let ItemKind::Icmp { metric, probe } = &items[0].kind else {
        panic!("{:?}", items[0].kind)
    };
    assert_eq!(*metric, IcmpMetric::Ping);
    assert_eq!((probe.packets, probe.retry_backoff_pct), (3, 200));
    // 1 + 2 + 4 s: within 10 s; not within 5 s.
    let e = bad(r#"{ key = "icmppingretry[,2,2.0,,1000]", interval = "5s" }"#);
    assert!(
        e.message.starts_with("its probes last 7s (for a silent host: each try's timeout in a row), longer than the item's interval of 5s: every poll would come late; retry less or with a smaller backoff"),
        "{e}"
    );
}

#[test]
fn icmp_limits_are_checked_in_defaults_and_keys() {
    let e = errs("[icmp]\npackets = 0\ninterval = \"10ms\"\nsize = 65508\ntimeout = \"49ms\"\n");
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["icmp.packets", "icmp.interval", "icmp.size", "icmp.timeout"]
    );
    assert_eq!(e[0].line, Some(2));
    assert_eq!(e[3].line, Some(5));
    // A wrong default is said once, where it is written: not again at every key that
    // leaves it empty (whose text does not hold it). A key's own values are still
    // checked, and the section's right defaults still apply to the keys.
    let e = errs(
        "[icmp]\ninterval = \"10ms\"\npackets = 500\n[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\", interval = \"1m\" }, { key = \"icmppingloss[,,19]\", interval = \"10s\" }, { key = \"icmppingsec[,,,,1000]\", interval = \"9s\" } ]\n",
    );
    let got: Vec<(&str, &str)> = e.iter().map(|e| (&*e.path, &*e.message)).collect();
    assert_eq!(
        got,
        [
            (
                "icmp.interval",
                "interval 10 ms below Zabbix's minimum of 20 ms"
            ),
            (
                "templates[0].items[1].key",
                "interval 19 ms below Zabbix's minimum of 20 ms"
            ),
            (
                "templates[0].items[2].key",
                "its probes last 10s 980ms ((packets - 1) × interval + timeout), longer than the item's interval of 9s: every poll would come late; send fewer or closer packets, or poll less often"
            ),
        ],
        "{e:#?}"
    );
    let e = one_err(
        "[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping[,10001]\", interval = \"10s\" } ]\n",
    );
    assert!(e.message.contains("packets 10001"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmppingsec[,3,,23]\", interval = \"10s\" } ]\n");
    assert!(e.message.contains("size 23"), "{e}");
}

#[test]
fn snmp_items_must_say_oid_and_type() {
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"x\", interval = \"10s\", type = \"uint\" } ]\n");
    assert!(e.message.contains("needs an oid"), "{e}");
    assert_eq!(e.line, Some(3));
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"x\", oid = \"1.3.6.1\", interval = \"10s\" } ]\n");
    assert!(e.message.contains("needs a type"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"x\", oid = \"1.3.6.1\", type = \"int\", interval = \"10s\" } ]\n");
    assert!(e.message.contains("unknown variant `int`"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\", oid = \"1.3.6.1\", interval = \"10s\" } ]\n");
    assert!(e.message.contains("takes no oid"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\", type = \"str\", interval = \"10s\" } ]\n");
    assert!(e.message.contains("reports uint"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\" } ]\n");
    assert!(e.message.contains("no interval"), "{e}");
}

#[test]
fn snmp_item_keys_take_what_zabbix_takes() {
    // An SNMP item's key is a label, but Zabbix's syntax: `[` inside an unquoted
    // parameter, and one level of array.
    let cfg = parse(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [\n  { key = \"x.y[a[1]\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" },\n  { key = \"x.y[[a,b],c]\", oid = \"1.3.6.1.2.1.1.5.0\", type = \"str\", interval = \"10s\" },\n]\n",
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    let keys: Vec<(&str, u64)> = cfg.hosts[0]
        .items
        .iter()
        .map(|i| (&*i.key, i.itemid))
        .collect();
    assert_eq!(
        keys,
        [
            ("x.y[a[1]", derive_itemid("h", "x.y[a[1]")),
            ("x.y[[a,b],c]", derive_itemid("h", "x.y[[a,b],c]")),
        ]
    );
    let e = bad(
        r#"{ key = "x.y[[a,[b]]]", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "10s" }"#,
    );
    assert!(e.message.contains("multi-level array"), "{e}");
}

#[test]
fn bad_cidr_and_range_rules() {
    let e = one_err(&format!(
        "{TEMPLATE}\n[[host_ranges]]\ncidr = \"127.1.0.0/33\"\ntemplates = [\"icmp\"]\n"
    ));
    assert_eq!(e.path, "host_ranges[0].cidr");
    assert!(e.message.contains("is not a CIDR"));
    let e = one_err(&format!(
        "{TEMPLATE}\n[[host_ranges]]\ncidr = \"10.0.0.0/8\"\ntemplates = [\"icmp\"]\n"
    ));
    assert!(e.message.contains("more than the 1048576"), "{e}");
    let cfg = parse(&format!("{TEMPLATE}\n[[host_ranges]]\ncidr = \"127.1.0.0/22\"\nname = \"cpe-{{ip}}\"\ntemplates = [\"icmp\"]\n")).unwrap();
    assert_eq!(cfg.hosts.len(), 1022, "a /22 has 1022 host addresses");
    assert_eq!(&*cfg.hosts[0].name, "cpe-127.1.0.1");
    // A range colliding with a listed host's name.
    let e = one_err(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"cpe-127.1.0.1\"\nip = \"127.0.0.9\"\n[[host_ranges]]\ncidr = \"127.1.0.0/30\"\nname = \"cpe-{{ip}}\"\ntemplates = [\"icmp\"]\n"
    ));
    assert!(e.message.contains("repeats hosts[0]"), "{e}");
}

/// An IPv6 range's hosts: not its network address (Subnet-Router anycast, a router's),
/// never `::` (delivered to this host: it always read as up); a /127 link's two.
#[test]
fn ipv6_ranges_hold_devices_only() {
    let ips = |cidr: &str| -> Vec<String> {
        let c = parse(&format!("{TEMPLATE}\n[[host_ranges]]\ncidr = \"{cidr}\"\nname = \"r-{{ip}}\"\ntemplates = [\"icmp\"]\n"))
            .unwrap_or_else(|e| panic!("{cidr}: {e:#?}"));
        c.hosts.iter().map(|h| h.ip.to_string()).collect()
    };
    assert_eq!(ips("fd00::/126"), ["fd00::1", "fd00::2", "fd00::3"]);
    assert_eq!(ips("fd00::10/127"), ["fd00::10", "fd00::11"]);
    let e = one_err(&format!(
        "{TEMPLATE}\n[[host_ranges]]\ncidr = \"::/127\"\nname = \"r-{{ip}}\"\ntemplates = [\"icmp\"]\n"
    ));
    assert!(e.message.contains("the unspecified address ::"), "{e}");
}

/// The ranges' budget counts hosts, not addresses (a /24 is 254 of them), and says what
/// the ranges before a refused one left.
#[test]
fn the_ranges_budget_counts_their_hosts() {
    let range = |i: usize, cidr: &str| {
        format!(
            "[[host_ranges]]\ncidr = \"{cidr}\"\nname = \"r{i}-{{ip}}\"\ntemplates = [\"icmp\"]\n"
        )
    };
    let e = one_err(&format!("{TEMPLATE}\n{}", range(0, "127.0.0.0/11")));
    assert_eq!(
        e.message,
        "127.0.0.0/11 holds 2097150 hosts: more than the 1048576 one file's ranges may hold"
    );
    let e = one_err(&format!(
        "{TEMPLATE}\n{}{}",
        range(0, "127.1.0.0/24"),
        range(1, "127.0.0.0/12")
    ));
    assert_eq!(e.path, "host_ranges[1].cidr");
    assert_eq!(
        e.message,
        "127.0.0.0/12 holds 1048574 hosts: more than the 1048576 one file's ranges may hold (the ranges before it leave 1048322)"
    );
}

#[test]
fn source_ip_is_one_address_per_family() {
    let with = |v: &str| {
        format!("[daemon]\nsource_ip = {v}\n{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\ntemplates = [\"icmp\"]\n")
    };
    let addrs = |v: &str| {
        parse(&with(v))
            .unwrap_or_else(|e| panic!("{e:#?}"))
            .daemon
            .source_addrs()
    };
    let v4 = Some(std::net::Ipv4Addr::new(192, 0, 2, 10));
    assert_eq!(addrs(r#""192.0.2.10""#).v4, v4);
    let both = addrs(r#"["2001:db8::10", " 192.0.2.10 "]"#);
    assert_eq!(
        (both.v4, both.v6),
        (v4, Some("2001:db8::10".parse().unwrap()))
    );
    // Not set: the kernel chooses.
    let none = parse(&with("[]")).unwrap().daemon.source_addrs();
    assert_eq!(none, poller::source::SourceAddrs::default());
    for (v, says) in [
        (
            r#""router-1""#,
            "is not an IP address (names are not resolved)",
        ),
        (r#""0.0.0.0""#, "the unspecified address is no source"),
        (r#""ff02::1""#, "a multicast address is no source"),
        (
            r#"["192.0.2.10", "192.0.2.11"]"#,
            "at most one address per family",
        ),
        (r#""255.255.255.255""#, "the broadcast address is no source"),
        (r#""::ffff:127.0.0.9""#, "give the IPv4 address itself"),
        (
            r#""fe80::1""#,
            "a link-local IPv6 address needs an interface",
        ),
    ] {
        let e = one_err(&with(v));
        assert_eq!(e.path, "daemon.source_ip", "{e}");
        assert!(e.message.contains(says), "{v}: {e}");
    }
}

#[test]
fn keys_are_at_most_as_long_as_zabbix_stores_them() {
    let item = |key: &str| {
        format!(r#"{{ key = "{key}", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m" }}"#)
    };
    // 2,048 characters (not bytes: 'é' is two), as Zabbix's items.key_.
    let at_most = format!("k[{}]", "é".repeat(2_045));
    assert_eq!(at_most.chars().count(), 2_048);
    assert!(parse(&format!(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ {} ]\n",
        item(&at_most)
    ))
    .is_ok());
    let e = bad(&item(&format!("k[{}]", "é".repeat(2_046))));
    assert_eq!(e.path, "hosts[0].items[0].key", "{e}");
    assert!(
        e.message
            .contains("2049 characters: longer than Zabbix's 2048"),
        "{e}"
    );
}

#[test]
fn duplicate_itemids_and_keys() {
    // A host name used twice: that error alone, not one per item the two share.
    let e = one_err(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\ntemplates = [\"icmp\"]\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.6\"\ntemplates = [\"icmp\"]\n"
    ));
    assert!(e.message.starts_with("duplicate host name \"a\""), "{e}");
    let e = one_err(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\ntemplates = [\"icmp\"]\nitems = [{{ key = \"icmpping\", itemid = 7 }}]\n[[hosts]]\nname = \"b\"\nip = \"127.0.0.6\"\ntemplates = [\"icmp\"]\nitems = [{{ key = \"icmpping\", itemid = 7 }}]\n"
    ));
    assert!(
        e.message
            .contains("itemid 7 of b/icmpping is also used by a/icmpping"),
        "{e}"
    );
    // Within one host: two explicit items with the same itemid.
    let e = one_err("[[hosts]]\nname = \"c\"\nip = \"127.0.0.7\"\nitems = [{ key = \"icmpping\", itemid = 9, interval = \"10s\" }, { key = \"icmppingloss\", itemid = 9, interval = \"10s\" }]\n");
    assert!(
        e.message
            .contains("itemid 9 of c/icmppingloss is also used by c/icmpping"),
        "{e}"
    );
    // A third user is reported against the first, whose claim a rejected second user
    // must not erase.
    let e = errs(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\nitems = [{{ key = \"icmpping\", itemid = 7, interval = \"10s\" }}]\n[[hosts]]\nname = \"b\"\nip = \"127.0.0.6\"\nitems = [{{ key = \"icmpping\", itemid = 7, interval = \"10s\" }}]\n[[hosts]]\nname = \"c\"\nip = \"127.0.0.8\"\nitems = [{{ key = \"icmpping\", itemid = 7, interval = \"10s\" }}]\n"
    ));
    let got: Vec<(&str, &str)> = e.iter().map(|e| (&*e.path, &*e.message)).collect();
    assert_eq!(
        got,
        [
            (
                "hosts[1]",
                "itemid 7 of b/icmpping is also used by a/icmpping"
            ),
            (
                "hosts[2]",
                "itemid 7 of c/icmpping is also used by a/icmpping"
            ),
        ],
        "{e:#?}"
    );
    // A rejected host keeps its claims: a later host that shares an itemid with it is
    // reported in the same run, not only once the first is fixed.
    let e = errs("[[hosts]]\nname = \"a\"\nip = \"127.0.56.1\"\nitems = [{ key = \"icmpping\", itemid = 9, interval = \"10s\" }, { key = \"icmppingloss\", itemid = 9, interval = \"10s\" }, { key = \"icmppingsec\", itemid = 10, interval = \"10s\" }]\n[[hosts]]\nname = \"b\"\nip = \"127.0.56.2\"\nitems = [{ key = \"icmpping\", itemid = 10, interval = \"10s\" }]\n");
    let got: Vec<(&str, &str)> = e.iter().map(|e| (&*e.path, &*e.message)).collect();
    assert_eq!(
        got,
        [
            (
                "hosts[0]",
                "itemid 9 of a/icmppingloss is also used by a/icmpping"
            ),
            (
                "hosts[1]",
                "itemid 10 of b/icmpping is also used by a/icmppingsec"
            ),
        ],
        "{e:#?}"
    );
    // A range's derived itemid cannot be taken by a listed host: explicit itemids stay
    // below the derived range.
    let taken = derive_itemid("cpe-127.1.0.2", "icmpping");
    let e = one_err(&format!(
        "{TEMPLATE}\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\nitems = [{{ key = \"icmpping\", itemid = {taken}, interval = \"10s\" }}]\n[[host_ranges]]\ncidr = \"127.1.0.0/29\"\nname = \"cpe-{{ip}}\"\ntemplates = [\"icmp\"]\n"
    ));
    assert_eq!(e.path, "hosts[0].items[0].itemid", "{e}");
    assert!(e.message.contains("from 2^62 on"), "{e}");
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\", interval = \"10s\" }, { key = \"icmpping\", interval = \"20s\" } ]\n");
    assert!(e.message.contains("duplicate key"), "{e}");
    let e = one_err(&format!("{TEMPLATE}{TEMPLATE}"));
    assert!(e.message.contains("duplicate template name"), "{e}");
}

#[test]
fn every_refused_value_of_a_piece_is_reported_at_its_own_line() {
    let text = r#"[daemon]
shards = "four"
bogus = 1
spool_dir = 5

[[templates]]
name = "t1"
items = [
  { key = "icmpping", delay = "1m" },
  { key = "icmppingloss", interval = "1m" },
  { interval = "1m" },
  { key = "icmppingsec", interval = 5 },
]

[[hosts]]
name = "h1"
ip = "127.0.0.1"
templates = ["t1"]

[[hosts]]
name = "h2"
ip = "127.0.0.2"
templates = ["t2"]
"#;
    let e = errs(text);
    let got: Vec<(Option<usize>, &str, &str)> = e
        .iter()
        .map(|e| (e.line, e.path.as_str(), e.message.as_str()))
        .collect();
    let want = [
        (2, "daemon.shards", "invalid type: string \"four\""),
        (3, "daemon.bogus", "unknown field `bogus`"),
        (4, "daemon.spool_dir", "invalid type: integer `5`"),
        (9, "templates[0].items[0].delay", "unknown field `delay`"),
        (11, "templates[0].items[2]", "missing field `key`"),
        // Found after items[2] was taken out: still numbered as in the file.
        (
            12,
            "templates[0].items[3].interval",
            "durations are strings with a unit, not 5: \"5s\"",
        ),
        // h1 uses t1, which could not be read: no "unknown template" for it.
        (
            23,
            "hosts[1].templates[0]",
            "unknown template \"t2\": did you mean \"t1\"? (defined: [\"t1\"])",
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((line, path, msg), g) in want.iter().zip(&got) {
        assert_eq!((Some(*line), *path), (g.0, g.1), "{got:#?}");
        assert!(g.2.starts_with(msg), "{msg:?} in {got:#?}");
    }
}

#[test]
fn unknown_keys_are_told_their_name_here() {
    let e = one_err("[daemon]\nspool_dri = \"/tmp\"\n");
    assert!(
        e.message.starts_with(
            "unknown field `spool_dri` (did you mean `spool_dir`?), expected one of `shards`"
        ),
        "{e}"
    );
    let e = one_err(
        "[[templates]]\nname = \"t\"\nitems = [ { key = \"icmpping\", delay = \"1m\" } ]\n",
    );
    assert!(
        e.message
            .starts_with("unknown field `delay` (Zabbix's `delay` is `interval` here), expected"),
        "{e}"
    );
    // No hint for a key like none of those expected.
    let e = one_err("[daemon]\nfoo = 1\n");
    assert!(
        e.message.starts_with("unknown field `foo`, expected"),
        "{e}"
    );
}

/// A key of another table (`timeout` in `[daemon]`, an item's `interval` beside a host's
/// name, a `[daemon]` key above every header) is told which tables have it, and a typo
/// of one the key meant; it was "unknown field" and this table's keys, none of them it.
#[test]
fn a_key_of_another_table_is_told_where_it_goes() {
    let host = "[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n";
    for (text, path, hint) in [
        (
            "[daemon]\ntimeout = \"1s\"\n".to_string(),
            "daemon.timeout",
            "unknown field `timeout` (a key of `[icmp]`, `[snmp]` and a host's `snmp = { ... }`, not of this table), expected one of `shards`",
        ),
        (
            "[snmp]\npackets = 3\n".to_string(),
            "snmp.packets",
            "unknown field `packets` (a key of `[icmp]`, not of this table), expected one of `version`",
        ),
        (
            format!("{host}snmp = {{ max_pps = 100 }}\n"),
            "hosts[0].snmp.max_pps",
            "unknown field `max_pps` (a key of `[icmp]` and `[snmp]`, not of this table), expected one of `version`",
        ),
        (
            format!("{host}intervall = \"10s\"\n"),
            "hosts[0].intervall",
            "unknown field `intervall` (did you mean `interval`? a key of `[icmp]`, an item (`items = [{ ... }]`) and a discovery rule (`discovery = [{ ... }]`), not of this table), expected one of `name`",
        ),
        (
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nspool_dir = \"/var/spool\"\n".to_string(),
            "clickhouse.spool_dir",
            "unknown field `spool_dir` (a key of `[daemon]`, not of this table), expected one of `url`",
        ),
        // A community is a secret's key: its name is said, never its value.
        (
            "[daemon]\ncommunity = \"s3cret\"\n".to_string(),
            "daemon.community",
            "unknown field `community` (a key of `[snmp]` and a host's `snmp = { ... }`, not of this table), expected one of `shards`",
        ),
        (
            format!("shards = 8\n{host}"),
            "shards",
            "unknown section `shards` (a key of `[daemon]`: write it under its table's header), expected one of: daemon",
        ),
    ] {
        let e = one_err(&text);
        assert_eq!(e.path, path, "{e}");
        assert!(e.message.starts_with(hint), "{text}\n{e}");
        assert!(!e.message.contains("s3cret"), "{e}");
    }
    // Every table's keys are known: a struct serde reads as a map (`flatten`) would
    // give none, and its keys would never be pointed to.
    for (place, keys) in key_places() {
        assert!(!keys.is_empty(), "{place}");
    }
}

#[test]
fn snmp_versions_as_strings_or_integers() {
    for (v, want) in [
        ("\"1\"", SnmpVersion::V1),
        ("1", SnmpVersion::V1),
        ("\"2c\"", SnmpVersion::V2c),
        ("2", SnmpVersion::V2c),
        ("\"3\"", SnmpVersion::V3),
        ("3", SnmpVersion::V3),
        // In any case, as the levels and protocols: "V3" was refused.
        ("\"V3\"", SnmpVersion::V3),
        ("\"2C\"", SnmpVersion::V2c),
        ("\"V2c\"", SnmpVersion::V2c),
    ] {
        let text = format!("[snmp]\nversion = {v}\n");
        let cfg = parse(&text).unwrap_or_else(|e| panic!("{v}: {e:#?}"));
        assert_eq!(SnmpVersion::from(cfg.snmp.version), want, "{v}");
    }
    let e = one_err("[snmp]\nversion = 7\n");
    assert_eq!(
        e.to_string(),
        "line 2: snmp.version: unsupported SNMP version \"7\" (use 1, 2c or 3)"
    );
    let e = one_err("[snmp]\nversion = 2.0\n");
    assert!(e.message.contains("expected an SNMP version"), "{e}");
}

#[test]
fn a_section_with_a_refused_key_still_has_its_other_keys_checked() {
    // `shardz` refused; the keys read without it are checked in the same run (they
    // were replaced by defaults, and showed only after `shardz` was fixed).
    let e = errs("[daemon]\nshardz = 4\nbatch_window = \"11s\"\nchannel_capacity = 0\n");
    let got: Vec<(&str, Option<usize>)> = e.iter().map(|e| (e.path.as_str(), e.line)).collect();
    assert_eq!(
        got,
        [
            ("daemon.shardz", Some(2)),
            ("daemon.batch_window", Some(3)),
            ("daemon.channel_capacity", Some(4))
        ]
    );
    let e = errs("[snmp]\nversion = 4\ntimeout = \"9ms\"\n");
    let got: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(got, ["snmp.version", "snmp.timeout"]);
}

#[test]
fn a_piece_with_more_refused_values_than_listed_says_so() {
    let keys: String = (0..40).map(|i| format!("k{i} = 1\n")).collect();
    let e = errs(&format!("[icmp]\n{keys}"));
    assert_eq!(e.len(), 33, "32 refused keys and the note");
    let note: Vec<_> = e
        .iter()
        .filter(|e| e.message.starts_with("more refused values not listed"))
        .collect();
    assert_eq!(note.len(), 1, "{e:#?}");
    assert_eq!((note[0].path.as_str(), note[0].line), ("icmp", Some(1)));
}

#[test]
fn unknown_sections_and_syntax_errors() {
    let e = one_err("[deamon]\nshards = 2\n");
    assert_eq!(e.line, Some(1));
    assert!(
        e.message
            .contains("unknown section `deamon` (did you mean `daemon`?)"),
        "{e}"
    );
    let e = one_err("[daemon]\nshards = \n");
    assert_eq!(e.line, Some(2));
    // A refused value is reported at its own key and line, not at its section's.
    let e = one_err("[snmp]\n\nversion = \"4\"\n");
    assert!(e.message.contains("unsupported SNMP version \"4\""), "{e}");
    assert_eq!((e.path.as_str(), e.line), ("snmp.version", Some(3)));
    let e = one_err("[[templates]]\nname = \"t\"\nitems = [\n  { key = \"icmpping\" },\n  { key = \"icmpping\", interval = 5 },\n]\n");
    assert!(
        e.message.starts_with("durations are strings with a unit"),
        "{e}"
    );
    assert_eq!(
        (e.path.as_str(), e.line),
        ("templates[0].items[1].interval", Some(5))
    );
    let e = one_err("[daemon]\nshardz = 3\n");
    assert_eq!((e.path.as_str(), e.line), ("daemon.shardz", Some(2)));
    let e = one_err("[snmp]\nmax_oids_per_request = 0\n");
    assert_eq!(e.path, "snmp.max_oids_per_request");
    let e = one_err("[daemon]\nshard = \"2/2\"\n");
    assert!(e.message.contains("0 <= i < N"), "{e}");
    let e = one_err("[daemon]\nmetrics_listen = \"localhost:9464\"\n");
    assert!(e.message.contains("not an IP:port"), "{e}");
    let e = one_err("[daemon]\nspool_max_bytes = 0\n");
    assert!(e.message.contains("keep nothing"), "{e}");
    let e = one_err("[snmp]\nport = 0\n");
    assert_eq!(e.path, "snmp.port");
    let e = one_err("[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nsnmp = { port = 0 }\nitems = [ { key = \"u\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1m\" } ]\n");
    assert_eq!(e.path, "hosts[0].snmp.port");
    let e = one_err("[daemon]\ntrends_checkpoint = \"500ms\"\n");
    assert_eq!(e.path, "daemon.trends_checkpoint");
    assert!(e.message.contains("0s (never) or at least 1s"), "{e}");
}

#[test]
fn host_snmp_overrides_and_secrets_stay_out_of_debug() {
    let cfg = parse(
        "[snmp]\ncommunity = \"topsecret-default\"\n[[hosts]]\nname = \"a\"\nip = \"127.0.0.5\"\nsnmp = { community = \"topsecret-host\", port = 1161, retries = 3 }\nitems = [ { key = \"up\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"30s\" } ]\n",
    )
    .unwrap();
    let s = cfg.hosts[0].snmp.as_ref().unwrap();
    assert_eq!(
        (s.port, s.retries, &*s.community),
        (1161, 3, "topsecret-host")
    );
    let dbg = format!("{cfg:?}");
    assert!(!dbg.contains("topsecret"), "secret in Debug output: {dbg}");
}

#[test]
fn shard_selection_splits_hosts() {
    let text = format!("{TEMPLATE}\n[[host_ranges]]\ncidr = \"127.1.0.0/24\"\nname = \"cpe-{{ip}}\"\ntemplates = [\"icmp\"]\n");
    let (mut c1, mut c2) = (parse(&text).unwrap(), parse(&text).unwrap());
    let a = c1.take_hosts_for_shard((0, 2));
    let b = c2.take_hosts_for_shard((1, 2));
    assert_eq!(a.len() + b.len(), 254);
    assert!(a.iter().all(|h| !b.iter().any(|g| g.name == h.name)));
    assert_eq!(parse_shard("1/3"), Ok((1, 3)));
    assert!(parse_shard("3/3").is_err());
    assert!(parse_shard("x").is_err());
}

#[test]
fn icmp_phases_group_hosts_unless_spread_is_asked_for() {
    let hosts =
        "[[host_ranges]]\ncidr = \"127.1.0.0/26\"\nname = \"cpe-{ip}\"\ntemplates = [\"icmp\"]\n";
    let phases = |daemon: &str| {
        let mut cfg = parse(&format!("{daemon}\n{TEMPLATE}\n{hosts}")).unwrap();
        let plan = cfg.take_plan(None, || {});
        assert_eq!(plan.tasks.len(), 62);
        let mut p: Vec<u64> = plan.tasks.iter().map(|t| t.phase_ms).collect();
        p.sort();
        p.dedup();
        p.len()
    };
    // Default: 62 hosts fit one sweep, so one phase.
    assert_eq!(phases(""), 1);
    assert_eq!(phases("[daemon]\nicmp_phases = \"grouped\""), 1);
    // Sweeps of at most 16 hosts: 6 groups of ~10 (room for the hash's spread).
    assert_eq!(phases("[daemon]\nicmp_batch_hosts = 16"), 6);
    // Zabbix's way: every host on its own offset.
    assert!(phases("[daemon]\nicmp_phases = \"spread\"") > 50);
    let e = one_err("[daemon]\nicmp_phases = \"even\"\n");
    assert_eq!((e.path.as_str(), e.line), ("daemon.icmp_phases", Some(2)));
    assert!(e.message.contains("unknown variant `even`"), "{e}");
}

const V3_HOSTS: &str = r#"
[[templates]]
name = "sys"
items = [ { key = "sysName", oid = "1.3.6.1.2.1.1.5.0", type = "str", interval = "1m" } ]
[[hosts]]
name = "a"
ip = "127.0.20.1"
templates = ["sys"]
[[hosts]]
name = "b"
ip = "127.0.20.2"
templates = ["sys"]
[[hosts]]
name = "c"
ip = "127.0.20.3"
templates = ["sys"]
snmp = { security_name = "other", auth_protocol = "MD5", auth_passphrase = "other-secret-1", priv_protocol = "DES", priv_passphrase = "other-secret-2" }
[[hosts]]
name = "d"
ip = "127.0.20.4"
templates = ["sys"]
snmp = { version = "2c", community = "s3cret" }
"#;

#[test]
fn snmpv3_users_of_other_contexts_share_their_keys() {
    // One switch's VLANs, each polled in its context (Cisco's "vlan-N") with the same
    // credentials: their passphrases are hashed once (~1 MiB each), not per context.
    let text = r#"
[snmp]
version = "3"
security_name = "np-shaaes"
auth_protocol = "SHA"
auth_passphrase = "topsecret-auth"
priv_protocol = "AES"
priv_passphrase = "topsecret-priv"
[[templates]]
name = "sys"
items = [ { key = "sysName", oid = "1.3.6.1.2.1.1.5.0", type = "str", interval = "1m" } ]
[[hosts]]
name = "sw"
ip = "127.0.53.1"
templates = ["sys"]
[[hosts]]
name = "sw-vlan-10"
ip = "127.0.53.1"
templates = ["sys"]
snmp = { context_name = "vlan-10" }
[[hosts]]
name = "sw-vlan-20"
ip = "127.0.53.1"
templates = ["sys"]
snmp = { context_name = "vlan-20" }
"#;
    let before = snmp::usm::keys_derived();
    let cfg = parse(text).unwrap_or_else(|e| panic!("{e:#?}"));
    // Two passphrases, two keys.
    assert_eq!(snmp::usm::keys_derived() - before, 2);
    let users: Vec<_> = cfg
        .hosts
        .iter()
        .map(|h| h.snmp.as_ref().unwrap().usm.clone().unwrap())
        .collect();
    let contexts: Vec<&[u8]> = users.iter().map(|u| u.context()).collect();
    assert_eq!(contexts, [&b""[..], b"vlan-10", b"vlan-20"]);
    assert!(users
        .iter()
        .all(|u| u.name() == b"np-shaaes" && u.level() == snmp::v3::SecurityLevel::AuthPriv));
}

#[test]
fn snmpv3_users_resolve_once_and_their_secrets_stay_out_of_debug() {
    let text = format!(
        "[snmp]\nversion = \"3\"\nsecurity_name = \"np-shaaes\"\nauth_protocol = \"sha\"\nauth_passphrase = \"topsecret-auth\"\npriv_protocol = \"AES\"\npriv_passphrase = \"topsecret-priv\"\ncontext_name = \"ctx\"\n{V3_HOSTS}"
    );
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    let p: Vec<_> = cfg.hosts.iter().map(|h| h.snmp.clone().unwrap()).collect();
    let user = |i: usize| p[i].usm.clone();
    let (a, b, c) = (user(0).unwrap(), user(1).unwrap(), user(2).unwrap());
    // Same fields, one user (its keys derived once); the level follows the passphrases.
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.level(), snmp::v3::SecurityLevel::AuthPriv);
    assert_eq!(a.auth_protocol(), Some(snmp::usm::AuthProtocol::Sha1));
    assert_eq!((a.name(), a.context()), (&b"np-shaaes"[..], &b"ctx"[..]));
    // A host's own fields override [snmp]'s one by one (context_name is inherited).
    assert_eq!(c.name(), b"other");
    assert_eq!(c.priv_protocol(), Some(snmp::usm::PrivProtocol::Des));
    assert_eq!(c.context(), b"ctx");
    assert_eq!(p[2].version, SnmpVersion::V3);
    // A v2c host under a v3 [snmp] has no user.
    assert_eq!((p[3].version, p[3].usm.is_none()), (SnmpVersion::V2c, true));
    let dbg = format!("{cfg:?}");
    assert!(
        !dbg.contains("topsecret") && !dbg.contains("other-secret"),
        "secret in Debug: {dbg}"
    );
    // No passphrase: noAuthNoPriv.
    let cfg = parse(&format!(
        "[snmp]\nversion = \"3\"\nsecurity_name = \"np-noauth\"\n{V3_HOSTS}"
    ))
    .unwrap_or_else(|e| panic!("{e:#?}"));
    let u = cfg.hosts[0].snmp.as_ref().unwrap().usm.clone().unwrap();
    assert_eq!(u.level(), snmp::v3::SecurityLevel::NoAuthNoPriv);
}

#[test]
fn snmpv3_mistakes_are_reported_once_at_their_key_without_secrets() {
    // Missing user: once, at [snmp] (all four SNMP hosts inherit it), not per host; host
    // c's own fields are reported at its own table; the ICMP-only host is not at fault.
    let text = format!(
        "[snmp]\nversion = \"3\"\n{V3_HOSTS}{TEMPLATE}\n[[hosts]]\nname = \"pingonly\"\nip = \"127.0.20.9\"\ntemplates = [\"icmp\"]\n"
    );
    let e = errs(&text.replace(
        "security_name = \"other\", ",
        "security_name = \"other\", security_level = \"authPriv\", ",
    ));
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["snmp.security_name"], "{e:#?}");
    assert!(e[0].message.contains("needs a security_name"), "{}", e[0]);
    assert_eq!(e[0].line, Some(1), "the [snmp] header: the key is missing");

    let cases = [
        ("security_level = \"authPriv\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"secret-aa\"", "snmp.priv_protocol", "needs priv_protocol (DES, AES, AES-192"),
        ("auth_passphrase = \"secret-aa\"", "snmp.auth_protocol", "authNoPriv needs auth_protocol"),
        ("auth_protocol = \"SHA-1024\"\nauth_passphrase = \"secret-aa\"", "snmp.auth_protocol", "SHA-256"),
        ("auth_protocol = \"MD5\"\nauth_passphrase = \"short\"", "snmp.auth_passphrase", "at least 8 characters"),
        ("security_level = \"private\"", "snmp.security_level", "noAuthNoPriv, authNoPriv or authPriv"),
        ("auth_protocol = \"SHA\"", "snmp.auth_passphrase", "authentication is set, but the security level is noAuthNoPriv"),
        ("security_level = \"authNoPriv\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"secret-aa\"\npriv_protocol = \"AES\"", "snmp.priv_passphrase", "privacy is set, but the security level is authNoPriv"),
        ("auth_protocol = \"MD5\"\nauth_passphrase = \"secret-aa\"\npriv_protocol = \"3DES\"\npriv_passphrase = \"secret-bb\"", "snmp.priv_protocol", "DES"),
    ];
    for (fields, path, msg) in cases {
        let text = format!(
            "[snmp]\nversion = \"3\"\nsecurity_name = \"u\"\n{fields}\n{}",
            &V3_HOSTS[..V3_HOSTS.find("[[hosts]]\nname = \"c\"").unwrap()]
        );
        let e = one_err(&text);
        assert_eq!(e.path, path, "{fields}: {e}");
        assert!(e.message.contains(msg), "{fields}: {e}");
        assert!(
            !e.message.contains("secret-") && !e.message.contains("short"),
            "secret in {e}"
        );
    }
}

/// An item's OID written as a MIB name is told how to get its number, at its line; a
/// discovery rule's column too.
#[test]
fn a_mib_name_for_an_oid_is_told_how_to_get_its_number() {
    let e =
        bad(r#"{ key = "in", oid = "IF-MIB::ifHCInOctets.1", type = "uint", interval = "1m" }"#);
    assert_eq!(
        (e.path.as_str(), e.line),
        ("hosts[0].items[0].oid", Some(4))
    );
    assert!(
        e.message.ends_with(
            "netpoller reads no MIBs (`snmptranslate -On IF-MIB::ifHCInOctets.1` gives the number)"
        ),
        "{e}"
    );
    let e = one_err("[[templates]]\nname = \"t\"\ndiscovery = [ { name = \"r\", oid = \"ifType\" } ]\nitems = [ { key = \"x[{#SNMPINDEX}]\", oid = \"1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}\", type = \"uint\", interval = \"1m\", discovery = \"r\" } ]\n");
    assert_eq!(e.path, "templates[0].discovery[0].oid", "{e}");
    assert!(e.message.contains("`snmptranslate -On ifType`"), "{e}");
}

/// A range's cidr that does not parse says why when it can: no prefix length, or one
/// too long for the family; it said only `is not a CIDR like 127.1.0.0/22`.
#[test]
fn a_cidr_without_or_with_too_long_a_prefix_says_so() {
    let err = |cidr: &str| {
        one_err(&format!(
            "{TEMPLATE}[[host_ranges]]\ncidr = \"{cidr}\"\ntemplates = [\"icmp\"]\n"
        ))
        .to_string()
    };
    assert_eq!(
        err("127.0.156.0"),
        "line 10: host_ranges[0].cidr: \"127.0.156.0\" is not a CIDR like 127.1.0.0/22: no prefix length (a network, 127.0.156.0/32 for this address alone, or list it as a [[hosts]] entry)"
    );
    assert!(err("127.0.156.0/33").ends_with("127.1.0.0/22: the prefix length is at most 32"));
    assert!(err("2001:db8::/129").ends_with(": the prefix length is at most 128"));
    assert!(err("127.0.156.x/24").ends_with("is not a CIDR like 127.1.0.0/22"));
}

/// `community = "..."` (or any SNMP setting) written in a host or range beside
/// `snmp` instead of inside it is told where it goes; it was "unknown field (the value
/// of a secret is not shown)". Every key `snmp = { ... }` lists in its own unknown-field
/// message (serde's, independent of `snmp_keys`) gets the hint beside it and loads in it.
#[test]
fn an_snmp_setting_beside_snmp_is_told_to_go_in_it() {
    let host = |line: &str| {
        format!("{TEMPLATE}[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\ntemplates = [\"icmp\"]\n{line}\n")
    };
    let e = one_err(&host("community = \"s3cret\""));
    assert_eq!(e.path, "hosts[0].community", "{e}");
    assert!(
        e.message.starts_with("unknown field `community` (an SNMP setting: write it in `snmp = { community = ... }`), expected one of"),
        "{e}"
    );
    assert!(!e.message.contains("s3cret"), "{e}");
    let e = one_err(&format!("{TEMPLATE}[[host_ranges]]\ncidr = \"127.0.156.0/30\"\ntemplates = [\"icmp\"]\nport = 1161\n"));
    assert!(
        e.message.contains("write it in `snmp = { port = ... }`"),
        "{e}"
    );
    // A typo of a host's own key is still one.
    assert!(one_err(&host("tempaltes = []"))
        .message
        .contains("did you mean `templates`?"));
    let e = one_err(&host("snmp = { nonsense = 1 }"));
    let listed: Vec<&str> = e
        .message
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("{e}"))
        .1
        .split('`')
        .skip(1)
        .step_by(2)
        .collect();
    assert!(
        listed.contains(&"community") && listed.contains(&"max_inflight_per_host"),
        "{e}"
    );
    let mut keys = super::snmp_keys().to_vec();
    keys.sort_unstable();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(
        keys, sorted,
        "snmp_keys() is not the keys of snmp = {{ ... }}"
    );
    for key in listed {
        let beside = one_err(&host(&format!("{key} = 1")));
        assert!(
            beside
                .message
                .contains(&format!("write it in `snmp = {{ {key} = ... }}`")),
            "{beside}"
        );
        let value = match key {
            "port" | "retries" | "max_oids_per_request" | "max_inflight_per_host" => "1",
            "timeout" => "\"1s\"",
            "version" => "\"2c\"",
            _ => "\"x\"",
        };
        let text = host(&format!("snmp = {{ {key} = {value} }}"));
        let unknown = errs_or_none(&text)
            .into_iter()
            .any(|e| e.message.contains("unknown field"));
        assert!(!unknown, "{key} is not a key of snmp = {{ ... }}");
    }
}

/// A host's `ip` written as a name or a network says what to write instead.
#[test]
fn a_host_ip_that_is_a_name_or_a_network_says_what_to_write() {
    let err = |ip: &str| {
        one_err(&format!(
            "{TEMPLATE}[[hosts]]\nname = \"h\"\nip = \"{ip}\"\ntemplates = [\"icmp\"]\n"
        ))
        .to_string()
    };
    assert_eq!(
        err("localhost"),
        "line 11: hosts[0].ip: \"localhost\" is not an IP address: names are never resolved, write the device's address"
    );
    assert!(err("127.0.20.0/24").ends_with(
        "is not an IP address: a network is a [[host_ranges]] entry's cidr; a host has one address"
    ));
    assert!(err("fe80::1/64").ends_with("a host has one address"));
    assert!(err("127.0.20.1-9").ends_with(
        "is not an IP address: a run of addresses is a [[host_ranges]] entry's range; a host has one address"
    ));
    assert!(err("127.0.20.300").ends_with("\"127.0.20.300\" is not an IP address"));
    // An address with its port (a Prometheus target), a Zabbix macro: said as such.
    for ip in ["127.0.20.1:1161", "[::1]:161"] {
        assert!(
            err(ip).ends_with("is not an IP address: write the address alone, the SNMP port as snmp = { port = ... }"),
            "{}",
            err(ip)
        );
    }
    for ip in ["{HOST.IP}", "{$SWITCH_IP}"] {
        assert!(
            err(ip).ends_with("is not an IP address: a Zabbix macro; netpoller resolves none: write the device's address"),
            "{}",
            err(ip)
        );
    }
}

/// A `[[host_ranges]]` entry of `cidr` whose hosts are named `{name}-{ip}`, of the
/// `icmp` template.
fn icmp_range(cidr: &str, name: &str) -> String {
    icmp_addresses("cidr", cidr, name)
}

/// A `[[host_ranges]]` entry whose addresses are `key = "value"` (`cidr` or `range`),
/// its hosts named `{name}-{ip}`, of the `icmp` template.
fn icmp_addresses(key: &str, value: &str, name: &str) -> String {
    format!(
        "[[host_ranges]]\n{key} = \"{value}\"\nname = \"{name}-{{ip}}\"\ntemplates = [\"icmp\"]\n"
    )
}

/// A `range` (FIRST-LAST) entry polls every address from the first to the last, both
/// included, network and broadcast addresses too (the range says which), as `sweep`
/// takes it; the last number alone is the first's last; what is wrong is said at
/// `range`, a range written as `cidr` (or a network as `range`) with the key it goes
/// in, and an entry needs one of the two.
#[test]
fn a_range_entry_polls_every_address_from_first_to_last() {
    let names = |range: &str| -> Vec<String> {
        let c = parse(&format!(
            "{TEMPLATE}{}",
            icmp_addresses("range", range, "p")
        ))
        .unwrap_or_else(|e| panic!("{range}: {e:#?}"));
        c.hosts.iter().map(|h| h.name.to_string()).collect()
    };
    assert_eq!(
        names("127.0.231.254-127.0.232.1"),
        [
            "p-127.0.231.254",
            "p-127.0.231.255",
            "p-127.0.232.0",
            "p-127.0.232.1"
        ]
    );
    assert_eq!(
        names("127.0.231.7-9"),
        ["p-127.0.231.7", "p-127.0.231.8", "p-127.0.231.9"]
    );
    assert_eq!(names("fd00::ff-fd00::100"), ["p-fd00::ff", "p-fd00::100"]);
    let err = |entry: &str| {
        let e = one_err(&format!(
            "{TEMPLATE}[[host_ranges]]\n{entry}\ntemplates = [\"icmp\"]\n"
        ));
        (e.path, e.message)
    };
    let at = |k: &str| format!("host_ranges[0]{k}");
    assert_eq!(
        err("range = \"127.0.231.9-127.0.231.1\""),
        (at(".range"), "invalid range \"127.0.231.9-127.0.231.1\": it runs backwards (write the lower address first)".into())
    );
    assert_eq!(
        err("range = \"127.0.231.0/29\""),
        (
            at(".range"),
            "\"127.0.231.0/29\" is a network: write it as cidr = \"127.0.231.0/29\"".into()
        )
    );
    assert_eq!(
        err("range = \"127.0.231.1\""),
        (at(".range"), "\"127.0.231.1\" is not a range like 127.1.0.10-127.1.0.99 (or 127.1.0.10-99: the last number alone)".into())
    );
    assert_eq!(
        err("cidr = \"127.0.231.1-127.0.231.5\""),
        (at(".cidr"), "\"127.0.231.1-127.0.231.5\" is a range of addresses: write it as range = \"127.0.231.1-127.0.231.5\"".into())
    );
    assert_eq!(
        err("cidr = \"127.0.231.0/29\"\nrange = \"127.0.231.1-5\""),
        (
            at(".range"),
            "cidr and range are both given: an entry has one of them (two entries poll both)"
                .into()
        )
    );
    assert_eq!(
        err("name = \"p-{ip}\""),
        (at(""), "a [[host_ranges]] entry needs cidr (a network: 198.51.100.0/24) or range (its first and last addresses: 198.51.100.10-198.51.100.99)".into())
    );
    let (path, message) = err("range = \"224.0.0.1-224.0.0.9\"");
    assert_eq!(path, at(".range"));
    assert!(message.contains("multicast"), "{message}");
    // The ranges' budget, at the key that asks too much.
    assert_eq!(
        err("range = \"127.0.0.0-127.31.255.255\""),
        (at(".range"), "127.0.0.0-127.31.255.255 holds 2097152 hosts: more than the 1048576 one file's ranges may hold".into())
    );
}

/// Ranges overlap where CIDRs only nest: one inside another is warned of as a CIDR
/// inside another, one that overlaps another in part names the addresses polled twice,
/// whichever kinds they are; a range that begins at a CIDR's broadcast address (no
/// host of it) overlaps nothing. A host inside a range is warned of as inside a CIDR.
#[test]
fn ranges_that_overlap_are_warned_of_with_the_addresses_they_share() {
    let text = format!(
        "{TEMPLATE}{}{}{}{}{}{}[[hosts]]\nname = \"h\"\nip = \"127.0.233.4\"\ntemplates = [\"icmp\"]\n",
        icmp_addresses("cidr", "127.0.231.0/28", "a"),
        icmp_addresses("range", "127.0.231.3-5", "b"),
        icmp_addresses("range", "127.0.231.10-127.0.231.20", "c"),
        icmp_addresses("range", "127.0.232.0-127.0.232.10", "d"),
        icmp_addresses("cidr", "127.0.232.4/30", "e"),
        icmp_addresses("range", "127.0.233.0-127.0.233.9", "f"),
    );
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        [
            "line 14: host_ranges[1].range: 127.0.231.3-127.0.231.5 is inside host_ranges[0] (127.0.231.0/28, line 10): each of its 3 addresses is polled twice, as a host of each range (one range with both ranges' templates polls them once)",
            "line 18: host_ranges[2].range: 127.0.231.10-127.0.231.20 overlaps host_ranges[0] (127.0.231.0/28, line 10): each of the 5 addresses both hold, from 127.0.231.10 to 127.0.231.14, is polled twice, as a host of each range (ranges apart, or one with the other's addresses in its exclude, poll each address once)",
            "line 26: host_ranges[4].cidr: 127.0.232.4/30 is inside host_ranges[3] (127.0.232.0-127.0.232.10, line 22): each of its 2 addresses is polled twice, as a host of each range (one range with both ranges' templates polls them once)",
            "line 35: hosts[0].ip: 127.0.233.4 is inside host_ranges[5] (127.0.233.0-127.0.233.9, line 30), which polls it by ICMP too: it is polled twice, as this host and as a host of the range (this host with the range's templates too, and the range with it in its exclude, poll it once)",
        ],
    );
    // From the CIDR's broadcast address on: no host of both.
    let after = text.replace("127.0.231.10-127.0.231.20", "127.0.231.15-127.0.231.20");
    let cfg = parse(&after).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(cfg.warnings.len(), 3, "{:#?}", cfg.warnings);
    // What one leaves out the other polls alone: the warnings go with it, as the
    // advice says (a part left out counts no more).
    let left_out = text
        .replace(
            "range = \"127.0.231.10-127.0.231.20\"\n",
            "range = \"127.0.231.10-127.0.231.20\"\nexclude = [\"127.0.231.10-14\"]\n",
        )
        .replace(
            "cidr = \"127.0.232.4/30\"\n",
            "cidr = \"127.0.232.4/30\"\nexclude = [\"127.0.232.5\"]\n",
        )
        .replace(
            "range = \"127.0.233.0-127.0.233.9\"\n",
            "range = \"127.0.233.0-127.0.233.9\"\nexclude = [\"127.0.233.4\"]\n",
        );
    let cfg = parse(&left_out).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].starts_with("line 14: host_ranges[1].range: "),
        "{w:#?}"
    );
    assert!(
        w[1].starts_with("line 27: host_ranges[4].cidr: 127.0.232.4/30 is inside host_ranges[3] (127.0.232.0-127.0.232.10, line 23): its address is polled twice"),
        "{w:#?}"
    );
    // A host in what a range leaves out, held by a range inside it: named with that one.
    let nested = format!(
        "{TEMPLATE}{}exclude = [\"127.0.233.0/29\"]\n{}[[hosts]]\nname = \"h\"\nip = \"127.0.233.4\"\ntemplates = [\"icmp\"]\n",
        icmp_addresses("range", "127.0.233.0-127.0.233.20", "a"),
        icmp_addresses("range", "127.0.233.2-127.0.233.6", "b"),
    );
    let cfg = parse(&nested).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].contains(
            "hosts[0].ip: 127.0.233.4 is inside host_ranges[1] (127.0.233.2-127.0.233.6, line 15)"
        ),
        "{w:#?}"
    );
}

/// `exclude` leaves addresses of a range unpolled: addresses, CIDRs (all of their
/// addresses) and ranges; one that holds none of the range's, or does not parse, is an
/// error at its place, as is leaving out all of them. The ranges' budget counts what
/// is polled.
#[test]
fn exclude_leaves_addresses_of_a_range_out() {
    let names = |entry: &str| -> Vec<String> {
        let c = parse(&format!("{TEMPLATE}{entry}")).unwrap_or_else(|e| panic!("{e:#?}"));
        c.hosts.iter().map(|h| h.ip.to_string()).collect()
    };
    let range = icmp_range("127.0.236.0/28", "p");
    assert_eq!(
        names(&format!(
            "{range}exclude = [\"127.0.236.1\", \"127.0.236.4/30\", \"127.0.236.9-13\"]\n"
        )),
        ["127.0.236.2", "127.0.236.3", "127.0.236.8", "127.0.236.14"]
    );
    let err = |exclude: &str| {
        let e = one_err(&format!("{TEMPLATE}{range}exclude = {exclude}\n"));
        (e.path, e.message)
    };
    assert_eq!(
        err("[\"127.0.236.1\", \"127.0.237.1\"]"),
        ("host_ranges[0].exclude[1]".into(), "\"127.0.237.1\" holds no address of this range (127.0.236.0/28): it leaves out nothing".into())
    );
    assert_eq!(
        err("[\"127.0.236.0\"]").1,
        "\"127.0.236.0\" holds no address of this range (127.0.236.0/28): it leaves out nothing",
        "the network address is none of its hosts"
    );
    assert_eq!(err("[\"::1\"]").0, "host_ranges[0].exclude[0]");
    assert_eq!(
        err("[\"gw\"]").1,
        "\"gw\" is not an address, a CIDR or a range (FIRST-LAST) to leave out"
    );
    assert_eq!(
        err("[\"127.0.236.0/28\"]"),
        (
            "host_ranges[0].exclude".into(),
            "leaves out every address of 127.0.236.0/28: the range would poll nothing".into()
        )
    );
    // What is left out is not counted against the budget.
    let big = "[[host_ranges]]\ncidr = \"127.0.0.0/11\"\nexclude = [\"127.0.0.0/12\"]\nname = \"r-{ip}\"\ntemplates = [\"icmp\"]\n";
    let cfg = parse(&format!("{TEMPLATE}{big}")).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(cfg.hosts.len(), (1 << 20) - 1);
}

/// A range inside another loads (hosts may share an address), with a warning at the
/// inner range's `cidr` naming the outer one; ranges apart or of the other family are
/// not warned of (a host inside a range is: `a_host_inside_a_range_is_warned_of_at_its_ip`).
#[test]
fn a_range_inside_another_is_warned_of_at_its_cidr() {
    let range = icmp_range;
    let text = format!(
        "{TEMPLATE}{}{}{}{}[[hosts]]\nname = \"h\"\nip = \"127.0.159.5\"\ntemplates = [\"icmp\"]\n",
        range("127.0.156.8/29", "b"),
        range("127.0.156.0/28", "a"),
        range("127.0.157.0/29", "c"),
        range("::1/128", "d"),
    );
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        ["line 10: host_ranges[0].cidr: 127.0.156.8/29 is inside host_ranges[1] (127.0.156.0/28, line 14): each of its 6 addresses is polled twice, as a host of each range (one range with both ranges' templates polls them once)"],
    );
    let apart = text.replace("127.0.156.8/29", "127.0.158.8/29");
    assert!(parse(&apart)
        .unwrap_or_else(|e| panic!("{e:#?}"))
        .warnings
        .is_empty());
    // The same ranges naming their hosts alike (the default "{ip}" both): the names
    // repeat, and the error says what to write (it said only `repeats host_ranges[0]`).
    let alike = text
        .replace("\"b-{ip}\"", "\"{ip}\"")
        .replace("\"a-{ip}\"", "\"{ip}\"");
    let e = one_err(&alike);
    assert_eq!(e.path, "host_ranges[1].name");
    assert_eq!(
        e.message,
        "host name \"127.0.156.9\" repeats host_ranges[0]: the ranges overlap and name this address alike; a name pattern of this range's own (name = \"range1-{ip}\") polls it as a host of each, one range with both ranges' templates polls it once"
    );
}

/// A `[[hosts]]` entry whose address a range holds, and that polls by an engine the
/// range polls by too, is polled twice, as the host and as the range's: warned of at its
/// ip, named once (a range inside another holds it too), as a range inside another is;
/// an address the range leaves out (its network, IPv4's broadcast) is not, nor a host
/// of the other engine (a pinged subnet, one device of it polled by SNMP under a name
/// of its own). Past the first ten, the others are counted in one line.
#[test]
fn a_host_inside_a_range_is_warned_of_at_its_ip() {
    let range = icmp_range;
    let host = |name: &str, ip: &str| {
        format!("[[hosts]]\nname = \"{name}\"\nip = \"{ip}\"\ntemplates = [\"icmp\"]\n")
    };
    let ranges = format!(
        "{}{}{}{}",
        range("127.0.220.0/28", "a"),
        range("127.0.220.4/30", "b"),
        range("2001:db8::/126", "c"),
        range("127.0.221.0/31", "d"),
    );
    let text = format!(
        "{TEMPLATE}{ranges}{}{}{}{}{}{}{}",
        host("in-both", "127.0.220.5"),
        host("network", "127.0.220.0"),
        host("broadcast", "127.0.220.15"),
        host("apart", "127.0.222.1"),
        host("v6", "2001:db8::3"),
        host("v6-network", "2001:db8::"),
        host("in-31", "127.0.221.1"),
    );
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    let twice = "which polls it by ICMP too: it is polled twice, as this host and as a host of the range (this host with the range's templates too, and the range with it in its exclude, poll it once)";
    assert_eq!(
        w,
        [
            "line 14: host_ranges[1].cidr: 127.0.220.4/30 is inside host_ranges[0] (127.0.220.0/28, line 10): each of its 2 addresses is polled twice, as a host of each range (one range with both ranges' templates polls them once)".to_string(),
            format!("line 27: hosts[0].ip: 127.0.220.5 is inside host_ranges[0] (127.0.220.0/28, line 10), {twice}"),
            format!("line 43: hosts[4].ip: 2001:db8::3 is inside host_ranges[2] (2001:db8::/126, line 18), {twice}"),
            format!("line 51: hosts[6].ip: 127.0.221.1 is inside host_ranges[3] (127.0.221.0/31, line 22), {twice}"),
        ],
    );
    // A device of a pinged subnet polled by SNMP under its own name polls nothing
    // twice; inside a range that polls SNMP too, it does.
    let sys = "[[templates]]\nname = \"sys\"\nitems = [ { key = \"sysName\", oid = \"1.3.6.1.2.1.1.5.0\", type = \"str\", interval = \"1m\" } ]\n";
    let snmp_host = "[[hosts]]\nname = \"sw\"\nip = \"127.0.220.5\"\ntemplates = [\"sys\"]\n";
    let cfg = parse(&format!(
        "{TEMPLATE}{sys}{}{snmp_host}",
        range("127.0.220.0/28", "a")
    ))
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert!(cfg.warnings.is_empty(), "{:#?}", cfg.warnings);
    let both = range("127.0.220.0/28", "a").replace("[\"icmp\"]", "[\"icmp\", \"sys\"]");
    let cfg =
        parse(&format!("{TEMPLATE}{sys}{both}{snmp_host}")).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(w[0].contains("line 18: hosts[0].ip: 127.0.220.5 is inside host_ranges[0] (127.0.220.0/28, line 13), which polls it by SNMP too: it is polled twice"), "{w:#?}");
    // Thousands of hosts inside a range (one added over them): ten named, one line more.
    let many: String = (1..=12)
        .map(|i| host(&format!("h{i}"), &format!("127.0.220.{i}")))
        .collect();
    let cfg = parse(&format!("{TEMPLATE}{}{many}", range("127.0.220.0/28", "a")))
        .unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 11, "{w:#?}");
    assert!(
        w[9].contains("hosts[9].ip: 127.0.220.10 is inside"),
        "{w:#?}"
    );
    assert_eq!(
        w[10],
        "2 more [[hosts]] entries lie inside a [[host_ranges]] entry that polls them by the same engine, each polled twice too (the first 10 are named above)"
    );
}

/// A host that makes itself SNMPv3 (`snmp = { version = "3" }`) with no `[snmp]` user to
/// inherit is the one missing it: the error is at its table and line, not at a
/// `snmp.security_name` of a `[snmp]` section the file does not have.
#[test]
fn a_host_of_its_own_v3_without_a_user_is_told_at_its_own_table() {
    let text = "[[templates]]\nname = \"sys\"\nitems = [ { key = \"sysName\", oid = \"1.3.6.1.2.1.1.5.0\", type = \"str\", interval = \"1m\" } ]\n[[hosts]]\nname = \"a\"\nip = \"127.0.20.1\"\ntemplates = [\"sys\"]\nsnmp = { version = \"3\" }\n";
    let e = one_err(text);
    assert_eq!(e.path, "hosts[0].snmp.security_name", "{e}");
    assert_eq!(e.line, Some(8), "{e}");
    // With a `[snmp]` user to inherit, a mistake in it is still reported there.
    let e = one_err(&text.replace(
        "[[templates]]",
        "[snmp]\nsecurity_name = \"u\"\nauth_passphrase = \"secret-aa\"\n[[templates]]",
    ));
    assert_eq!(e.path, "snmp.auth_protocol", "{e}");
}

#[test]
fn preprocessing_steps_are_inherited_overridden_shared_and_checked() {
    use poller::preprocess::Step;
    let text = r#"
[[templates]]
name = "if"
items = [
  { key = "ifHCInOctets.1", oid = "1.3.6.1.2.1.31.1.1.1.6.1", type = "uint", interval = "1m",
    preprocessing = [{ type = "CHANGE_PER_SECOND" }, { type = "MULTIPLIER", parameters = ["8"] }] },
  { key = "ifHCOutOctets.1", oid = "1.3.6.1.2.1.31.1.1.1.10.1", type = "uint", interval = "1m",
    preprocessing = [{ type = "change_per_second" }, { type = "multiplier", parameters = ["8"] }] },
  { key = "icmppingsec", interval = "1m", preprocessing = [{ type = "MULTIPLIER", parameters = ["1000"] }] },
  { key = "ifAlias.1", oid = "1.3.6.1.2.1.31.1.1.1.18.1", type = "str", interval = "1m",
    preprocessing = [{ type = "DISCARD_UNCHANGED_HEARTBEAT", parameters = ["1d"] }] },
]

[[hosts]]
name = "a"
ip = "127.0.20.1"
templates = ["if"]

[[hosts]]
name = "b"
ip = "127.0.20.2"
templates = ["if"]
items = [ { key = "ifHCInOctets.1", preprocessing = [] } ]
"#;
    let cfg = parse(text).unwrap_or_else(|e| panic!("{e:#?}"));
    let item = |h: usize, key: &str| {
        cfg.hosts[h]
            .items
            .iter()
            .find(|i| &*i.key == key)
            .unwrap()
            .pre
            .clone()
    };
    let a_in = item(0, "ifHCInOctets.1").unwrap();
    assert_eq!(
        a_in.as_slice(),
        [Step::ChangePerSecond, Step::Multiplier(8.0)]
    );
    // Same steps (whatever the case): one shared pipeline, inherited by every host.
    assert!(Arc::ptr_eq(&a_in, &item(0, "ifHCOutOctets.1").unwrap()));
    assert!(Arc::ptr_eq(&a_in, &item(1, "ifHCOutOctets.1").unwrap()));
    assert_eq!(
        item(0, "icmppingsec").unwrap().as_slice(),
        [Step::Multiplier(1000.0)]
    );
    // A text item takes the throttling steps (and only those).
    assert_eq!(
        item(1, "ifAlias.1").unwrap().as_slice(),
        [Step::DiscardUnchangedHeartbeat(86_400)]
    );
    // `preprocessing = []` on the host: none for that item only.
    assert!(item(1, "ifHCInOctets.1").is_none());

    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "MULTIPLIER" }, { type = "JAVASCRIPT" }] }"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].preprocessing[0].type");
    assert!(e.message.contains("one parameter"), "{e}");
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "JAVASCRIPT" }] }"#,
    );
    assert!(
        e.message
            .contains("unknown preprocessing type \"JAVASCRIPT\""),
        "{e}"
    );
    // Any step on any item, text and numeric steps together (Zabbix's order: the steps
    // on the answer, the result converted to the item's type).
    let good = |items: &str| {
        let text = format!("[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ {items} ]\n");
        let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
        cfg.hosts[0].items[0].pre.clone().unwrap().as_slice().len()
    };
    for items in [
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "SIMPLE_CHANGE" }] }"#,
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "float", interval = "1m", preprocessing = [{ type = "REGEX", parameters = ["([0-9.]+) C", "\\1"] }, { type = "MULTIPLIER", parameters = ["0.1"] }, { type = "DISCARD_UNCHANGED" }] }"#,
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "TRIM", parameters = [" "] }, { type = "SIMPLE_CHANGE" }] }"#,
    ] {
        assert!(good(items) >= 1, "{items}");
    }
    // Patterns are checked.
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "REGEX", parameters = ["(?<=Version )\\S+", "\\0"] }] }"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].preprocessing[0].type");
    assert!(e.message.contains("look-around"), "{e}");
    // Zabbix's "Custom on fail", as it exports it.
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "REGEX", parameters = ["a", "b"], error_handler = "CUSTOM_VALUE" }] }"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].preprocessing[0].error_handler");
    assert!(e.message.contains("needs error_handler_params"), "{e}");
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "REGEX", parameters = ["a", "b"], error_handler_params = "n/a" }] }"#,
    );
    assert!(e.message.contains("without error_handler"), "{e}");
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "CHECK_NOT_SUPPORTED", error_handler = "CUSTOM_VALUE", error_handler_params = "n/a" }] }"#,
    );
    assert!(e.message.contains("is not a uint value"), "{e}");
    assert_eq!(
        e.path,
        "hosts[0].items[0].preprocessing[0].error_handler_params"
    );
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "CHECK_NOT_SUPPORTED" }] }"#,
    );
    assert!(e.message.contains("needs error_handler"), "{e}");
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "DISCARD_UNCHANGED_HEARTBEAT", parameters = ["0"] }] }"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].preprocessing[0].type");
    // A host item that makes the template's text item numeric cannot keep a text
    // custom value.
    let e = one_err(
        r#"
[[templates]]
name = "t"
items = [ { key = "x", oid = "1.3.6.1.2.1.1.1.0", type = "str", interval = "1m", preprocessing = [{ type = "CHECK_NOT_SUPPORTED", error_handler = "CUSTOM_VALUE", error_handler_params = "n/a" }] } ]
[[hosts]]
name = "h"
ip = "127.0.20.1"
templates = ["t"]
items = [ { key = "x", type = "uint" } ]
"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].type");
    assert!(e.message.contains("is not a uint value"), "{e}");
    let e = bad(
        r#"{ key = "x", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m", preprocessing = [{ type = "SIMPLE_CHANGE" }, { type = "CHANGE_PER_SECOND" }] }"#,
    );
    assert_eq!(e.path, "hosts[0].items[0].preprocessing");
    assert!(e.message.contains("at most one"), "{e}");
    assert!(e.line.is_some());
}

#[test]
fn indices_stand_for_one_item_per_table_row() {
    let text = r#"
[[templates]]
name = "if"
items = [
  { key = "net.if.in[ifHCInOctets.{#SNMPINDEX}]", oid = "1.3.6.1.2.1.31.1.1.1.6.{#SNMPINDEX}",
    type = "uint", interval = "1m", indices = "1-3, 10",
    preprocessing = [{ type = "CHANGE_PER_SECOND" }, { type = "MULTIPLIER", parameters = ["8"] }] },
  { key = "sysUpTime", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m" },
]

[[hosts]]
name = "sw-1"
ip = "127.0.20.1"
templates = ["if"]

[[hosts]]
name = "sw-2"
ip = "127.0.20.2"
templates = ["if"]
items = [ { key = "net.if.in[ifHCInOctets.{#SNMPINDEX}]", indices = "49-50" } ]
"#;
    let cfg = parse(text).unwrap_or_else(|e| panic!("{e:#?}"));
    let rows = |h: usize| -> Vec<(String, String)> {
        cfg.hosts[h]
            .items
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Snmp { oid } if i.key.starts_with("net.if.in") => {
                    Some((i.key.to_string(), oid.to_string()))
                }
                _ => None,
            })
            .collect()
    };
    let want = |rows: &[u32]| -> Vec<(String, String)> {
        rows.iter()
            .map(|i| {
                (
                    format!("net.if.in[ifHCInOctets.{i}]"),
                    format!(".1.3.6.1.2.1.31.1.1.1.6.{i}"),
                )
            })
            .collect()
    };
    assert_eq!(rows(0), want(&[1, 2, 3, 10]));
    // A host's item with the template's key sets its own rows (the rest is inherited).
    assert_eq!(rows(1), want(&[49, 50]));
    let one = cfg.hosts[1]
        .items
        .iter()
        .find(|i| i.key.ends_with(".50]"))
        .unwrap();
    assert_eq!(
        one.pre.as_ref().unwrap().as_slice().len(),
        2,
        "steps inherited"
    );
    assert_eq!(one.interval_ms, 60_000);
    // Each row its own item: its own derived itemid, stable.
    let ids: std::collections::HashSet<u64> = cfg.hosts[0].items.iter().map(|i| i.itemid).collect();
    assert_eq!(ids.len(), 5);
    assert_eq!(cfg.item_count(), 5 + 3);

    // A table indexed by more than one arc (bgpPeerTable: by the peer's address): each
    // row its arcs, in the key and after the column's OID, as Zabbix's {#SNMPINDEX}.
    let bgp = |indices: &str, oid: &str| {
        format!(
            r#"
[[hosts]]
name = "r-1"
ip = "127.0.20.1"
items = [ {{ key = "bgp.state[{{#SNMPINDEX}}]", oid = "{oid}.{{#SNMPINDEX}}", type = "uint", interval = "1m", indices = "{indices}" }} ]
"#
        )
    };
    let cfg = parse(&bgp("10.0.0.2, 10.0.0.1", "1.3.6.1.2.1.15.3.1.2"))
        .unwrap_or_else(|e| panic!("{e:#?}"));
    let got: Vec<(String, String)> = cfg.hosts[0]
        .items
        .iter()
        .map(|i| match &i.kind {
            ItemKind::Snmp { oid } => (i.key.to_string(), oid.to_string()),
            k => panic!("{k:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "bgp.state[10.0.0.1]".into(),
                ".1.3.6.1.2.1.15.3.1.2.10.0.0.1".into()
            ),
            (
                "bgp.state[10.0.0.2]".into(),
                ".1.3.6.1.2.1.15.3.1.2.10.0.0.2".into()
            ),
        ]
    );
    // The OID with a row's arcs is still an OID: at most 128 arcs. A column of 125 arcs
    // takes rows of 3, not of 4.
    let long = vec!["1"; 125].join(".");
    assert!(parse(&bgp("1.2.3", &format!("1.3.{}", &long[4..]))).is_ok());
    let e = one_err(&bgp("1.2.3.4", &format!("1.3.{}", &long[4..])));
    assert_eq!(e.path, "hosts[0].items[0].oid", "{e}");
    assert!(e.message.contains("more than 128 arcs"), "{e}");
    // The same when the oid is a template's and the host's item lists the rows.
    let inherited = format!(
        r#"
[[templates]]
name = "t"
items = [ {{ key = "x[{{#SNMPINDEX}}]", oid = "1.3.{}.{{#SNMPINDEX}}", type = "uint", interval = "1m", indices = "1" }} ]
[[hosts]]
name = "r-1"
ip = "127.0.20.1"
templates = ["t"]
items = [ {{ key = "x[{{#SNMPINDEX}}]", indices = "INDICES" }} ]
"#,
        &long[4..]
    );
    assert!(parse(&inherited.replace("INDICES", "1.2.3")).is_ok());
    let e = one_err(&inherited.replace("INDICES", "1.2.3.4"));
    assert_eq!(e.path, "hosts[0].items[0].indices", "{e}");
    assert!(e.message.contains("more than 128 arcs"), "{e}");

    // A template may leave the rows to its hosts (as an imported discovery rule does);
    // a host that links it without giving them is told how.
    let rows_by_host = r#"
[[templates]]
name = "if"
items = [ { key = "net.if.in[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}", type = "uint", interval = "1m" } ]
[[hosts]]
name = "given"
ip = "127.0.20.1"
templates = ["if"]
items = [ { key = "net.if.in[{#SNMPINDEX}]", indices = "7" } ]
"#;
    let cfg = parse(rows_by_host).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(&*cfg.hosts[0].items[0].key, "net.if.in[7]");
    let e = one_err(&format!(
        "{rows_by_host}[[hosts]]\nname = \"not\"\nip = \"127.0.20.2\"\ntemplates = [\"if\"]\n"
    ));
    assert_eq!(e.path, "hosts[1]");
    assert!(
        e.message.contains(
            r#"give them (items = [ { key = "net.if.in[{#SNMPINDEX}]", indices = "1-48" } ])"#
        ),
        "{e}"
    );
    // A host's item for it with an error of its own: that one error, not a second
    // telling it to give the rows.
    let e = one_err(&rows_by_host.replace(r#"indices = "7""#, r#"indices = "x""#));
    assert_eq!(e.path, "hosts[0].items[0].indices", "{e}");
    // indices and host ranges multiply: a file may not ask for more than MAX_ITEMS.
    let e = one_err(
        r#"
[[templates]]
name = "if"
items = [ { key = "if.in[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}", type = "uint", interval = "1m", indices = "1-65536" } ]
[[host_ranges]]
cidr = "127.64.0.0/22"
name = "sw-{ip}"
templates = ["if"]
"#,
    );
    assert_eq!(e.path, "host_ranges[0]", "{e}");
    assert!(e.message.contains("past the 8388608"), "{e}");
    let item = |key: &str, oid: &str, rest: &str| {
        format!(r#"{{ key = "{key}", oid = "{oid}", type = "uint", interval = "1m"{rest} }}"#)
    };
    let (k, o) = ("if.in[{#SNMPINDEX}]", "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}");
    for (items, path, says) in [
        (
            item(k, o, ""),
            "hosts[0].items[0]",
            "give the rows it stands for",
        ),
        (
            item("if.x", "1.3.6.1.2.1.2.2.1.10.1", r#", indices = "1-2""#),
            "hosts[0].items[0].indices",
            "need {#SNMPINDEX} in the key",
        ),
        (
            item(k, "1.3.6.1.2.1.2.2.1.10", r#", indices = "1-2""#),
            "hosts[0].items[0].oid",
            "ends its oid with .{#SNMPINDEX}",
        ),
        (
            item(k, o, r#", indices = "3-1""#),
            "hosts[0].items[0].indices",
            "runs backwards",
        ),
        (
            item(k, o, r#", indices = "1-5,5""#),
            "hosts[0].items[0].indices",
            "index 5 is listed twice",
        ),
        (
            item(k, o, r#", indices = "eth0""#),
            "hosts[0].items[0].indices",
            "is not an index",
        ),
        (
            item(k, o, r#", indices = "+5""#),
            "hosts[0].items[0].indices",
            "is not an index",
        ),
        (
            item(
                k,
                &format!("1.3{}.{{#SNMPINDEX}}", ".1".repeat(126)),
                r#", indices = "1""#,
            ),
            "hosts[0].items[0].oid",
            "more than 128 arcs",
        ),
        (
            item(k, o, r#", indices = "0-70000""#),
            "hosts[0].items[0].indices",
            "more than the 65536",
        ),
        (
            item(k, o, r#", indices = "1", itemid = 7"#),
            "hosts[0].items[0].itemid",
            "derived",
        ),
        (
            r#"{ key = "icmpping", interval = "1m", indices = "1" }"#.to_string(),
            "hosts[0].items[0].indices",
            "takes no indices",
        ),
        (
            format!(
                "{}, {}",
                item(k, o, r#", indices = "1-5""#),
                item("if.in[3]", "1.3.6.1.2.1.2.2.1.10.3", "")
            ),
            "hosts[0]",
            "key \"if.in[3]\" repeats",
        ),
    ] {
        let e = bad(&items);
        assert_eq!(e.path, path, "{items}: {e}");
        assert!(e.message.contains(says), "{items}: {e}");
    }
}

const DISCOVERED: &str = r#"
[[templates]]
name = "if"
discovery = [
  { name = "ports", oid = "1.3.6.1.2.1.2.2.1.2", matches = "^(Gi|Te)" },
  { name = "all", oid = ".1.3.6.1.2.1.2.2.1.2", interval = "2h" },
]
items = [
  { key = "in[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.31.1.1.1.6.{#SNMPINDEX}", type = "uint", interval = "1m", discovery = "ports" },
  { key = "descr[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.2.{#SNMPINDEX}", type = "str", interval = "1h", discovery = "all" },
  { key = "in[3]", oid = "1.3.6.1.2.1.31.1.1.1.6.3", type = "uint", interval = "1m" },
  { key = "icmpping", interval = "1m" },
]

[[hosts]]
name = "sw-1"
ip = "127.0.20.1"
templates = ["if"]

[[host_ranges]]
cidr = "127.0.30.0/30"
templates = ["if"]
"#;

/// Rows of one arc each.
fn one_arc(rows: &[u32]) -> Indices {
    Indices::from_rows(rows.iter().map(std::slice::from_ref))
}

fn found(rows: &[(&str, &str, &[u32])]) -> Found {
    let mut f = Found::default();
    for (h, r, rows) in rows {
        f.set(&Arc::from(*h), &Arc::from(*r), one_arc(rows));
    }
    f
}

fn keys(cfg: &Config, host: &str) -> Vec<String> {
    let h = cfg.hosts.iter().find(|h| &*h.name == host).unwrap();
    let mut k: Vec<String> = h.items.iter().map(|i| i.key.to_string()).collect();
    k.sort();
    k
}

#[test]
fn discovered_rows_stand_for_items_as_listed_ones_do() {
    // Before any walk: the rules' items stand for no rows; every SNMP host is a target.
    let cfg = parse(DISCOVERED).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(keys(&cfg, "sw-1"), ["icmpping", "in[3]"]);
    let targets: Vec<(&str, Vec<&str>)> = cfg
        .discovery
        .iter()
        .map(|t| (&*t.host, t.rules.iter().map(|r| &*r.name).collect()))
        .collect();
    assert_eq!(
        targets,
        [
            ("sw-1", vec!["ports", "all"]),
            ("127.0.30.1", vec!["ports", "all"]),
            ("127.0.30.2", vec!["ports", "all"]),
        ]
    );
    let rule = &cfg.discovery[0].rules[0];
    assert_eq!(rule.column.to_string(), ".1.3.6.1.2.1.2.2.1.2");
    assert!(rule.matches.as_ref().unwrap().is_match("Gi0/1"));
    assert_eq!(
        cfg.discovery[0].rules[1].interval,
        Duration::from_secs(7200)
    );
    assert_eq!(rule.interval, Duration::from_secs(3600), "default");

    // With rows found: one item per row, per host; a row whose key another item has
    // (in[3]) is left to that item.
    let f = found(&[
        ("sw-1", "ports", &[1, 2, 3]),
        ("sw-1", "all", &[1, 2, 3, 4]),
        ("127.0.30.2", "ports", &[7]),
    ]);
    let cfg = parse_found(DISCOVERED, &f).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(
        keys(&cfg, "sw-1"),
        ["descr[1]", "descr[2]", "descr[3]", "descr[4]", "icmpping", "in[1]", "in[2]", "in[3]"]
    );
    assert_eq!(keys(&cfg, "127.0.30.1"), ["icmpping", "in[3]"]);
    // Without an item whose key a row could have, the rows found are taken as they are.
    let apart = DISCOVERED.replace(
        r#"  { key = "in[3]", oid = "1.3.6.1.2.1.31.1.1.1.6.3", type = "uint", interval = "1m" },"#,
        "",
    );
    let cfg3 = parse_found(&apart, &f).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(
        keys(&cfg3, "sw-1"),
        ["descr[1]", "descr[2]", "descr[3]", "descr[4]", "icmpping", "in[1]", "in[2]", "in[3]"]
    );
    assert_eq!(keys(&cfg3, "127.0.30.2"), ["icmpping", "in[7]"]);
    assert_eq!(keys(&cfg, "127.0.30.2"), ["icmpping", "in[3]", "in[7]"]);
    let sw1 = &cfg.hosts[0];
    let in2 = sw1.items.iter().find(|i| &*i.key == "in[2]").unwrap();
    assert_eq!(in2.interval_ms, 60_000);
    assert!(
        matches!(&in2.kind, ItemKind::Snmp { oid } if oid.to_string() == ".1.3.6.1.2.1.31.1.1.1.6.2")
    );
    // The same itemid as the row listed with indices: history continues either way.
    let listed = DISCOVERED.replace(
        "templates = [\"if\"]\n\n[[host_ranges]]",
        "templates = [\"if\"]\nitems = [{ key = \"in[{#SNMPINDEX}]\", indices = \"2\" }]\n\n[[host_ranges]]",
    );
    let cfg2 = parse_found(&listed, &f).unwrap_or_else(|e| panic!("{e:#?}"));
    let in2_listed = cfg2.hosts[0]
        .items
        .iter()
        .find(|i| &*i.key == "in[2]")
        .unwrap();
    assert_eq!(in2_listed.itemid, in2.itemid);
    // A host's own indices replace the rule for that item: only row 2, and sw-1 is
    // still walked for the other rule only.
    assert_eq!(
        keys(&cfg2, "sw-1"),
        ["descr[1]", "descr[2]", "descr[3]", "descr[4]", "icmpping", "in[2]", "in[3]"]
    );
    let rules: Vec<&str> = cfg2.discovery[0].rules.iter().map(|r| &*r.name).collect();
    assert_eq!(rules, ["all"]);

    // A process shard walks its own hosts only, and keeps their rows in a file of its
    // own.
    let one = parse(DISCOVERED).unwrap();
    assert_eq!(one.discovery_file(None), Path::new("./discovered.json"));
    assert_eq!(
        one.discovery_file(Some((1, 4))),
        Path::new("./discovered.shard-1-of-4.json")
    );
    let mut cfg = parse(DISCOVERED).unwrap();
    let _ = cfg.take_hosts_for_shard((0, 2));
    let mut other = parse(DISCOVERED).unwrap();
    let _ = other.take_hosts_for_shard((1, 2));
    assert_eq!(cfg.discovery.len() + other.discovery.len(), 3);
    assert!(cfg
        .discovery
        .iter()
        .all(|t| other.discovery.iter().all(|o| o.host != t.host)));
}

#[test]
fn discovery_mistakes_are_reported_at_their_key() {
    let with = |rule: &str, item: &str| {
        format!("[[templates]]\nname = \"t\"\ndiscovery = [ {rule} ]\nitems = [ {item} ]\n")
    };
    let rule = r#"{ name = "r", oid = "1.3.6.1.2.1.2.2.1.2" }"#;
    let item = r#"{ key = "x[{#SNMPINDEX}]", oid = "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}", type = "uint", interval = "1m", discovery = "r" }"#;
    parse(&with(rule, item)).unwrap_or_else(|e| panic!("{e:#?}"));
    for (rule_, item_, at, says) in [
        (
            rule,
            &item.replace("\"r\"", "\"q\"")[..],
            "templates[0].items[0].discovery",
            "unknown discovery rule \"q\"",
        ),
        (
            rule,
            &item.replace("[{#SNMPINDEX}]\"", "\"")[..],
            "templates[0].items[0].discovery",
            "needs {#SNMPINDEX}",
        ),
        (
            rule,
            &item.replace("discovery = \"r\"", "discovery = \"r\", indices = \"1\"")[..],
            "templates[0].items[0].discovery",
            "not both",
        ),
        (
            &rule.replace("1.3.6.1.2.1.2.2.1.2", "1.3")[..],
            item,
            "templates[0].discovery[0].oid",
            "not a table column",
        ),
        (
            &rule.replace("1.3.6.1.2.1.2.2.1.2", "ifDescr")[..],
            item,
            "templates[0].discovery[0].oid",
            "not a numeric OID",
        ),
        (
            &rule.replace(" }", ", matches = \"(\" }")[..],
            item,
            "templates[0].discovery[0].matches",
            "not a regular expression",
        ),
        (
            &rule.replace(" }", ", not_matches = \"(\" }")[..],
            item,
            "templates[0].discovery[0].not_matches",
            "not a regular expression",
        ),
        (
            &rule.replace(" }", ", interval = \"10s\" }")[..],
            item,
            "templates[0].discovery[0].interval",
            "outside 1m..7d",
        ),
        (
            rule,
            r#"{ key = "icmpping", interval = "1m", discovery = "r" }"#,
            "templates[0].items[0].discovery",
            "ICMP key",
        ),
        (
            &rule.replace(" }", r#", filter = [{ oid = "1.3.6.1.2.1.2.2.1.3" }] }"#)[..],
            item,
            "templates[0].discovery[0].filter[0]",
            "needs matches or not_matches",
        ),
        (
            &rule.replace(
                " }",
                r#", filter = [{ oid = "1.3.6.1.2.1.2.2.1.3", not_matches = "[" }] }"#,
            )[..],
            item,
            "templates[0].discovery[0].filter[0].not_matches",
            "not a regular expression",
        ),
        (
            &rule.replace(" }", r#", filter = [{ oid = "x", matches = "1" }] }"#)[..],
            item,
            "templates[0].discovery[0].filter[0].oid",
            "not a numeric OID",
        ),
    ] {
        let errs = errs(&with(rule_, item_));
        // An unknown rule's item is left out, so nothing else is said.
        let e = errs
            .iter()
            .find(|e| e.path == at)
            .unwrap_or_else(|| panic!("{at}: {errs:#?}"));
        assert!(e.message.contains(says), "{e}");
        // A wrong rule is said once, at the rule: not again at each of its items.
        if at.starts_with("templates[0].discovery") {
            assert_eq!(errs.len(), 1, "{errs:#?}");
        }
    }
    // Rule names are the file's: the same name in two templates is refused.
    let twice = format!(
        "{}[[templates]]\nname = \"u\"\ndiscovery = [ {rule} ]\n",
        with(rule, item)
    );
    let e = one_err(&twice);
    assert_eq!(e.path, "templates[1].discovery[0].name", "{e}");
    // A host item may name a rule (of any template) for its own key.
    let host = format!(
        "{}[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nitems = [ {} ]\n",
        with(rule, item),
        item.replace("x[", "y[")
    );
    let cfg = parse_found(&host, &found(&[("h", "r", &[5])])).unwrap();
    assert_eq!(keys(&cfg, "h"), ["y[5]"]);
}

#[test]
fn rows_whose_oid_or_key_would_be_too_long_are_not_items() {
    // A key of 2,045 characters: a one-digit row makes it 2,034, a row of 21 characters
    // 2,054, past Zabbix's 2,048.
    let key = format!("k[{}{{#SNMPINDEX}}]", "a".repeat(2_030));
    let config = |oid: &str, rows: &str| {
        format!(
            r#"
[[templates]]
name = "t"
discovery = [ {{ name = "r", oid = "1.3.6.1.2.1.2.2.1.2" }} ]
items = [ {{ key = "{key}", oid = "{oid}.{{#SNMPINDEX}}", type = "uint", interval = "1m", {rows} }} ]
[[hosts]]
name = "h"
ip = "127.0.20.1"
templates = ["t"]
"#
        )
    };
    let oid = "1.3.6.1.2.1.2.2.1.10";
    assert!(parse(&config(oid, r#"indices = "1-9""#)).is_ok());
    let e = one_err(&config(oid, r#"indices = "1,4294967295.4294967295""#));
    assert_eq!(e.path, "templates[0].items[0].indices", "{e}");
    assert!(
        e.message
            .contains("the key of its longest row would be 2054 characters"),
        "{e}"
    );
    // Discovered rows: those past either limit are left out, the others are items. An
    // OID of 125 arcs takes rows of 3 arcs, not 4.
    let mut f = Found::default();
    let rows = Indices::parse("7,1.2.3,1.2.3.4,4294967295.4294967295").unwrap();
    f.set(&Arc::from("h"), &Arc::from("r"), rows);
    let long = format!("1.3.{}", vec!["1"; 123].join("."));
    let cfg = parse_found(&config(&long, r#"discovery = "r""#), &f).unwrap();
    let planned: Vec<String> = cfg.hosts[0]
        .items
        .iter()
        .map(|i| i.key.rsplit('a').next().unwrap().to_string())
        .collect();
    assert_eq!(planned, ["7]", "1.2.3]"]);
}

#[test]
fn found_rows_are_written_as_ranges_and_read_back() {
    let mut f = found(&[("a", "r", &[1, 2, 3, 7]), ("b", "r", &[]), ("b", "s", &[9])]);
    // Rows of more arcs (a table indexed by an address) are listed after the ranges.
    let udp = Indices::from_rows([[127u32, 0, 20, 1, 161].as_slice(), &[5], &[0, 0, 0, 0, 68]]);
    f.set(&Arc::from("c"), &Arc::from("udp"), udp);
    let text = f.to_text();
    assert_eq!(text["a"]["r"], "1-3,7");
    assert_eq!(text["b"]["r"], "");
    assert_eq!(text["c"]["udp"], "5,0.0.0.0.68,127.0.20.1.161");
    let owned = text
        .iter()
        .map(|(h, r)| {
            let r = r.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            (h.to_string(), r)
        })
        .collect();
    let (back, unreadable) = Found::from_text(owned);
    assert_eq!(back, f);
    assert!(unreadable.is_empty());
    // An entry that does not read is left out, said, and the others kept.
    let mut text: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        Default::default();
    text.entry("a".into())
        .or_default()
        .insert("r".into(), "1-3".into());
    text.entry("a".into())
        .or_default()
        .insert("s".into(), "x".into());
    text.entry("b".into())
        .or_default()
        .insert("r".into(), "1-70000".into());
    let (back, unreadable) = Found::from_text(text);
    assert_eq!(
        back.rows("a", "r").map(|r| r.to_string()),
        Some("1-3".into())
    );
    assert!(back.rows("a", "s").is_none() && back.rows("b", "r").is_none());
    assert_eq!(unreadable.len(), 2, "{unreadable:?}");
    assert!(unreadable[0].starts_with("a/s: "), "{unreadable:?}");
    // Setting the same rows again is no change; nor is finding none where none were
    // known.
    let mut none = Found::default();
    assert!(!none.set(&Arc::from("a"), &Arc::from("r"), one_arc(&[])));
    assert_eq!(
        none.rows("a", "r").map(|r| r.len()),
        Some(0),
        "known: no rows"
    );
    assert!(none.set(&Arc::from("a"), &Arc::from("r"), one_arc(&[4])));
    assert!(none.set(&Arc::from("a"), &Arc::from("r"), one_arc(&[])));
    let mut g = f.clone();
    assert!(!g.set(&Arc::from("a"), &Arc::from("r"), one_arc(&[1, 2, 3, 7])));
    assert!(g.set(&Arc::from("a"), &Arc::from("r"), one_arc(&[1, 2, 3])));
}

#[test]
fn a_filter_condition_takes_values_that_match_and_are_not_excluded() {
    let re = |r: &str| Some(regex::Regex::new(r).unwrap());
    let c = Condition {
        column: "1.3.6.1.2.1.2.2.1.2".parse().unwrap(),
        matches: re("^(Gi|Te)"),
        not_matches: re("\\.[0-9]+$"),
    };
    assert!(c.holds(Some("Gi0/1")));
    assert!(!c.holds(Some("Gi0/1.100")), "a subinterface is excluded");
    assert!(!c.holds(Some("Vlan1")), "does not match");
    assert!(!c.holds(None), "a row without a value in the column fails");
    let only_not = Condition {
        not_matches: re("^lo$"),
        matches: None,
        ..c
    };
    assert!(only_not.holds(Some("eth0")) && !only_not.holds(Some("lo")));
}

#[test]
fn row_keys_that_other_keys_may_have_are_told_apart() {
    let entry = |key: &str, discovered: bool| ResolvedEntry {
        key: key.into(),
        itemid: None,
        value_type: ValueType::Uint,
        interval: Duration::from_secs(60),
        kind: ItemKind::Snmp {
            oid: "1.3.6.1.2.1.2.2.1.10".parse().unwrap(),
        },
        pre: None,
        indices: None,
        discovery: discovered.then(|| {
            Arc::new(DiscoveryRule {
                name: "r".into(),
                column: "1.3.6.1.2.1.2.2.1.2".parse().unwrap(),
                matches: None,
                not_matches: None,
                interval: Duration::from_secs(3600),
                filter: Vec::new(),
            })
        }),
    };
    let row = entry("in[{#SNMPINDEX}]", true);
    for (other, collide) in [
        (entry("in[3]", false), true),
        (entry("in[x]", false), true), // may: checked row by row
        (entry("out[3]", false), false),
        (entry("in[]", false), false),
        (entry("in[{#SNMPINDEX}]x", true), false),
        (entry("in[1{#SNMPINDEX}]", true), true),
        (entry("i{#SNMPINDEX}]", false), true),
        (entry("icmpping", false), false),
    ] {
        let key = other.key.clone();
        assert_eq!(may_collide(&[row.clone(), other]), collide, "{key}");
    }
    assert!(!may_collide(&[entry("in[3]", false)]), "no discovered item");
    assert!(
        may_collide(&[entry("a{#SNMPINDEX}.{#SNMPINDEX}", true)]),
        "an index twice"
    );
    // Thousands of prototypes on one host, none of which collides (every pair is
    // compared; each key split once: the time it takes is benches/discovery_plan.sh's
    // to measure, not a test's), and one more that does.
    let mut many: Vec<ResolvedEntry> = (0..6000)
        .map(|n| entry(&format!("b{n}[{{#SNMPINDEX}}]"), true))
        .collect();
    assert!(!may_collide(&many));
    many.push(entry("b17[7]", false));
    assert!(may_collide(&many), "b17[{{#SNMPINDEX}}] of row 7 is b17[7]");
}

/// A retention under a day is a unit mistaken (`"3m"` is three minutes, not months):
/// refused, as it would have become a TTL of one day.
#[test]
fn a_retention_under_a_day_is_refused() {
    for (key, v) in [
        ("retention", "3m"),
        ("trends_retention", "24m"),
        ("retention", "0s"),
        ("retention", "23h 59m 59s"),
    ] {
        let e = one_err(&format!(
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\n{key} = \"{v}\"\n"
        ));
        assert_eq!(e.path, format!("clickhouse.{key}"), "{e:?}");
        assert!(e.message.contains("less than a day"), "{e}");
    }
    let cfg = parse("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nretention = \"1day\"\ntrends_retention = \"3months\"\n").unwrap();
    let ch = cfg.clickhouse.unwrap();
    assert_eq!(ch.retention_days(sink::row::Table::Uint), Some(1));
    assert_eq!(ch.retention_days(sink::row::Table::TrendsUint), Some(92));
}

/// Host names Zabbix refuses (empty, blanks at the ends, control characters) are refused
/// at their key, listed hosts and range patterns alike; the host is not planned.
#[test]
fn host_names_must_be_names() {
    for name in ["", " ", "sw-1 ", " sw-1", "a\nb", "a\tb"] {
        let e = one_err(&format!(
            "[[hosts]]\nname = {name:?}\nip = \"127.0.20.1\"\nitems = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n"
        ));
        assert_eq!(e.path, "hosts[0].name", "{name:?}: {e:?}");
    }
    let e = one_err("[[host_ranges]]\ncidr = \"127.0.0.0/30\"\nname = \"cpe-{ip} \"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n");
    assert_eq!(e.path, "host_ranges[0].name", "{e:?}");
    assert!(e.message.contains("blanks"), "{e}");
    assert!(parse("[[hosts]]\nname = \"core sw-1 (Москва)\"\nip = \"127.0.20.1\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n").is_ok());
}

/// A host's address, and a key's target, is one device's: not the unspecified, the
/// broadcast or a multicast address.
#[test]
fn host_addresses_are_one_devices() {
    for ip in ["0.0.0.0", "::", "255.255.255.255", "224.0.0.1", "ff02::1"] {
        let e = one_err(&format!(
            "[[hosts]]\nname = \"h\"\nip = \"{ip}\"\nitems = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n"
        ));
        assert_eq!(e.path, "hosts[0].ip", "{ip}: {e:?}");
        assert!(e.message.contains("not a device's address"), "{e}");
    }
    let e = bad(r#"{ key = "icmpping[239.1.1.1]", interval = "10s" }"#);
    assert_eq!(e.path, "hosts[0].items[0].key", "{e:?}");
}

/// A CIDR whose address is not its network's (an interface's address pasted) is
/// refused with both ways to say what was meant.
#[test]
fn a_cidr_with_host_bits_set_is_refused() {
    let e = one_err("[[host_ranges]]\ncidr = \"127.0.0.77/24\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n");
    assert_eq!(e.path, "host_ranges[0].cidr", "{e:?}");
    assert_eq!(
        e.message,
        "127.0.0.77/24 has host bits set: write the network, 127.0.0.0/24, or list 127.0.0.77 as a [[hosts]] entry"
    );
    assert!(parse("[[host_ranges]]\ncidr = \"127.0.0.77/32\"\nitems = [ { key = \"icmpping\", interval = \"10s\" } ]\n").is_ok());
}

/// SNMPv3 settings where the version is not 3 (a forgotten `version = "3"`) are refused:
/// they were ignored, the devices polled in clear with the community.
#[test]
fn snmpv3_settings_without_version_3_are_refused() {
    let item =
        r#"items = [ { key = "up", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "1m" } ]"#;
    let v3 = "security_name = \"monitor\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"12345678\"";
    let e = one_err(&format!(
        "[snmp]\n{v3}\n[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\n{item}\n"
    ));
    assert_eq!(e.path, "snmp", "{e:?}");
    assert!(e.message.contains("but version 2c"), "{e}");
    assert!(!e.message.contains("12345678"));
    let e = one_err(&format!(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\nsnmp = {{ version = 1, security_name = \"monitor\" }}\n{item}\n"
    ));
    assert_eq!(e.path, "hosts[0].snmp", "{e:?}");
    assert!(e.message.contains("but version 1"), "{e}");
    // The section's as defaults of the hosts of version 3, beside v2c hosts: fine.
    let cfg = parse(&format!(
        "[snmp]\n{v3}\n[[hosts]]\nname = \"a\"\nip = \"127.0.20.1\"\n{item}\n[[hosts]]\nname = \"b\"\nip = \"127.0.20.2\"\nsnmp = {{ version = \"3\" }}\n{item}\n"
    ))
    .unwrap();
    assert!(cfg.hosts[0].snmp.as_ref().unwrap().usm.is_none());
    assert!(cfg.hosts[1].snmp.as_ref().unwrap().usm.is_some());
}

/// Past a few dozen items a host's merge looks keys up in a map: overrides, repeats
/// across templates and a template listed twice are found there as below it.
#[test]
fn many_items_merge_as_few_do() {
    let items = |prefix: &str, n: usize| {
        (0..n)
            .map(|k| format!("{{ key = \"{prefix}{k}\", oid = \"1.3.6.1.2.1.2.2.1.10.{k}\", type = \"uint\", interval = \"1m\" }}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = format!(
        "[[templates]]\nname = \"a\"\nitems = [ {} ]\n[[templates]]\nname = \"b\"\nitems = [ {} ]\n[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\ntemplates = [\"a\", \"b\"]\nitems = [ {{ key = \"a39\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"5m\" }}, {} ]\n",
        items("a", 40),
        items("b", 40),
        items("own", 40)
    );
    let cfg = parse(&text).unwrap();
    let h = &cfg.hosts[0];
    assert_eq!(h.items.len(), 120);
    let a39 = h.items.iter().find(|i| &*i.key == "a39").unwrap();
    assert_eq!(
        a39.interval_ms, 300_000,
        "the host's own item overrides the template's"
    );
    // b repeats a key of a, past the first 32.
    let text = text.replace("key = \"b35\"", "key = \"a35\"");
    let e = one_err(&text);
    assert_eq!(e.path, "hosts[0].templates[1]", "{e:?}");
    assert_eq!(e.message, "key \"a35\" comes from two templates");
    let e = one_err(
        &text
            .replace("key = \"a35\"", "key = \"b35\"")
            .replace("[\"a\", \"b\"]", "[\"a\", \"a\"]"),
    );
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("hosts[0].templates[1]", "template \"a\" is listed twice")
    );
}

/// Durations Zabbix reads and netpoller does not are said as such, with what to write.
#[test]
fn zabbix_durations_get_what_to_write() {
    let at =
        |interval: &str| bad(&format!("{{ key = \"icmpping\", interval = {interval} }}")).message;
    assert_eq!(at("30"), "durations are strings with a unit, not 30: \"30s\" (Zabbix reads a bare number as seconds), \"30m\", \"30days\"");
    assert_eq!(at("\"30\""), "invalid duration \"30\": a unit is needed, e.g. \"30s\" (seconds, as Zabbix reads a bare number) or \"30ms\"");
    assert_eq!(at("\"30s;50s/1-5,09:00-18:00\""), "invalid duration \"30s;50s/1-5,09:00-18:00\": Zabbix's flexible and scheduling intervals are not supported; give the fixed part, e.g. \"30s\"");
    // Optional durations too.
    let e = one_err("[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nretention = 90\n");
    assert_eq!(e.path, "clickhouse.retention");
    assert!(e.message.contains("\"90days\""), "{e}");
}

/// A bare number in `[icmp]`'s `timeout` or `interval` is read as Zabbix's ICMP key
/// parameters are, in ms: the hint gives `"500ms"` first. It gave the seconds of other
/// settings, `"500s"` (valid there, then refused at every item polled more often than
/// each 8 minutes as probes longer than its interval), `"500m"` (minutes) and
/// `"500days"`.
#[test]
fn icmp_bare_numbers_are_pointed_to_milliseconds() {
    for key in ["timeout", "interval"] {
        let e = one_err(&format!("[icmp]\n{key} = 500\n"));
        assert_eq!(e.path, format!("icmp.{key}"));
        assert_eq!(e.line, Some(2));
        assert_eq!(
            e.message,
            "durations are strings with a unit, not 500: \"500ms\" (as the ICMP keys' interval and timeout parameters, in ms), or \"500s\""
        );
    }
    // Strings are read as any duration.
    assert!(errs_or_none("[icmp]\ntimeout = \"500ms\"\ninterval = \"1s\"\n").is_empty());
    let e = one_err("[icmp]\ntimeout = \"500\"\n");
    assert!(
        e.message
            .starts_with("invalid duration \"500\": a unit is needed"),
        "{e}"
    );
}

/// `[snmp]`'s SNMPv3 fields are defaults for the hosts of version 3, also of one that
/// polls no SNMP item yet (ICMP only): not "a forgotten version = 3".
#[test]
fn snmpv3_defaults_of_a_v3_host_without_snmp_items_are_taken() {
    let v3 = "security_name = \"monitor\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"12345678\"";
    let text = format!(
        "[snmp]\n{v3}\n[[hosts]]\nname = \"b\"\nip = \"127.0.20.2\"\nsnmp = {{ version = \"3\" }}\nitems = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n"
    );
    parse(&text).unwrap_or_else(|e| panic!("{e:?}"));
}

/// A range of multicast addresses, or of 0.0.0.0/8, is refused as one such host is.
#[test]
fn a_multicast_range_is_refused_as_a_multicast_host_is() {
    for cidr in ["224.0.0.0/28", "0.0.0.0/30", "ff02::/126"] {
        let r = parse(&format!("[[host_ranges]]\ncidr = \"{cidr}\"\nitems = [ {{ key = \"icmpping\", interval = \"10s\" }} ]\n"));
        assert!(r.is_err(), "{cidr} taken");
    }
}

/// The README's configuration table of `section` (`"[daemon]"`): its heading's text up
/// to the next heading.
fn readme_section(section: &str) -> String {
    let readme = crate::test_util::readme();
    let heading = format!("### `{section}`");
    let from = readme
        .find(&heading)
        .unwrap_or_else(|| panic!("no {heading} in README.md"));
    let table = &readme[from + heading.len()..];
    table[..table.find("\n### ").unwrap_or(table.len())].to_string()
}

/// The row of `key` in the README's configuration table of `section` (`"[daemon]"`).
fn readme_row(section: &str, key: &str) -> String {
    readme_section(section)
        .lines()
        .find(|l| l.starts_with(&format!("| `{key}`")))
        .unwrap_or_else(|| panic!("no row for `{key}` under {section} in README.md"))
        .to_string()
}

/// `n` as the README writes numbers: `1,024`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The README says how many values the engines hand over at once (it said 256 after
/// the batch had grown to 1,024).
#[test]
fn the_readme_gives_the_channel_batch_size() {
    let row = readme_row("[daemon]", "channel_capacity");
    let size = grouped(poller::engine::EMIT_BATCH);
    assert!(
        row.contains(&format!("batches of up to {size} ")),
        "README's channel_capacity row does not say batches of up to {size}: {row}"
    );
}

/// The README's configuration reference states the limits the loader enforces that an
/// operator would otherwise learn from `check-config` alone: `icmp.max_pps = 0` is
/// refused (where `snmp.max_pps = 0` means no cap), `daemon.trends_checkpoint` is `0s`
/// or at least `1s`, a ClickHouse URL is `http://`, `clickhouse.batch_bytes` is within
/// 1 KiB..1 GiB, and a host range's `name` defaults to `{ip}`.
#[test]
fn the_readme_states_the_limits_the_loader_enforces() {
    for (section, key, refused, said) in [
        ("[icmp]", "max_pps", "[icmp]\nmax_pps = 0\n", "at least 1"),
        (
            "[daemon]",
            "trends_checkpoint",
            "[daemon]\ntrends_checkpoint = \"500ms\"\n",
            "at least `1s`",
        ),
        (
            "[clickhouse]",
            "url` / `urls",
            "[clickhouse]\nurl = \"https://127.0.0.1:8123\"\n",
            "`http://` only",
        ),
        (
            "[clickhouse]",
            "batch_bytes",
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nbatch_bytes = 1023\n",
            "(1 KiB..1 GiB)",
        ),
        (
            "[clickhouse]",
            "batch_bytes",
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nbatch_bytes = 1073741825\n",
            "(1 KiB..1 GiB)",
        ),
    ] {
        errs(refused);
        let row = readme_row(section, key);
        assert!(row.contains(said), "{section} {key}: not {said:?}: {row}");
    }
    let cfg = parse(
        "[[host_ranges]]\ncidr = \"127.0.55.0/30\"\nitems = [ { key = \"icmpping\", interval = \"1m\" } ]\n",
    )
    .unwrap();
    assert_eq!(&*cfg.hosts[0].name, "127.0.55.1");
    let readme = crate::test_util::readme();
    let range = &readme[readme.find("\n[[host_ranges]]").unwrap()..];
    let name = range.lines().find(|l| l.starts_with("name =")).unwrap();
    assert!(name.contains("default \"{ip}\""), "{name}");
}

/// The README says when extra SNMP socket sets are opened as the engine opens them:
/// past SLOW_ITERATION, up to EXTRA_SNMP_DRIVERS times as many, and never while the
/// samples' channel is full (389f6e7, which the row had not caught up with).
#[test]
fn the_readme_says_when_extra_snmp_sets_open() {
    let row = readme_row("[daemon]", "snmp_concurrent_iterations");
    let slow = poller::daemon::SLOW_ITERATION.as_millis();
    let extra = crate::cmd::EXTRA_SNMP_DRIVERS;
    for said in [
        format!("past {slow} ms"),
        format!("up to {extra}× this many"),
        "not while the channel to the sink is full".to_string(),
    ] {
        assert!(row.contains(&said), "not {said:?}: {row}");
    }
}

/// A secret the file gives as a TOML number (or any value serde refuses) is reported
/// without its value: serde's message quotes it ("invalid type: integer `8675309`"),
/// which check-config printed and a refused reload logged, while the docs promise no
/// community, passphrase or password in error messages.
#[test]
fn refused_secrets_are_not_shown() {
    let e = errs(
        "[snmp]\ncommunity = 8675309\n\
         [clickhouse]\nurl = \"http://127.0.0.1:8123\"\npassword = 31415926\n\
         [[hosts]]\nname = \"h\"\nip = \"127.0.55.1\"\n\
         snmp = { version = \"3\", security_name = \"u\", auth_protocol = \"SHA\", \
         auth_passphrase = 27182818284, priv_protocol = \"AES\", priv_passphrase = 1.5 }\n\
         items = [ { key = \"k\", oid = \"1.3.6.1\", type = \"uint\", interval = \"1m\" } ]\n",
    );
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "snmp.community",
            "clickhouse.password",
            "hosts[0].snmp.auth_passphrase",
            "hosts[0].snmp.priv_passphrase"
        ],
        "{e:#?}"
    );
    for e in &e {
        for secret in ["8675309", "31415926", "27182818284", "1.5"] {
            assert!(!e.message.contains(secret), "{}: {}", e.path, e.message);
        }
        assert!(e.message.ends_with("expected a string"), "{}", e.message);
    }
    // Other keys keep serde's message, value and all.
    assert_eq!(
        one_err("[snmp]\nport = \"x\"\n").message,
        "invalid type: string \"x\", expected u16"
    );
}

/// A template, host or range that does not read (an unknown key, a value of the wrong
/// type) has its values checked once it reads, as the README says: the sections are
/// read without what they refused and checked in the same run, these pieces are not
/// (the README said every problem is reported at once, and an operator fixing the
/// typo met the next error only then).
#[test]
fn a_piece_that_does_not_read_is_checked_once_it_reads() {
    let text = |first: &str| {
        format!(
            "[[templates]]\nname = \"t\"\nitems = [ {{ key = \"x\", oid = \"1.3.6.1\", type = \"uint\", {first} = \"1m\" }},\n  {{ key = \"icmpping\", interval = \"0s\" }} ]\n"
        )
    };
    let e = one_err(&text("delay"));
    assert_eq!(e.path, "templates[0].items[0].delay");
    let e = one_err(&text("interval"));
    assert_eq!(e.path, "templates[0].items[1].interval");
    let readme = crate::test_util::readme().replace('\n', " ");
    assert!(
        readme.contains(
            "but for the values of a template, host or range with an unknown key or a value of the wrong type: they are checked once it reads"
        ),
        "README.md overstates what one check-config run reports"
    );
    // The command's own row says it too: it said "listing every problem" alone.
    let row = crate::test_util::readme()
        .lines()
        .find(|l| l.starts_with("| `netpoller check-config"))
        .expect("check-config's row")
        .to_string();
    for said in [
        "a TOML syntax error is listed alone",
        "the values of a template, host or range that does not read (an unknown key, a value of the wrong type) once it reads",
    ] {
        assert!(row.contains(said), "not {said:?}: {row}");
    }
}

/// One template named as a string, not a list (`templates = "t"`): the error says to
/// write the list, not only serde's "expected a sequence".
#[test]
fn a_string_where_a_list_is_wanted_is_told_to_be_a_list() {
    let text =
        "[[templates]]\nname = \"t\"\nitems = [{ key = \"icmpping\", interval = \"10s\" }]\n\
                [[hosts]]\nname = \"h\"\nip = \"127.0.156.1\"\ntemplates = \"t\"\n";
    let e = one_err(text).to_string();
    assert!(
        e.contains("line 7: hosts[0].templates: invalid type: string \"t\", expected a sequence: write a list, [\"t\"]"),
        "{e}"
    );
}

/// One inline table where a list of them is wanted (`items = { key = ... }`, a list's
/// brackets forgotten): the error says to write the list, not only serde's "invalid
/// type: map, expected a sequence".
#[test]
fn a_table_where_a_list_of_tables_is_wanted_is_told_to_be_a_list() {
    let e = one_err(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\nitems = { key = \"icmpping\", interval = \"1m\" }\n",
    );
    assert_eq!(e.path, "hosts[0].items");
    assert_eq!(
        e.message,
        "invalid type: map, expected a sequence: write a list of tables, [{ ... }], around it"
    );
}

/// A whole number where a string is wanted (`daemon.shard = 4`, a host named `101`):
/// the error says to quote it, not only serde's "expected a string".
#[test]
fn a_number_where_a_string_is_wanted_is_told_to_be_quoted() {
    let e = one_err("[daemon]\nshard = 4\n[[hosts]]\nname = \"h\"\nip = \"127.0.156.1\"\n");
    assert_eq!(
        e.to_string(),
        "line 2: daemon.shard: invalid type: integer `4`, expected a string: write it quoted, \"4\""
    );
    let e = one_err("[[hosts]]\nname = 101\nip = \"127.0.156.1\"\n");
    assert!(e.to_string().ends_with("write it quoted, \"101\""), "{e}");
}

/// A number in quotes where a number is wanted (`port = "161"`, as a YAML or JSON export
/// writes it): the error says to write it unquoted, not only serde's "expected u16"; a
/// string that is no number keeps serde's message.
#[test]
fn a_number_in_quotes_where_a_number_is_wanted_is_told_to_be_unquoted() {
    let e = one_err("[snmp]\nport = \"161\"\n");
    assert_eq!(
        e.to_string(),
        "line 2: snmp.port: invalid type: string \"161\", expected u16: write the number unquoted, 161"
    );
    let e = one_err("[[hosts]]\nname = \"h\"\nip = \"127.0.220.1\"\nsnmp = { port = \"1161\" }\n");
    assert!(
        e.to_string().ends_with("write the number unquoted, 1161"),
        "{e}"
    );
    let e = one_err("[icmp]\nsize = \"abc\"\n");
    assert_eq!(e.message, "invalid type: string \"abc\", expected u32");
}

/// An empty community where SNMPv1/v2c would send it is refused at its line, saying what
/// to write (agents answer no request without theirs: every poll only timed out); where
/// no v1/v2c poll takes it (a v3 host, a host with its own, an ICMP-only host) it is not.
#[test]
fn an_empty_v1_v2c_community_is_refused_at_its_line() {
    let item = "items = [ { key = \"k\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" } ]";
    let icmp = "items = [ { key = \"icmpping\", interval = \"10s\" } ]";
    let what = "write the agent's, e.g. community = \"public\", or set version = \"3\" for SNMPv3";
    // `[snmp]`'s, taken by a v2c host and a v1 range: reported once, naming the first.
    let e = one_err(&format!("[snmp]\ncommunity = \"\"\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\n{item}\n[[host_ranges]]\ncidr = \"127.0.161.8/30\"\nsnmp = {{ version = \"1\" }}\n{item}\n"));
    assert_eq!(
        (e.path.as_str(), e.line),
        ("snmp.community", Some(2)),
        "{e}"
    );
    assert!(
        e.message
            .starts_with("an empty community (hosts[0] polls SNMPv2c with it): "),
        "{e}"
    );
    assert!(e.message.ends_with(what), "{e}");
    // A host's or a range's own, at its line, also without SNMP items (written there).
    let e = one_err(&format!(
        "[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\nsnmp = {{ community = \"\" }}\n{icmp}\n"
    ));
    assert_eq!(
        (e.path.as_str(), e.line),
        ("hosts[0].snmp.community", Some(4)),
        "{e}"
    );
    assert!(
        e.message.starts_with("an empty community: ") && e.message.ends_with(what),
        "{e}"
    );
    let e = one_err(&format!("[[host_ranges]]\ncidr = \"127.0.161.8/30\"\n{item}\nsnmp = {{ version = \"1\", community = \"\" }}\n"));
    assert_eq!(
        (e.path.as_str(), e.line),
        ("host_ranges[0].snmp.community", Some(4)),
        "{e}"
    );
    // Where no v1/v2c request carries it, it is nobody's mistake.
    let v3 = "security_name = \"monitor\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"12345678\"";
    for ok in [
        format!("[snmp]\nversion = \"3\"\ncommunity = \"\"\n{v3}\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\n{item}\n"),
        format!("[snmp]\ncommunity = \"\"\n{v3}\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\nsnmp = {{ version = \"3\" }}\n{item}\n"),
        format!("[snmp]\ncommunity = \"\"\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\nsnmp = {{ community = \"s3cret\" }}\n{item}\n"),
        format!("[snmp]\ncommunity = \"\"\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\n{icmp}\n"),
        format!("[snmp]\n{v3}\n[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\nsnmp = {{ version = \"3\", community = \"\" }}\n{item}\n"),
    ] {
        assert!(errs_or_none(&ok).is_empty(), "{ok}\n{:#?}", errs_or_none(&ok));
    }
}

/// Every spelling of an SNMP version the loader takes is in the README's `[snmp]`
/// `version` row (`"v2c"` and `"2"` were taken but said nowhere).
#[test]
fn the_readme_names_every_snmp_version_spelling() {
    let row = readme_row("[snmp]", "version");
    for (spelling, want) in SnmpVersion::SPELLINGS {
        let cfg = parse(&format!("[snmp]\nversion = \"{spelling}\"\n"))
            .unwrap_or_else(|e| panic!("{spelling}: {e:#?}"));
        assert_eq!(SnmpVersion::from(cfg.snmp.version), want, "{spelling}");
        assert!(
            row.contains(&format!("`\"{spelling}\"`")),
            "README's [snmp] version row lacks \"{spelling}\": {row}"
        );
    }
}

/// A Zabbix user macro left where a community or an SNMPv3 setting goes (Zabbix's SNMP
/// interface holds `{$SNMP_COMMUNITY}` unless changed, copied by hand) is refused at its
/// line, the macro not quoted (a secret's place): it loaded, and every poll timed out
/// (or failed on an unknown user) with the macro sent as the community or passphrase.
#[test]
fn a_zabbix_macro_left_as_community_or_v3_setting_is_refused_at_its_line() {
    let item = "items = [ { key = \"k\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"10s\" } ]";
    let host = "[[hosts]]\nname = \"a\"\nip = \"127.0.161.1\"\n";
    let says = "is a Zabbix user macro ({$...}): netpoller resolves no macros";
    // `[snmp]`'s, taken by a v2c host; a host's own; a range's with context.
    for (text, path, line) in [
        (format!("[snmp]\ncommunity = \"{{$SNMP_COMMUNITY}}\"\n{host}{item}\n"), "snmp.community", 2),
        (format!("{host}snmp = {{ community = \"{{$SNMP_COMMUNITY}}\" }}\n{item}\n"), "hosts[0].snmp.community", 4),
        (format!("[[host_ranges]]\ncidr = \"127.0.161.8/30\"\n{item}\nsnmp = {{ version = \"1\", community = \"{{$COMMUNITY:\\\"edge\\\"}}\" }}\n"), "host_ranges[0].snmp.community", 4),
    ] {
        let e = one_err(&text);
        assert_eq!((e.path.as_str(), e.line), (path, Some(line)), "{e}");
        assert!(e.message.contains(says), "{e}");
        assert!(!e.to_string().contains("COMMUNITY"), "a community is not quoted: {e}");
    }
    // Each SNMPv3 field, in `[snmp]` or a host's table; a passphrase macro is long
    // enough to pass the length check, and was taken as the passphrase.
    let v3 = [
        ("security_name", "security_name = \"{$SNMPV3_USER}\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"12345678\""),
        ("auth_passphrase", "security_name = \"mon\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"{$SNMPV3_AUTHPASS}\""),
        ("priv_passphrase", "security_name = \"mon\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"12345678\"\npriv_protocol = \"AES\"\npriv_passphrase = \"{$SNMPV3_PRIVPASS}\""),
        ("context_name", "security_name = \"mon\"\ncontext_name = \"{$SNMPV3_CONTEXT}\""),
        ("auth_protocol", "security_name = \"mon\"\nauth_protocol = \"{$SNMPV3_AUTHPROTOCOL}\"\nauth_passphrase = \"12345678\""),
    ];
    for (field, fields) in v3 {
        let e = one_err(&format!(
            "[snmp]\nversion = \"3\"\n{fields}\n{host}{item}\n"
        ));
        assert_eq!(e.path, format!("snmp.{field}"), "{e}");
        assert!(
            e.message
                .starts_with("an SNMPv3 setting is a Zabbix user macro"),
            "{e}"
        );
        assert!(!e.to_string().contains("SNMPV3_"), "not quoted: {e}");
        let inline = fields.replace('\n', ", ");
        let e = one_err(&format!(
            "{host}snmp = {{ version = \"3\", {inline} }}\n{item}\n"
        ));
        assert_eq!(e.path, format!("hosts[0].snmp.{field}"), "{e}");
    }
    // Braces that are no whole macro are a community like any other.
    for ok in ["{$lower}", "x{$SNMP_COMMUNITY}", "{$}", "{SNMP}"] {
        let text = format!("{host}snmp = {{ community = \"{ok}\" }}\n{item}\n");
        assert!(
            errs_or_none(&text).is_empty(),
            "{ok}: {:#?}",
            errs_or_none(&text)
        );
    }
}

/// A host or range with neither templates nor items loads, with a warning at its entry:
/// `check-config` said only "OK" for a forgotten `templates` line.
#[test]
fn a_host_or_range_that_polls_nothing_is_warned_of() {
    let text = format!(
        "{TEMPLATE}[[hosts]]\nname = \"bare\"\nip = \"127.0.156.5\"\n[[hosts]]\nname = \"h\"\nip = \"127.0.156.6\"\ntemplates = [\"icmp\"]\n[[host_ranges]]\ncidr = \"127.0.157.0/30\"\n"
    );
    let cfg = parse(&text).unwrap_or_else(|e| panic!("{e:#?}"));
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].contains("hosts[0]: polls nothing: no templates and no items"),
        "{w:#?}"
    );
    assert!(w[1].contains("host_ranges[0]: polls nothing"), "{w:#?}");
}

/// A host's template that is a typo of a defined one (`icmpp`) is told the name meant,
/// and a file of hundreds of templates (an import: one per Zabbix discovery rule) lists
/// ten of them, not a line of every one (it listed them all, with no suggestion).
#[test]
fn an_unknown_template_is_told_the_nearest_and_a_short_list() {
    let e = one_err(&format!(
        "{TEMPLATE}[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\ntemplates = [\"icmpp\"]\n"
    ));
    assert_eq!(
        (e.path.as_str(), e.line),
        ("hosts[0].templates[0]", Some(12))
    );
    assert_eq!(
        e.message,
        "unknown template \"icmpp\": did you mean \"icmp\"? (defined: [\"icmp\"])"
    );
    let many: String = (0..30)
        .map(|i| format!("[[templates]]\nname = \"switch-{i:02}\"\n"))
        .collect();
    let e = one_err(&format!(
        "{many}[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\ntemplates = [\"router\"]\n"
    ));
    assert_eq!(
        e.message,
        "unknown template \"router\" (defined: [\"switch-00\", \"switch-01\", \"switch-02\", \
         \"switch-03\", \"switch-04\", \"switch-05\", \"switch-06\", \"switch-07\", \
         \"switch-08\", \"switch-09\"] and 20 more)"
    );
}

/// The keys of the README's configuration table of `section` (`"[daemon]"`), with the
/// default each row gives: a row of two keys (`user` / `password`) gives one each.
fn readme_table(section: &str) -> Vec<(String, String)> {
    let table = readme_section(section);
    let mut keys = Vec::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let names: Vec<&str> = cells[0].trim_start_matches("| ").split(" / ").collect();
        let defaults: Vec<&str> = cells[1].split(" / ").collect();
        for (i, name) in names.iter().enumerate() {
            let default = if names.len() == defaults.len() {
                defaults[i]
            } else {
                cells[1]
            };
            keys.push((name.trim_matches('`').to_string(), default.to_string()));
        }
    }
    keys
}

/// A default as the README's tables write it: `` `4` ``, `` `"5s"` ``, `1 GiB`.
fn readme_default(v: &dyn std::fmt::Display) -> String {
    format!("`{v}`")
}

fn readme_duration(d: Duration) -> String {
    format!("`\"{}\"`", humantime::format_duration(d))
}

fn readme_bytes(n: u64) -> String {
    match n {
        n if n.is_multiple_of(1 << 30) => format!("{} GiB", n >> 30),
        n => format!("{} MiB", n >> 20),
    }
}

/// The README's tables of `[daemon]`, `[clickhouse]`, `[icmp]` and `[snmp]` have a row
/// for every key the loader takes there and for no other key, and give the loader's
/// default: a key added to a section, renamed or given another default without the
/// reference that operators write their files from fails here.
#[test]
fn the_readme_tables_give_every_section_key_and_its_default() {
    let sections: [(&str, &[&str]); 4] = [
        ("[daemon]", field_names::<DaemonSection>()),
        ("[clickhouse]", field_names::<sink::ClickHouseConfig>()),
        ("[icmp]", field_names::<IcmpSection>()),
        ("[snmp]", field_names::<SnmpSection>()),
    ];
    for (section, fields) in sections {
        let rows: Vec<String> = readme_table(section).into_iter().map(|r| r.0).collect();
        let mut want: Vec<&str> = fields.to_vec();
        let mut got: Vec<&str> = rows.iter().map(String::as_str).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(
            got, want,
            "README's {section} table against the loader's keys"
        );
    }
    let d = DaemonSection::default();
    let ch = sink::ClickHouseConfig::default();
    let i = IcmpSection::default();
    let s = SnmpSection::default();
    let want: Vec<(&str, &str, String)> = vec![
        ("[daemon]", "shards", readme_default(&d.shards)),
        (
            "[daemon]",
            "metrics_listen",
            readme_default(&format!("{:?}", d.metrics_listen)),
        ),
        (
            "[daemon]",
            "spool_dir",
            readme_default(&format!("{:?}", d.spool_dir)),
        ),
        (
            "[daemon]",
            "spool_max_bytes",
            readme_bytes(d.spool_max_bytes),
        ),
        (
            "[daemon]",
            "spool_fsync_interval",
            readme_duration(d.spool_fsync_interval),
        ),
        (
            "[daemon]",
            "channel_capacity",
            readme_default(&d.channel_capacity),
        ),
        ("[daemon]", "batch_window", readme_duration(d.batch_window)),
        (
            "[daemon]",
            "icmp_phases",
            readme_default(&format!("\"{:?}\"", d.icmp_phases).to_lowercase()),
        ),
        (
            "[daemon]",
            "icmp_batch_hosts",
            readme_default(&d.icmp_batch_hosts),
        ),
        (
            "[daemon]",
            "snmp_batch_requests",
            readme_default(&d.snmp_batch_requests),
        ),
        (
            "[daemon]",
            "icmp_concurrent_sweeps",
            readme_default(&d.icmp_concurrent_sweeps),
        ),
        (
            "[daemon]",
            "snmp_concurrent_iterations",
            readme_default(&d.snmp_concurrent_iterations),
        ),
        (
            "[daemon]",
            "trends_checkpoint",
            readme_duration(d.trends_checkpoint),
        ),
        (
            "[daemon]",
            "discovery_file",
            readme_default(&format!("{:?}", d.discovery_file)),
        ),
        (
            "[clickhouse]",
            "database",
            readme_default(&format!("{:?}", ch.database)),
        ),
        (
            "[clickhouse]",
            "user",
            readme_default(&format!("{:?}", ch.user)),
        ),
        (
            "[clickhouse]",
            "password",
            readme_default(&format!("{:?}", ch.password)),
        ),
        ("[clickhouse]", "batch_rows", readme_default(&ch.batch_rows)),
        (
            "[clickhouse]",
            "batch_bytes",
            readme_bytes(ch.batch_bytes as u64),
        ),
        (
            "[clickhouse]",
            "flush_interval",
            readme_duration(ch.flush_interval),
        ),
        (
            "[clickhouse]",
            "max_inflight_inserts",
            readme_default(&ch.max_inflight_inserts),
        ),
        (
            "[clickhouse]",
            "compression",
            readme_default(&format!("\"{:?}\"", ch.compression).to_lowercase()),
        ),
        ("[clickhouse]", "trends", readme_default(&ch.trends)),
        (
            "[clickhouse]",
            "request_timeout",
            readme_duration(ch.request_timeout),
        ),
        (
            "[clickhouse]",
            "max_attempts",
            readme_default(&ch.max_attempts),
        ),
        (
            "[clickhouse]",
            "retry_backoff",
            readme_duration(ch.retry_backoff),
        ),
        (
            "[clickhouse]",
            "retry_backoff_max",
            readme_duration(ch.retry_backoff_max),
        ),
        ("[icmp]", "timeout", readme_duration(i.timeout)),
        ("[icmp]", "packets", readme_default(&i.packets)),
        ("[icmp]", "interval", readme_duration(i.interval)),
        ("[icmp]", "size", readme_default(&i.size)),
        ("[icmp]", "max_pps", readme_default(&i.max_pps)),
        (
            "[snmp]",
            "version",
            // The version's first spelling, net-snmp's `-v`: "2c".
            readme_default(&format!(
                "{:?}",
                SnmpVersion::SPELLINGS
                    .iter()
                    .find(|(_, v)| *v == SnmpVersion::from(s.version))
                    .unwrap()
                    .0
            )),
        ),
        (
            "[snmp]",
            "community",
            readme_default(&format!("{:?}", s.community)),
        ),
        ("[snmp]", "port", readme_default(&s.port)),
        ("[snmp]", "timeout", readme_duration(s.timeout)),
        ("[snmp]", "retries", readme_default(&s.retries)),
        (
            "[snmp]",
            "max_oids_per_request",
            readme_default(&s.max_oids_per_request),
        ),
        (
            "[snmp]",
            "max_inflight_per_host",
            readme_default(&s.max_inflight_per_host),
        ),
        ("[snmp]", "max_pps", readme_default(&s.max_pps)),
    ];
    for (section, key, default) in want {
        let rows = readme_table(section);
        let row = rows.iter().find(|r| r.0 == key).unwrap();
        assert_eq!(
            row.1, default,
            "README's {section} `{key}` default against the loader's"
        );
    }
}

/// Every TOML example of README.md and docs/production.md loads as written: a whole
/// file as it is, an item (`{ key = ... }`) as a template's, linked by a host. An
/// example copied into a config that the loader refuses teaches the wrong file.
#[test]
fn every_toml_example_of_the_docs_loads() {
    let mut seen = 0;
    for path in ["README.md", "docs/production.md"] {
        let text = crate::test_util::doc(path);
        let mut lines = text.lines().enumerate();
        while let Some((at, line)) = lines.next() {
            if line.trim() != "```toml" {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            let block: String = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| l.trim() != "```")
                .map(|l| format!("{}\n", l.get(indent..).unwrap_or(l.trim_start())))
                .collect();
            let body = block
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .collect::<String>();
            let file = if body.trim_start().starts_with('{') {
                format!(
                    "[[templates]]\nname = \"example\"\nitems = [\n{block}]\n[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\ntemplates = [\"example\"]\n"
                )
            } else {
                block
            };
            if let Err(e) = parse(&file) {
                panic!(
                    "{path}:{}: the example does not load: {e:#?}\n{file}",
                    at + 1
                );
            }
            seen += 1;
        }
    }
    assert!(seen >= 8, "{seen} TOML examples found");
}

/// Every key of a template, host, range, item, preprocessing step, discovery rule and
/// filter is named in the README (`` `key` ``, or `key =` in an example): a key the
/// loader takes that no reference gives is one operators never learn of.
#[test]
fn the_readme_names_every_key_of_the_entries() {
    let readme = crate::test_util::readme();
    for (place, keys) in key_places() {
        for key in keys {
            assert!(
                readme.contains(&format!("`{key}`")) || readme.contains(&format!("{key} = ")),
                "README.md does not name {place}'s `{key}`"
            );
        }
    }
}

/// An item without an interval (and none from a template's item of its key) is refused
/// in the words the README quotes.
#[test]
fn an_item_without_an_interval_is_refused_as_the_readme_says() {
    let e = bad("{ key = \"icmpping\" }");
    assert_eq!(e.message, "item \"icmpping\" has no interval");
    assert!(
        crate::test_util::readme().contains("`check-config`: `item \"icmpping\" has no interval`")
    );
}

/// Every spelling the README's `[snmp]` rows give for a security level and the two
/// protocols (`` `sha256` ``, `` `AES128` ``, `` `noAuth` ``: the loader takes more than
/// net-snmp's names, which the rows said nowhere) loads as that key's value.
#[test]
fn the_readme_snmpv3_spellings_load() {
    let ticked = regex::Regex::new(r"`([A-Za-z0-9-]+)`").unwrap();
    let mut seen = 0;
    for key in ["security_level", "auth_protocol", "priv_protocol"] {
        let row = readme_row("[snmp]", key);
        let meaning = row.split(" | ").nth(2).unwrap();
        for c in ticked.captures_iter(meaning) {
            let v = &c[1];
            // The other keys the row names (`priv_passphrase`, `authNoPriv` on).
            if v.contains('_') || (key != "security_level" && v.starts_with("auth")) {
                continue;
            }
            let text = format!(
                "[snmp]\nversion = \"3\"\nsecurity_name = \"u\"\nauth_protocol = \"SHA\"\nauth_passphrase = \"longenough\"\npriv_protocol = \"AES\"\npriv_passphrase = \"longenough\"\nsecurity_level = \"authPriv\"\n{key} = \"{v}\"\n"
            );
            // The security level given last overrides the one above; TOML refuses a key
            // twice, so the file says it once.
            let text = text.replacen(&format!("{key} = "), "# ", 1);
            let e = errs_or_none(&format!("{text}[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\nitems = [ {{ key = \"x\", oid = \"1.3.6.1.2.1.1.1.0\", type = \"str\", interval = \"1m\" }} ]\n"));
            assert!(
                e.iter().all(|e| !e.path.ends_with(key)),
                "README's {key} `{v}`: {e:#?}"
            );
            seen += 1;
        }
    }
    assert!(seen >= 20, "{seen} spellings found");
}

/// docs/production.md's sizing table gives each setting the default the README's
/// reference gives (which the test above holds to the loader's): the operator sizing a
/// deployment reads it there.
#[test]
fn the_production_sizing_table_gives_the_readme_defaults() {
    let plain = |s: &str| s.replace(['`', '"', ','], "").trim().to_string();
    let text = crate::test_util::doc("docs/production.md");
    let mut seen = 0;
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        // The rows of settings (`daemon.shards`), not of commands or alerts.
        let Some((section, first)) = cells[0]
            .trim_start_matches("| `")
            .split_once('.')
            .filter(|(s, _)| ["daemon", "clickhouse", "icmp", "snmp"].contains(s))
        else {
            continue;
        };
        let section = format!("[{section}]");
        // `clickhouse.batch_rows` / `flush_interval`: two keys of one section.
        let keys: Vec<&str> = first.split(" / ").map(|k| k.trim_matches('`')).collect();
        let defaults: Vec<&str> = cells[1].split(" / ").collect();
        assert_eq!(keys.len(), defaults.len(), "{line}");
        let readme = readme_table(&section);
        for (key, default) in keys.iter().zip(defaults) {
            let (_, want) = readme
                .iter()
                .find(|(k, _)| k == key)
                .unwrap_or_else(|| panic!("no {section} `{key}` in the README"));
            assert_eq!(
                plain(default),
                plain(want),
                "docs/production.md's {section} `{key}` default against the README's"
            );
            seen += 1;
        }
    }
    assert!(seen >= 10, "{seen} settings found");
}

/// A preprocessing type that is a typo of one netpoller runs (`MULTIPLER`) is told the
/// one meant; a type it does not run (`JSONPATH`) gets the list alone.
#[test]
fn a_misspelt_preprocessing_type_is_told_the_one_meant() {
    let step = |t: &str| {
        bad(&format!("{{ key = \"x\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1m\", preprocessing = [{{ type = \"{t}\", parameters = [\"8\"] }}] }}"))
    };
    let e = step("MULTIPLER");
    assert_eq!(e.path, "hosts[0].items[0].preprocessing[0].type");
    assert!(
        e.message.starts_with(
            "unknown preprocessing type \"MULTIPLER\" (did you mean \"MULTIPLIER\"?): netpoller runs SIMPLE_CHANGE, "
        ),
        "{e}"
    );
    assert!(step("change_per_secnd")
        .message
        .contains("(did you mean \"CHANGE_PER_SECOND\"?)"));
    let e = step("JSONPATH");
    assert!(
        e.message
            .starts_with("unknown preprocessing type \"JSONPATH\": netpoller runs ")
            && e.message
                .ends_with("DISCARD_UNCHANGED and DISCARD_UNCHANGED_HEARTBEAT"),
        "{e}"
    );
}

/// An OID pasted from snmpwalk's default output (`iso.3.6.1.2.1.1.1.0`) is told the
/// number it is (iso is 1); it was sent to `snmptranslate` like a MIB name.
#[test]
fn an_iso_oid_as_net_snmp_prints_it_is_told_its_number() {
    let e =
        bad("{ key = \"x\", oid = \"iso.3.6.1.2.1.1.1.0\", type = \"str\", interval = \"1m\" }");
    assert_eq!(e.path, "hosts[0].items[0].oid");
    assert_eq!(
        e.message,
        "\"iso.3.6.1.2.1.1.1.0\" is 1.3.6.1.2.1.1.1.0 as net-snmp prints it (iso is 1; netpoller reads no MIBs): write 1.3.6.1.2.1.1.1.0"
    );
    // A MIB name after iso is still a name.
    assert!(numeric_oid("iso.org.dod", "1.3.6.1.2.1.1.1.0")
        .unwrap_err()
        .contains("`snmptranslate -On iso.org.dod` gives the number"));
}

/// What a Zabbix SNMP item's OID field holds and a netpoller `oid` does not, copied by
/// hand, is said as such: Zabbix 6.4's `get[OID]` with the OID to write (it was sent to
/// `snmptranslate` as a MIB name), a `walk[...]` or `discovery[...]` as a table's
/// reading (rows of items here), and a user macro as what netpoller does not resolve
/// (it was "not a number"); an interval that is a macro likewise.
#[test]
fn zabbix_oid_forms_and_macros_are_told_what_to_write() {
    let at = |oid: &str| {
        let e = bad(&format!(
            "{{ key = \"x\", oid = \"{oid}\", type = \"str\", interval = \"1m\" }}"
        ));
        assert_eq!(e.path, "hosts[0].items[0].oid", "{e}");
        e.message
    };
    assert_eq!(
        at("get[1.3.6.1.2.1.1.1.0]"),
        "\"get[1.3.6.1.2.1.1.1.0]\" is Zabbix's get[] form of an SNMP item's OID: write 1.3.6.1.2.1.1.1.0"
    );
    assert_eq!(
        at("get[.1.3.6.1.2.1.1.5.0]"),
        "\"get[.1.3.6.1.2.1.1.5.0]\" is Zabbix's get[] form of an SNMP item's OID: write 1.3.6.1.2.1.1.5.0"
    );
    for table in [
        "walk[1.3.6.1.2.1.2.2.1.2,1.3.6.1.2.1.2.2.1.8]",
        "discovery[{#IFNAME},1.3.6.1.2.1.31.1.1.1.1]",
    ] {
        assert!(at(table).contains("is a Zabbix SNMP walk or discovery of a table, not one OID: here each row is an item"), "{table}");
    }
    assert_eq!(
        at("1.3.6.1.2.1.2.2.1.10.{$UPLINK.IFINDEX}"),
        "\"1.3.6.1.2.1.2.2.1.10.{$UPLINK.IFINDEX}\" holds the Zabbix user macro {$UPLINK.IFINDEX}: netpoller resolves no macros; write its value (`import-template` resolves a template's own)"
    );
    // A MIB name in get[] is still a name, told how to get its number.
    assert!(
        at("get[IF-MIB::ifDescr.1]")
            .ends_with("(`snmptranslate -On IF-MIB::ifDescr.1` gives the number)"),
        "{}",
        at("get[IF-MIB::ifDescr.1]")
    );
    let e = bad("{ key = \"icmpping\", interval = \"{$ICMP.DELAY}\" }");
    assert_eq!(
        e.message,
        "invalid duration \"{$ICMP.DELAY}\": a Zabbix user macro; netpoller resolves no macros: write its value, e.g. \"1m\""
    );
}

/// Every setting the documents and `--help` name as `section.key` (`daemon.spool_dir`,
/// `icmp.max_pps`, ...) is a key the loader takes in that section: prose written
/// before a key was renamed would send operators to a key that is refused.
#[test]
fn the_settings_the_docs_name_exist() {
    let named = regex::Regex::new(r"\b(daemon|clickhouse|icmp|snmp)\.([a-z_]+)\b").unwrap();
    let keys = |section: &str| match section {
        "daemon" => field_names::<DaemonSection>(),
        "clickhouse" => field_names::<sink::ClickHouseConfig>(),
        "icmp" => field_names::<IcmpSection>(),
        _ => field_names::<SnmpSection>(),
    };
    // Each command's --help, as `netpoller help <command>` prints it.
    let mut help = String::new();
    let mut todo = vec![<crate::Cli as clap::CommandFactory>::command()];
    while let Some(mut cmd) = todo.pop() {
        help.push_str(&cmd.render_long_help().to_string());
        todo.extend(cmd.get_subcommands().cloned());
    }
    let mut seen = 0;
    let docs = ["README.md", "docs/production.md", "packaging/README.md"]
        .map(|p| (p, crate::test_util::doc(p)));
    for (path, text) in docs.iter().map(|(p, t)| (*p, t)).chain([("--help", &help)]) {
        for c in named.captures_iter(text) {
            assert!(
                keys(&c[1]).contains(&&c[2]),
                "{path} names {}, which [{}] does not take",
                &c[0],
                &c[1]
            );
            seen += 1;
        }
    }
    assert!(seen > 30, "{seen} settings named");
}

/// A host's `snmp = "s3cret"` (the community written as the table) is refused without
/// its value, saying what to write; serde's message quoted it and named the Rust
/// struct, `SnmpOverride`.
#[test]
fn a_string_as_a_hosts_snmp_table_is_refused_without_its_value() {
    let e = one_err(
        "[[hosts]]\nname = \"h\"\nip = \"127.0.208.1\"\nsnmp = \"s3cret\"\nitems = [ { key = \"icmpping\", interval = \"1m\" } ]\n",
    );
    assert_eq!(e.path, "hosts[0].snmp");
    assert_eq!(
        e.message,
        "invalid type: string (the value of a secret is not shown), expected a table of SNMP settings: write snmp = { community = \"...\" }"
    );
}

/// A range's name with the placeholder misspelt (`{IP}`, `{ ip }`) is told its
/// spelling, beyond "must contain {ip}", which it seemed to.
#[test]
fn a_range_name_with_a_misspelt_placeholder_is_told_its_spelling() {
    for name in ["cpe-{IP}", "cpe-{ ip }"] {
        let e = one_err(&format!(
            "{TEMPLATE}[[host_ranges]]\ncidr = \"127.0.208.0/30\"\nname = \"{name}\"\ntemplates = [\"icmp\"]\n"
        ));
        assert_eq!(e.path, "host_ranges[0].name");
        assert_eq!(
            e.message,
            "name pattern must contain {ip} (host names must be unique): the placeholder is {ip}, in lower case, without spaces"
        );
    }
    let e = one_err(&format!(
        "{TEMPLATE}[[host_ranges]]\ncidr = \"127.0.208.0/30\"\nname = \"cpe\"\ntemplates = [\"icmp\"]\n"
    ));
    assert_eq!(
        e.message,
        "name pattern must contain {ip} (host names must be unique)"
    );
}

/// A wrong SNMPv3 value (an unknown protocol or level, a passphrase too short, a user
/// name too long) is refused where it is written, whether or not a host polls SNMP
/// with it: a host with ICMP items only passed with `auth_protocol = "SHA3"`, which
/// bit the day a template gave it SNMP items. Once, at its own key: a host that
/// inherits `[snmp]`'s wrong value is not told it at its own table as well. What only
/// a whole user can say (no user, a protocol without its passphrase) is asked of the
/// hosts that poll SNMP: an ICMP-only host's table that leaves it to `[snmp]` loads.
#[test]
fn a_wrong_snmpv3_value_is_refused_where_it_is_written_without_snmp_items() {
    let icmp = "items = [ { key = \"icmpping\", interval = \"1m\" } ]";
    let snmp_item = "items = [ { key = \"up\", oid = \"1.3.6.1.2.1.1.3.0\", type = \"uint\", interval = \"1m\" } ]";
    let host = |snmp: &str, items: &str| {
        format!("[[hosts]]\nname = \"a\"\nip = \"127.0.209.1\"\nsnmp = {{ {snmp} }}\n{items}\n")
    };
    let sha3 = "version = 3, security_name = \"u\", auth_protocol = \"SHA3\", auth_passphrase = \"12345678\", security_level = \"authnopriv\"";
    for items in [icmp, snmp_item] {
        let e = one_err(&host(sha3, items));
        assert_eq!(
            (e.path.as_str(), e.line),
            ("hosts[0].snmp.auth_protocol", Some(4)),
            "{e}"
        );
    }
    // Every wrong value of a table, each at its key; no secret shown.
    let e = errs(&host(
        "version = 3, security_name = \"u\", security_level = \"private\", auth_protocol = \"MD5\", auth_passphrase = \"s3cr\", priv_protocol = \"3DES\", priv_passphrase = \"12345678\"",
        icmp,
    ));
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "hosts[0].snmp.security_level",
            "hosts[0].snmp.auth_passphrase",
            "hosts[0].snmp.priv_protocol"
        ],
        "{e:#?}"
    );
    assert!(e.iter().all(|e| !e.message.contains("s3cr")), "{e:#?}");
    // A range's table, and [snmp]'s under ICMP-only hosts, alike.
    let e = one_err(&format!(
        "[[host_ranges]]\ncidr = \"127.0.209.0/30\"\nsnmp = {{ version = \"3\", security_name = \"{}\" }}\n{icmp}\n",
        "n".repeat(33)
    ));
    assert_eq!(e.path, "host_ranges[0].snmp.security_name", "{e}");
    let e = one_err(&format!(
        "[snmp]\nversion = \"3\"\nsecurity_name = \"u\"\nauth_protocol = \"SHA-265\"\nauth_passphrase = \"12345678\"\n{}",
        host("context_name = \"c\"", icmp)
    ));
    assert_eq!(
        (e.path.as_str(), e.line),
        ("snmp.auth_protocol", Some(4)),
        "{e}"
    );
    // Inherited by a host with its own SNMPv3 fields that polls SNMP: still one error,
    // at [snmp]'s key, not at the host's table, which does not say it.
    let e = one_err(&format!(
        "[snmp]\nversion = \"3\"\nauth_protocol = \"SHA-265\"\nauth_passphrase = \"12345678\"\n{}",
        host("security_name = \"v\"", snmp_item)
    ));
    assert_eq!(e.path, "snmp.auth_protocol", "{e}");
    // Valid tables load on ICMP-only hosts, also one that leaves the user to a
    // [snmp] that gives none: no SNMP poll needs it yet.
    for snmp in [
        sha3.replace("SHA3", "SHA-256"),
        "version = \"3\"".to_string(),
    ] {
        parse(&host(&snmp, icmp)).unwrap_or_else(|e| panic!("{snmp}: {e:#?}"));
    }
}

/// A host that does not read (here: no `ip`) hides no problem of the other hosts: the
/// file of a wrong SNMPv3 value on an ICMP-only host and a host without `ip` showed only
/// the missing `ip`, as the wrong value was never looked at.
#[test]
fn a_host_that_does_not_read_hides_no_problem_of_another() {
    let text = "[[hosts]]\nname = \"a\"\nip = \"127.0.209.1\"\nsnmp = { version = 3, security_name = \"u\", auth_protocol = \"SHA3\", auth_passphrase = \"12345678\" }\nitems = [{ key = \"icmpping\", interval = \"1m\" }]\n\n[[hosts]]\nname = \"b\"\nitems = [{ key = \"icmpping\", interval = \"1m\" }]\n";
    let e = errs(text);
    let got: Vec<(&str, Option<usize>)> = e.iter().map(|e| (e.path.as_str(), e.line)).collect();
    assert_eq!(
        got,
        [
            ("hosts[0].snmp.auth_protocol", Some(4)),
            ("hosts[1]", Some(7))
        ],
        "{e:#?}"
    );
}

/// An unknown value of an enumerated setting is quoted as written, with the spelling it
/// is a typo of when one is near (compared in any case): SNMPv3's protocols and level
/// said only "unknown SNMPv3 authentication protocol: expected one of ...", an item's
/// `type`, the other settings serde reads and a step's error_handler named the value
/// but not the one meant. An SNMPv3 protocol or level as long as a passphrase is not
/// shown (a passphrase in the wrong field must not reach a log), its typo still told.
/// A value a digit or a "no" away from a name is not told that name: `SHA3` was pointed
/// to `SHA` (SHA-1), `nopriv` to `authPriv`.
#[test]
fn an_unknown_enumerated_value_is_quoted_with_the_one_meant() {
    let snmp = |fields: &str| {
        one_err(&format!(
            "[[hosts]]\nname = \"a\"\nip = \"127.0.209.1\"\nsnmp = {{ version = 3, security_name = \"u\", {fields} }}\nitems = [ {{ key = \"icmpping\", interval = \"1m\" }} ]\n"
        ))
    };
    for (fields, path, said) in [
        (
            "auth_protocol = \"SHA-265\", auth_passphrase = \"12345678\"",
            "auth_protocol",
            "unknown SNMPv3 authentication protocol \"SHA-265\" (did you mean \"SHA-256\"?): expected one of MD5, SHA (SHA-1)",
        ),
        (
            "auth_protocol = \"SHA3\", auth_passphrase = \"12345678\"",
            "auth_protocol",
            "unknown SNMPv3 authentication protocol \"SHA3\": expected",
        ),
        // A digit or a "no" apart is another thing: no hint that points to it.
        (
            "auth_protocol = \"MD4\", auth_passphrase = \"12345678\"",
            "auth_protocol",
            "unknown SNMPv3 authentication protocol \"MD4\": expected",
        ),
        (
            "auth_protocol = \"MD5\", auth_passphrase = \"12345678\", priv_protocol = \"3DES\", priv_passphrase = \"12345678\"",
            "priv_protocol",
            "unknown SNMPv3 privacy protocol \"3DES\": expected one of DES",
        ),
        (
            "security_level = \"nopriv\"",
            "security_level",
            "unknown SNMPv3 security level \"nopriv\": use noAuthNoPriv, authNoPriv or authPriv",
        ),
        (
            "security_level = \"authNoPirv\"",
            "security_level",
            "unknown SNMPv3 security level (not shown: as long as a passphrase, it may be one) (did you mean \"authNoPriv\"?): use",
        ),
        (
            "auth_protocol = \"RIPEMD\", auth_passphrase = \"12345678\"",
            "auth_protocol",
            "unknown SNMPv3 authentication protocol \"RIPEMD\": expected",
        ),
        // As long as a passphrase: perhaps one, written in the wrong field.
        (
            "auth_protocol = \"np-auth-pass\", auth_passphrase = \"12345678\"",
            "auth_protocol",
            "unknown SNMPv3 authentication protocol (not shown: as long as a passphrase, it may be one): expected",
        ),
        (
            "auth_protocol = \"MD5\", auth_passphrase = \"12345678\", priv_protocol = \"aes265\", priv_passphrase = \"12345678\"",
            "priv_protocol",
            "unknown SNMPv3 privacy protocol \"aes265\" (did you mean \"AES-256\"?): expected one of DES",
        ),
        (
            "security_level = \"authPirv\"",
            "security_level",
            "unknown SNMPv3 security level (not shown: as long as a passphrase, it may be one) (did you mean \"authPriv\"?): use noAuthNoPriv, authNoPriv or authPriv",
        ),
        (
            "security_level = \"autpriv\"",
            "security_level",
            "unknown SNMPv3 security level \"autpriv\" (did you mean \"authPriv\"?): use",
        ),
    ] {
        let e = snmp(fields);
        assert_eq!(e.path, format!("hosts[0].snmp.{path}"), "{e}");
        assert!(e.message.starts_with(said), "{fields}:\n{e}");
    }
    // serde's enumerations: an item's type, daemon.icmp_phases, clickhouse.compression.
    for (text, path, said) in [
        (
            "[[hosts]]\nname = \"h\"\nip = \"127.0.209.1\"\nitems = [ { key = \"k\", oid = \"1.3.6.1\", type = \"unit\", interval = \"1m\" } ]\n",
            "hosts[0].items[0].type",
            "unknown variant `unit` (did you mean `uint`?), expected one of `float`, `uint`, `str`",
        ),
        (
            "[[hosts]]\nname = \"h\"\nip = \"127.0.209.1\"\nitems = [ { key = \"k\", oid = \"1.3.6.1\", type = \"UINT\", interval = \"1m\" } ]\n",
            "hosts[0].items[0].type",
            "unknown variant `UINT` (did you mean `uint`?), expected",
        ),
        (
            "[daemon]\nicmp_phases = \"spred\"\n",
            "daemon.icmp_phases",
            "unknown variant `spred` (did you mean `spread`?), expected `grouped` or `spread`",
        ),
        (
            "[daemon]\nicmp_phases = \"even\"\n",
            "daemon.icmp_phases",
            "unknown variant `even`, expected",
        ),
    ] {
        let e = one_err(text);
        assert_eq!(e.path, path, "{e}");
        assert!(e.message.starts_with(said), "{text}\n{e}");
    }
    // A preprocessing step's error_handler.
    let e = bad(
        r#"{ key = "k", oid = "1.3.6.1", type = "uint", interval = "1m", preprocessing = [ { type = "MULTIPLIER", parameters = ["8"], error_handler = "DISCARD_VALEU" } ] }"#,
    );
    assert!(
        e.message.starts_with(
            "unknown error_handler \"DISCARD_VALEU\" (did you mean \"DISCARD_VALUE\"?): "
        ),
        "{e}"
    );
}

/// A key that net-snmp, snmp_exporter or Zabbix names otherwise is told its name here,
/// before any other hint: `user` in a host's `snmp` table was "a key of `[daemon]` and
/// `[clickhouse]`, not of this table", which sent the reader the wrong way.
#[test]
fn a_key_other_tools_name_otherwise_is_told_its_name_here() {
    let host = |line: &str| {
        format!("[[hosts]]\nname = \"h\"\nip = \"127.0.209.1\"\n{line}\nitems = [ {{ key = \"icmpping\", interval = \"1m\" }} ]\n")
    };
    let snmp = |field: &str| {
        host(&format!(
            "snmp = {{ version = 3, {field} = \"secret-123\" }}"
        ))
    };
    for (text, path, hint) in [
        (snmp("user"), "hosts[0].snmp.user", "(the SNMPv3 `user` is `security_name` here)"),
        (snmp("username"), "hosts[0].snmp.username", "(snmp_exporter's `username` is `security_name` here)"),
        (snmp("level"), "hosts[0].snmp.level", "(the SNMPv3 `level` is `security_level` here)"),
        (snmp("password"), "hosts[0].snmp.password", "(snmp_exporter's `password` is `auth_passphrase` here)"),
        (snmp("auth_password"), "hosts[0].snmp.auth_password", "(`auth_password` is `auth_passphrase` here)"),
        (snmp("priv_password"), "hosts[0].snmp.priv_password", "(snmp_exporter's `priv_password` is `priv_passphrase` here)"),
        (snmp("snmpv3_authpassphrase"), "hosts[0].snmp.snmpv3_authpassphrase", "(Zabbix's `snmpv3_authpassphrase` is `auth_passphrase` here)"),
        (snmp("snmp_community"), "hosts[0].snmp.snmp_community", "(Zabbix's `snmp_community` is `community` here)"),
        (
            "[snmp]\nversion = \"3\"\nusername = \"u\"\n".to_string(),
            "snmp.username",
            "(snmp_exporter's `username` is `security_name` here)",
        ),
        (host("address = \"127.0.209.2\""), "hosts[0].address", "(`address` is `ip` here)"),
        // Beside `snmp`, in a host: where it goes, by its name here.
        (
            host("user = \"u\""),
            "hosts[0].user",
            "(the SNMPv3 `user` is `security_name` here, an SNMP setting: write it in `snmp = { security_name = ... }`)",
        ),
        (
            "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\nusername = \"default\"\n".to_string(),
            "clickhouse.username",
            "(`username` is `user` here)",
        ),
    ] {
        let e = one_err(&text);
        assert_eq!(e.path, path, "{e}");
        let field = path.rsplit('.').next().unwrap();
        assert!(
            e.message.starts_with(&format!("unknown field `{field}` {hint}, expected")),
            "{text}\n{e}"
        );
        assert!(!e.message.contains("secret-123"), "{e}");
    }
    // Every name a row gives is a key of some table, none of which has the row's key.
    for (other, ours, _) in OTHER_NAMES {
        let tables: Vec<&[&str]> = (key_places().into_iter())
            .map(|(_, k)| k)
            .filter(|k| k.contains(ours))
            .collect();
        assert!(!tables.is_empty(), "{other} -> {ours}: no table has {ours}");
        assert!(
            tables.iter().all(|k| !k.contains(other)),
            "{other} is a key beside {ours}"
        );
    }
}

/// A range whose cidr, size, name pattern or itemids are wrong has its items and its
/// `snmp` table checked in the same run, as a host with a wrong `ip` has: they were
/// skipped, and their mistakes met only once the first was fixed.
#[test]
fn a_range_with_a_wrong_cidr_or_name_has_its_items_and_snmp_checked_too() {
    let rest = "snmp = { version = \"3\", port = 0, auth_protocol = \"SHA3\" }\nitems = [ { key = \"icmpping\", interval = \"0s\" } ]\n";
    for (head, first) in [
        ("cidr = \"127.0.209.0/33\"", "host_ranges[0].cidr"),
        ("cidr = \"10.0.0.0/8\"", "host_ranges[0].cidr"),
        (
            "cidr = \"127.0.209.0/30\"\nname = \"cpe\"",
            "host_ranges[0].name",
        ),
        (
            "cidr = \"127.0.209.0/30\"\nname = \" {ip}\"",
            "host_ranges[0].name",
        ),
    ] {
        let e = errs(&format!("[[host_ranges]]\n{head}\n{rest}"));
        let mut paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        let mut want = vec![
            first,
            "host_ranges[0].items[0].interval",
            "host_ranges[0].snmp.auth_protocol",
            "host_ranges[0].snmp.port",
        ];
        want.sort_unstable();
        assert_eq!(paths, want, "{head}: {e:#?}");
    }
    // An itemid in a range's item: said once, the range's other items checked.
    let e = errs("[[host_ranges]]\ncidr = \"127.0.209.0/30\"\nitems = [ { key = \"icmpping\", interval = \"1m\", itemid = 7 }, { key = \"icmppingloss\", interval = \"0s\" } ]\n");
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["host_ranges[0].items", "host_ranges[0].items[1].interval"],
        "{e:#?}"
    );
}

/// An item's `type` written as Zabbix or a programmer names it (`unsigned`, `text`,
/// `string`) is told the one it is here; it was serde's "unknown variant" with the list,
/// no hint, as none of these is a typo of `uint` or `str`.
#[test]
fn a_value_type_other_tools_name_otherwise_is_told_its_name_here() {
    for (written, hint) in [
        ("unsigned", "(Zabbix's `unsigned` is `uint` here)"),
        ("TEXT", "(Zabbix's `TEXT` is `str` here)"),
        ("char", "(Zabbix's `char` is `str` here)"),
        ("string", "(`string` is `str` here)"),
        ("double", "(`double` is `float` here)"),
    ] {
        let e = bad(&format!(
            "{{ key = \"k\", oid = \"1.3.6.1\", type = \"{written}\", interval = \"1m\" }}"
        ));
        assert_eq!(e.path, "hosts[0].items[0].type", "{e}");
        assert!(
            e.message.starts_with(&format!(
                "unknown variant `{written}` {hint}, expected one of"
            )),
            "{e}"
        );
    }
}

/// A level that needs a passphrase, given all but it (or it empty, which drops an
/// inherited one): the passphrase is the field at fault, named with the level.
#[test]
fn a_level_without_its_passphrase_names_the_passphrase() {
    let usm = |auth: &str, privacy: &str| UsmSection {
        security_name: Some("u".into()),
        security_level: Some("authPriv".into()),
        auth_protocol: Some("SHA".into()),
        auth_passphrase: Some(auth.into()),
        priv_protocol: Some("AES".into()),
        priv_passphrase: Some(privacy.into()),
        context_name: None,
    };
    for (auth, privacy, field) in [
        ("", "privpass1", "auth_passphrase"),
        ("authpass1", "", "priv_passphrase"),
    ] {
        let (at, why) = usm(auth, privacy).user().unwrap_err();
        assert_eq!(at, field);
        assert_eq!(
            why,
            format!("security level authPriv needs {field} (the passphrase)")
        );
    }
    assert!(usm("authpass1", "privpass1").user().is_ok());
}

/// A directory config's problems are said at the file and line they are in, the
/// joined text's lines never shown: TOML syntax (each file read on its own first, so an
/// unclosed string cannot swallow the next file), keys before any table header in a
/// file after the first (they would join the file before's last table), a section
/// that two files give, a key's refused value, and a warning naming another file's
/// key. A folder with no `*.toml` file is refused rather than read as no hosts.
#[test]
fn a_directory_configs_problems_are_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path();
    let write = |name: &str, text: &str| std::fs::write(conf.join(name), text).unwrap();
    let shown = || match load(conf) {
        Ok(c) => c.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
        Err(e) => e.errors.iter().map(|e| e.to_string()).collect(),
    };
    assert_eq!(
        shown(),
        ["no *.toml file in this directory (a directory config is its *.toml files, read in the order of their names as one file)"]
    );
    write("a.toml", TEMPLATE);
    write("b.toml", &icmp_range("127.0.231.0/28", "b"));
    // \u{feff}: a Windows editor's byte order mark, read past.
    write(
        "c.toml",
        &format!("\u{feff}# c\n\n{}", icmp_range("127.0.231.4/30", "c")),
    );
    assert_eq!(
        shown(),
        ["c.toml, line 4: host_ranges[1].cidr: 127.0.231.4/30 is inside host_ranges[0] (127.0.231.0/28, b.toml line 2): each of its 2 addresses is polled twice, as a host of each range (one range with both ranges' templates polls them once)"]
    );
    write(
        "c.toml",
        "# c\n[[hosts]]\nname = \"h\"\nip = \"127.0.231.300\"\ntemplates = [\"icmp\"]\n",
    );
    assert_eq!(
        shown(),
        ["c.toml, line 4: hosts[0].ip: \"127.0.231.300\" is not an IP address"]
    );
    write("c.toml", "# c\n[[hosts]]\nname = \"h\n");
    assert_eq!(
        shown(),
        ["c.toml, line 3: invalid basic string, expected `\"`"]
    );
    write("c.toml", "\n# c\nname = \"h\"\n[[hosts]]\n");
    assert_eq!(
        shown(),
        ["c.toml, line 3: \"name = \\\"h\\\"\" comes before any table header: in a directory, each file but the first begins with one ([daemon], [[hosts]], ...), or its keys would be read under the last header of b.toml"]
    );
    write("c.toml", "[icmp]\npackets = 2\n");
    write("b.toml", "[icmp]\npackets = 1\n");
    assert_eq!(
        shown(),
        ["c.toml, line 1: duplicate key: a file before this one gives it too (a [table] is written in one file; [[hosts]] and the other arrays of tables may be in several)"]
    );
}
