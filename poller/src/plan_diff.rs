//! What a reload changes: the hosts and items of a new [`Plan`] against the running one,
//! for the operator's log line (`SIGHUP: configuration reloaded ... hosts_added=2 ...`).
//!
//! * Hosts are matched by name (by its stable hash, [`crate::plan::PlanHost::hash`], as
//!   the scheduler matches them). A host is *changed* when its address, its SNMP
//!   parameters or any of its items differ; *added* and *removed* hosts bring all their
//!   items with them.
//! * A host whose items are all unchanged but whose tasks are polled at another offset
//!   of their interval is *moved*: its next polls come on other slots (one interval's
//!   gap or two polls closer than an interval, once). Only ICMP tasks move so: their
//!   sweeps are regrouped when the number of sweeps an interval needs changes (hosts
//!   added or removed, `daemon.icmp_batch_hosts`) or with `daemon.icmp_phases`.
//! * Items are matched by itemid within their host. An item is changed when its key,
//!   value type, preprocessing steps, what it polls (OID, probe parameters) or its
//!   interval differ. An item that moved to another host (an explicit itemid) counts as
//!   removed from one and added to the other.
//! * Cost: one hash per item and plan, and an item-by-item comparison only for the
//!   hosts whose hashes differ: 0.15 s for a million one-item hosts unchanged,
//!   0.59 s when every item changed (`cargo bench -p poller --bench scheduler --
//!   reload/diff`), outside every lock, before the reload swaps plans. Transient
//!   memory: 50–80 bytes per host (the more the hosts were reordered) and 48 per item
//!   of the changed hosts.
//! * Fingerprints are compared, not the items: a change is missed only if two
//!   fingerprints collide (every word of the input goes through a full 64-bit mixer,
//!   so about 2^-64 per changed host). A miss would hide the change from this log
//!   line, never from the scheduler, which works on the plans themselves.

use std::hash::{Hash, Hasher};

use crate::plan::Plan;

/// How many names of each kind the summary shows.
const NAMES_SHOWN: usize = 5;

/// The hosts and items one plan adds, removes and changes against another.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PlanDiff {
    pub hosts_added: usize,
    pub hosts_removed: usize,
    pub hosts_changed: usize,
    pub items_added: usize,
    pub items_removed: usize,
    pub items_changed: usize,
    /// Hosts with the same items polled on other slots (not counted as changed).
    pub hosts_moved: usize,
    /// The first five hosts of each kind, in the order of their plan.
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub moved: Vec<String>,
}

impl PlanDiff {
    /// What `new` changes against `old`.
    pub fn between(old: &Plan, new: &Plan) -> PlanDiff {
        let (old_prints, new_prints) = (HostPrints::of(old), HostPrints::of(new));
        // Each new host's old one (`u32::MAX`: none).
        let mut old_of = vec![u32::MAX; new.hosts.len()];
        // Hosts are matched by their name's stable hash, as the scheduler matches them.
        // The hosts both plans list in the same order first (a reload usually changes
        // few), by position; the rest sorted by hash and merged.
        let same = old
            .hosts
            .iter()
            .zip(&new.hosts)
            .take_while(|(o, n)| o.hash == n.hash)
            .count();
        for (k, o) in old_of[..same].iter_mut().enumerate() {
            *o = k as u32;
        }
        let (a, b) = (by_name(old, same), by_name(new, same));
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    old_of[b[j].1 as usize] = a[i].1;
                    i += 1;
                    j += 1;
                }
            }
        }
        drop((a, b));
        let mut d = PlanDiff::default();
        let mut matched = vec![false; old.hosts.len()];
        // (old host, new host) of the changed hosts, in the new plan's order.
        let mut pairs = Vec::new();
        for (n, host) in new.hosts.iter().enumerate() {
            let now = new_prints.hosts[n];
            match old_of[n] {
                u32::MAX => {
                    d.hosts_added += 1;
                    d.items_added += now.items as usize;
                    note(&mut d.added, &host.name);
                }
                o => {
                    matched[o as usize] = true;
                    let was = old_prints.hosts[o as usize];
                    if (was.hash, was.items) != (now.hash, now.items) {
                        d.hosts_changed += 1;
                        note(&mut d.changed, &host.name);
                        pairs.push((o, n as u32));
                    } else if was.slots != now.slots {
                        d.hosts_moved += 1;
                        note(&mut d.moved, &host.name);
                    }
                }
            }
        }
        for (o, host) in old.hosts.iter().enumerate() {
            if !matched[o] {
                d.hosts_removed += 1;
                d.items_removed += old_prints.hosts[o].items as usize;
                note(&mut d.removed, &host.name);
            }
        }
        // Item by item, for the changed hosts only (what is no longer needed freed
        // first: this is the transient peak when every host changed).
        drop((matched, old_of));
        let (old_pipes, new_pipes) = (old_prints.pipelines, new_prints.pipelines);
        let mut old_slot = vec![u32::MAX; old.hosts.len()];
        let mut new_slot = vec![u32::MAX; new.hosts.len()];
        for (k, &(o, n)) in pairs.iter().enumerate() {
            old_slot[o as usize] = k as u32;
            new_slot[n as usize] = k as u32;
        }
        let was = items_of(old, &old_pipes, &old_slot);
        let is = items_of(new, &new_pipes, &new_slot);
        let (mut a, mut b) = (was.iter().peekable(), is.iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => {
                    d.items_removed += a.count();
                    break;
                }
                (None, Some(_)) => {
                    d.items_added += b.count();
                    break;
                }
                (Some(x), Some(y)) => match (x.0, x.1).cmp(&(y.0, y.1)) {
                    std::cmp::Ordering::Less => {
                        d.items_removed += 1;
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        d.items_added += 1;
                        b.next();
                    }
                    std::cmp::Ordering::Equal => {
                        d.items_changed += usize::from(x.2 != y.2);
                        a.next();
                        b.next();
                    }
                },
            }
        }
        d
    }

    /// Whether `new` changes nothing that this diff sees.
    pub fn is_empty(&self) -> bool {
        self.hosts_added + self.hosts_removed + self.hosts_changed + self.hosts_moved == 0
    }
}

impl std::fmt::Display for PlanDiff {
    /// `added: a, b; removed: c; changed: d, e and 3 more; moved: f` (the hosts), or
    /// `nothing changed`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing changed");
        }
        let mut first = true;
        for (what, n, names) in [
            ("added", self.hosts_added, &self.added),
            ("removed", self.hosts_removed, &self.removed),
            ("changed", self.hosts_changed, &self.changed),
            ("moved", self.hosts_moved, &self.moved),
        ] {
            if n == 0 {
                continue;
            }
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{what}: {}", names.join(", "))?;
            if n > names.len() {
                write!(f, " and {} more", n - names.len())?;
            }
        }
        Ok(())
    }
}

/// `(name hash, index)` of the hosts of `plan` from `from` on, sorted.
fn by_name(plan: &Plan, from: usize) -> Vec<(u64, u32)> {
    let mut v: Vec<(u64, u32)> = plan.hosts[from..]
        .iter()
        .enumerate()
        .map(|(k, h)| (h.hash, (from + k) as u32))
        .collect();
    v.sort_unstable();
    v
}

/// A fast hasher for fingerprints, a word at a time, each word through a full mixer
/// (`std`'s SipHash took ~0.5 s for the hashes of a million items). Not FxHash's
/// rotate-xor-multiply: a multiply carries a difference only upwards, so one in the top
/// bits of a word was rotated into the bottom ones, where the next word could cancel
/// it: 3,681 of 3,937 OIDs `1.3.6.1.4.1.9.9.M.C.1.1.1` shared a hash with another, and
/// an OID edit went unreported. Not for maps fed by untrusted input (no keying).
struct Quick(u64);

impl Quick {
    fn new() -> Quick {
        Quick(0x517c_c1b7_2722_0a95)
    }

    fn add(&mut self, word: u64) {
        self.0 = crate::plan::mix64(self.0 ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for Quick {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length too: "a" and "a\0" differ.
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn note(names: &mut Vec<String>, name: &str) {
    if names.len() < NAMES_SHOWN {
        names.push(name.to_owned());
    }
}

/// One host's fingerprint: its address, SNMP parameters and items, and its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostPrint {
    /// Hash of the address and SNMP parameters, plus the sum of the items' hashes
    /// (a sum: the order of tasks and items in the plan is not the config's meaning).
    hash: u64,
    items: u32,
    /// Sum of the hashes of its tasks' (engine, interval, phase): where its polls fall.
    slots: u64,
}

/// The fingerprints of one plan: per host, and the hash of each distinct pipeline.
struct HostPrints {
    hosts: Vec<HostPrint>,
    pipelines: Vec<u64>,
}

impl HostPrints {
    fn of(plan: &Plan) -> HostPrints {
        // Pipelines are few and shared: each hashed once, by what its steps are (the
        // two plans number them independently).
        let pipelines: Vec<u64> = plan
            .pipelines
            .iter()
            .map(|p| {
                let mut h = Quick::new();
                format!("{p:?}").hash(&mut h);
                h.finish()
            })
            .collect();
        let mut hosts: Vec<HostPrint> = plan
            .hosts
            .iter()
            .map(|host| {
                let mut h = Quick::new();
                (host.ip, &host.snmp).hash(&mut h);
                HostPrint {
                    hash: h.finish(),
                    items: 0,
                    slots: 0,
                }
            })
            .collect();
        for t in &plan.tasks {
            let items = plan.task_items(t);
            let sum = items.iter().fold(0u64, |sum, item| {
                sum.wrapping_add(item_hash(&pipelines, item, t.interval_ms))
            });
            let mut slot = Quick::new();
            (t.engine as u8, t.interval_ms, t.phase_ms).hash(&mut slot);
            let p = &mut hosts[t.host as usize];
            p.items += items.len() as u32;
            p.hash = p.hash.wrapping_add(sum);
            p.slots = p.slots.wrapping_add(slot.finish());
        }
        HostPrints { hosts, pipelines }
    }
}

/// `(slot, itemid, hash)` of the items of the hosts with a slot (`slot[host]` is
/// not `u32::MAX`), sorted.
fn items_of(plan: &Plan, pipelines: &[u64], slot: &[u32]) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    for t in &plan.tasks {
        let k = slot[t.host as usize];
        if k == u32::MAX {
            continue;
        }
        for item in plan.task_items(t) {
            let h = item_hash(pipelines, item, t.interval_ms);
            out.push((k, item.itemid, h));
        }
    }
    out.sort_unstable();
    out
}

fn item_hash(pipelines: &[u64], item: &crate::plan::PlanItem, interval_ms: u64) -> u64 {
    let mut h = Quick::new();
    let steps = match item.pre {
        0 => 0,
        i => pipelines[usize::from(i) - 1],
    };
    (
        item.itemid,
        &item.key,
        item.value_type,
        steps,
        &item.kind,
        interval_ms,
    )
        .hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::icmp_item as item;
    use crate::plan::{HostSpec, ItemKind, ItemSpec};
    use crate::preprocess::{Step, Steps};
    use crate::value::ValueType;
    use std::sync::Arc;

    fn host(name: &str, ip: &str, items: Vec<ItemSpec>) -> HostSpec {
        HostSpec {
            name: name.into(),
            ip: ip.parse().unwrap(),
            snmp: None,
            items,
        }
    }

    /// Hosts `a`..`e`, each with two ICMP items every 10 s.
    fn base() -> Vec<HostSpec> {
        ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let ip = format!("127.0.0.{}", i + 1);
                host(
                    h,
                    &ip,
                    vec![item(h, "icmpping", 10), item(h, "icmppingsec", 10)],
                )
            })
            .collect()
    }

    #[test]
    fn the_same_config_changes_nothing_whatever_the_order_of_hosts_and_items() {
        let old = Plan::build(base());
        let mut hosts = base();
        hosts.reverse();
        for h in &mut hosts {
            h.items.reverse();
        }
        let d = PlanDiff::between(&old, &Plan::build(hosts));
        assert_eq!(d, PlanDiff::default());
        assert!(d.is_empty());
        assert_eq!(d.to_string(), "nothing changed");
    }

    #[test]
    fn hosts_and_items_added_removed_and_changed_are_counted_and_named() {
        let old = Plan::build(base());
        let mut hosts = base();
        // a: another address (its two items unchanged); b: an item's interval and a new
        // item; c: an item removed; d: removed; f: added with three items.
        hosts[0].ip = "127.0.1.1".parse().unwrap();
        hosts[1].items[0].interval_ms = 60_000;
        hosts[1].items.push(item("b", "icmppingloss", 10));
        hosts[2].items.pop();
        hosts.remove(3);
        hosts.push(host(
            "f",
            "127.0.0.9",
            vec![
                item("f", "icmpping", 10),
                item("f", "icmppingsec", 10),
                item("f", "icmppingloss", 10),
            ],
        ));
        let d = PlanDiff::between(&old, &Plan::build(hosts));
        assert_eq!(
            d,
            PlanDiff {
                hosts_added: 1,
                hosts_removed: 1,
                hosts_changed: 3,
                items_added: 3 + 1,
                items_removed: 2 + 1,
                items_changed: 1,
                added: vec!["f".into()],
                removed: vec!["d".into()],
                changed: vec!["a".into(), "b".into(), "c".into()],
                ..PlanDiff::default()
            }
        );
        assert_eq!(d.to_string(), "added: f; removed: d; changed: a, b, c");
    }

    #[test]
    fn what_an_item_is_polled_with_is_a_change() {
        let steps = Arc::new(Steps::new(vec![Step::Multiplier(8.0)]).unwrap());
        let other = Arc::new(Steps::new(vec![Step::Multiplier(1000.0)]).unwrap());
        let with = |pre: Option<&Arc<Steps>>| {
            let mut hosts = base();
            hosts[4].items[1].pre = pre.cloned();
            Plan::build(hosts)
        };
        let plain = with(None);
        let eight = with(Some(&steps));
        // The same steps in another allocation (a reload parses them again) are no change.
        let eight_again = with(Some(&Arc::new((*steps).clone())));
        assert!(PlanDiff::between(&eight, &eight_again).is_empty());
        for (old, new) in [(&plain, &eight), (&eight, &with(Some(&other)))] {
            let d = PlanDiff::between(old, new);
            assert_eq!((d.hosts_changed, d.items_changed), (1, 1), "{d:?}");
            assert_eq!(d.changed, ["e"]);
        }
        // Its type and key.
        let mut hosts = base();
        hosts[4].items[1].value_type = ValueType::Uint;
        assert_eq!(
            PlanDiff::between(&plain, &Plan::build(hosts)).items_changed,
            1
        );
        let mut hosts = base();
        hosts[4].items[1].key = "icmppingsec[,,,,,avg]".into();
        assert_eq!(
            PlanDiff::between(&plain, &Plan::build(hosts)).items_changed,
            1
        );
    }

    /// Hosts whose items are the same but whose ICMP sweeps were regrouped (more hosts
    /// need more sweeps; `daemon.icmp_phases` changed) are moved, each one whose task
    /// has another phase, and not changed.
    #[test]
    fn hosts_polled_at_another_offset_are_moved() {
        let hosts = |n: usize| -> Vec<HostSpec> {
            (0..n)
                .map(|i| {
                    let name = format!("h{i}");
                    let ip = format!("127.0.{}.{}", i / 250, i % 250 + 1);
                    host(&name, &ip, vec![item(&name, "icmpping", 10)])
                })
                .collect()
        };
        let grouped = |n: usize| {
            let mut p = Plan::build(hosts(n));
            p.group_icmp_phases(64);
            p
        };
        // Phase of each host's task, by name.
        let phases = |p: &Plan| -> std::collections::HashMap<Arc<str>, u64> {
            p.tasks
                .iter()
                .map(|t| (p.hosts[t.host as usize].name.clone(), t.phase_ms))
                .collect()
        };
        let moved = |old: &Plan, new: &Plan| {
            let (a, b) = (phases(old), phases(new));
            a.iter()
                .filter(|(h, ph)| b.get(*h).is_some_and(|x| x != *ph))
                .count()
        };
        // 60 hosts: one sweep of 64. 200: four sweeps, so the hosts of three of them
        // move (those of the group that starts at the interval's offset stay).
        let (small, big) = (grouped(60), grouped(200));
        let d = PlanDiff::between(&small, &big);
        let expected = moved(&small, &big);
        assert!(expected > 20 && expected < 60, "{expected}");
        assert_eq!((d.hosts_added, d.hosts_changed), (140, 0));
        assert_eq!(d.hosts_moved, expected);
        assert_eq!(d.moved.len(), 5);
        assert!(d
            .to_string()
            .contains(&format!("; moved: {}", d.moved.join(", "))));
        // Spread phases (`icmp_phases = "spread"`) to grouped: the same hosts and items.
        let spread = Plan::build(hosts(200));
        let d = PlanDiff::between(&spread, &big);
        assert_eq!(d.hosts_moved, moved(&spread, &big));
        assert!(d.hosts_moved > 150, "{d:?}");
        assert_eq!(
            (
                d.hosts_added,
                d.hosts_removed,
                d.hosts_changed,
                d.items_changed
            ),
            (0, 0, 0, 0)
        );
        assert!(!d.is_empty());
        // Grouped the same way again: nothing moves.
        assert!(PlanDiff::between(&big, &grouped(200)).is_empty());
    }

    /// Families of values that differ in a few bits of adjacent bytes (OIDs, IPv6
    /// addresses, multipliers): each value hashes apart from every other. (A
    /// rotate-xor-multiply hasher gave thousands of collisions here.)
    #[test]
    fn close_values_never_share_a_fingerprint() {
        let mut seen = std::collections::HashSet::new();
        let mut fingerprint = |v: &dyn Fn(&mut Quick)| {
            let mut h = Quick::new();
            v(&mut h);
            seen.insert(h.finish())
        };
        let mut n = 0;
        for m in 1u32..128 {
            for c in 1u32..32 {
                let arcs = [1, 3, 6, 1, 4, 1, 9, 9, m, c, 1, 1, 1];
                let oid = snmp::Oid::from_arcs(&arcs).unwrap();
                assert!(fingerprint(&|h| oid.hash(h)), "{arcs:?}");
                n += 1;
            }
        }
        for g4 in 0u16..256 {
            for g5 in 0u16..256 {
                let ip: std::net::IpAddr = format!("2001:db8:0:{g4:x}:{:x}::1", g5 << 8)
                    .parse()
                    .unwrap();
                assert!(fingerprint(&|h| ip.hash(h)), "{ip}");
                n += 1;
            }
        }
        for m in 1..20_000 {
            let text = format!(
                "{:?}",
                Steps::new(vec![Step::Multiplier(m as f64)]).unwrap()
            );
            assert!(fingerprint(&|h| text.hash(h)), "{text}");
            n += 1;
        }
        assert_eq!(seen.len(), n);
    }

    /// A host's SNMP settings (community, port, ...) are the host's: it changes, its
    /// items do not.
    #[test]
    fn snmp_settings_change_the_host() {
        let with = |community: &str, port: u16| {
            let mut hosts = base();
            hosts[2].snmp = Some(Arc::new(crate::plan::SnmpParams {
                version: crate::plan::SnmpVersion::V2c,
                community: community.into(),
                usm: None,
                port,
                timeout: std::time::Duration::from_secs(2),
                retries: 1,
                max_oids_per_request: 32,
                max_inflight_per_host: 1,
            }));
            Plan::build(hosts)
        };
        let public = with("public", 161);
        assert!(PlanDiff::between(&public, &with("public", 161)).is_empty());
        for other in [
            with("private", 161),
            with("public", 1161),
            Plan::build(base()),
        ] {
            let d = PlanDiff::between(&public, &other);
            assert_eq!((d.hosts_changed, d.items_changed), (1, 0), "{d:?}");
            assert_eq!(d.changed, ["c"]);
        }
    }

    /// An OID edit that keeps the item (its itemid comes from host and key) is a change.
    #[test]
    fn an_oid_edit_is_a_change() {
        let plan = |arcs: &[u32]| {
            let mut hosts = base();
            hosts[0].items[0].kind = ItemKind::Snmp {
                oid: snmp::Oid::from_arcs(arcs).unwrap(),
            };
            Plan::build(hosts)
        };
        // BER bytes 7 and 8 differ in bits 7 and 4 (the rotate-xor-multiply hasher's
        // blind spot).
        let d = PlanDiff::between(
            &plan(&[1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 1]),
            &plan(&[1, 3, 6, 1, 2, 1, 2, 2, 154, 1]),
        );
        assert_eq!((d.hosts_changed, d.items_changed), (1, 1), "{d:?}");
    }

    /// A host as the random configs below give it: name, address, and per item (key
    /// index, interval in s, multiplier or none).
    type Spec = (u8, u8, Vec<(u8, u8, u8)>);

    const KEYS: [&str; 4] = ["icmpping", "icmppingsec", "icmppingloss", "icmpping[,4]"];

    fn plan_of(hosts: &[Spec]) -> Plan {
        Plan::build(
            hosts
                .iter()
                .map(|(name, ip, items)| {
                    let name = format!("h{name}");
                    let mut seen = std::collections::HashSet::new();
                    let items = items
                        .iter()
                        .filter(|(k, _, _)| seen.insert(*k))
                        .map(|&(k, every, mult)| ItemSpec {
                            pre: (mult > 0).then(|| {
                                Arc::new(
                                    Steps::new(vec![Step::Multiplier(f64::from(mult))]).unwrap(),
                                )
                            }),
                            ..item(&name, KEYS[usize::from(k) % KEYS.len()], u64::from(every))
                        })
                        .collect();
                    host(&name, &format!("127.0.0.{ip}"), items)
                })
                .collect(),
        )
    }

    /// The diff the slow, obvious way: every host and item compared by value.
    fn reference(old: &Plan, new: &Plan) -> (usize, usize, usize, usize, usize, usize) {
        use std::collections::BTreeMap;
        type Items = BTreeMap<u64, String>;
        let of = |p: &Plan| {
            let mut hosts: BTreeMap<String, (String, Items)> = p
                .hosts
                .iter()
                .map(|h| (h.name.to_string(), (h.ip.to_string(), Items::new())))
                .collect();
            for t in &p.tasks {
                let h = &p.hosts[t.host as usize];
                for it in p.task_items(t) {
                    let what = format!(
                        "{} {:?} {:?} {:?} {}",
                        it.key,
                        it.value_type,
                        it.kind,
                        p.steps(it),
                        t.interval_ms
                    );
                    hosts.get_mut(&*h.name).unwrap().1.insert(it.itemid, what);
                }
            }
            hosts
        };
        let (a, b) = (of(old), of(new));
        let mut r = (0, 0, 0, 0, 0, 0);
        for (name, (ip, items)) in &b {
            match a.get(name) {
                None => {
                    r.0 += 1;
                    r.3 += items.len();
                }
                Some((was_ip, was)) => {
                    if was_ip != ip || was != items {
                        r.2 += 1;
                    }
                    r.3 += items.keys().filter(|k| !was.contains_key(k)).count();
                    r.4 += was.keys().filter(|k| !items.contains_key(k)).count();
                    r.5 += items
                        .iter()
                        .filter(|(k, v)| was.get(k).is_some_and(|w| w != *v))
                        .count();
                }
            }
        }
        for (name, (_, items)) in &a {
            if !b.contains_key(name) {
                r.1 += 1;
                r.4 += items.len();
            }
        }
        r
    }

    fn specs() -> impl proptest::strategy::Strategy<Value = Vec<Spec>> {
        use proptest::prelude::*;
        let item = (
            0u8..4,
            prop_oneof![Just(10u8), Just(60)],
            prop_oneof![Just(0u8), Just(8), Just(9)],
        );
        let host = (0u8..12, 1u8..4, proptest::collection::vec(item, 0..4));
        proptest::collection::vec(host, 0..10).prop_map(|mut v| {
            // Names are unique in a config.
            let mut seen = std::collections::HashSet::new();
            v.retain(|h| seen.insert(h.0));
            v
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Any two configs: the counts are those of comparing every host and item.
        #[test]
        fn counts_agree_with_a_comparison_of_every_item(old in specs(), new in specs()) {
            let (old, new) = (plan_of(&old), plan_of(&new));
            let d = PlanDiff::between(&old, &new);
            let got = (d.hosts_added, d.hosts_removed, d.hosts_changed, d.items_added, d.items_removed, d.items_changed);
            proptest::prop_assert_eq!(got, reference(&old, &new));
        }
    }

    #[test]
    fn many_hosts_are_counted_and_the_first_few_named() {
        let many = |n: usize| {
            Plan::build(
                (0..n)
                    .map(|i| {
                        let name = format!("h{i}");
                        host(&name, "127.0.0.1", vec![item(&name, "icmpping", 10)])
                    })
                    .collect(),
            )
        };
        let d = PlanDiff::between(&many(3), &many(12));
        assert_eq!((d.hosts_added, d.items_added), (9, 9));
        assert_eq!(d.to_string(), "added: h3, h4, h5, h6, h7 and 4 more");
        let d = PlanDiff::between(&many(12), &many(3));
        assert_eq!((d.hosts_removed, d.items_removed), (9, 9));
    }
}
