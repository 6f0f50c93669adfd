//! The Plan: the configuration resolved once into flat, compact tables.
//!
//! Invariants:
//! * Items are grouped into [`Task`]s: one task is one unit of scheduling and polling
//!   for one host and engine — all ICMP items of a host with the same probe parameters
//!   and interval share one set of probes, all SNMP items of a host with the same
//!   interval share PDUs. A task's items are the contiguous range `task.items` of
//!   [`Plan::items`].
//! * Strings (host names, item keys) are `Arc<str>` shared with every value produced, so
//!   a polled value costs no string allocation; keys coming from one template item are
//!   one allocation for all hosts using the template.
//! * Nothing here is parsed again per poll.
//! * Hashes used for shards, spreading and derived itemids are FNV-1a + a fixed mixer:
//!   stable across releases, platforms and restarts (never `std`'s random hasher).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::keys::{IcmpMetric, IcmpProbe};
use crate::value::ValueType;

/// SNMP protocol version of a host: the codec's own (v3's user is in
/// [`SnmpParams::usm`]).
pub use snmp::Version as SnmpVersion;

/// SNMP parameters of one host (the `[snmp]` defaults merged with the host's `snmp = {}`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SnmpParams {
    pub version: SnmpVersion,
    /// Community string: a secret, never logged (see the redacting `Debug`).
    pub community: Arc<str>,
    /// The SNMPv3 user (keys derived once, shared by every host that uses it); `Some`
    /// exactly when `version` is v3. Its `Debug` shows no key.
    pub usm: Option<Arc<snmp::v3::UsmUser>>,
    pub port: u16,
    pub timeout: Duration,
    pub retries: u32,
    pub max_oids_per_request: usize,
    pub max_inflight_per_host: usize,
}

impl std::fmt::Debug for SnmpParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnmpParams")
            .field("version", &self.version)
            .field("community", &"<redacted>")
            .field("usm", &self.usm)
            .field("port", &self.port)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("max_oids_per_request", &self.max_oids_per_request)
            .field("max_inflight_per_host", &self.max_inflight_per_host)
            .finish()
    }
}

impl SnmpParams {
    /// The engine's job of asking the agent at `addr` for `oids` with these parameters.
    pub fn job(&self, addr: std::net::SocketAddr, oids: Vec<snmp::Oid>) -> snmp::HostJob {
        snmp::HostJob {
            addr,
            version: self.version,
            community: self.community.clone(),
            usm: self.usm.clone(),
            timeout: self.timeout,
            retries: self.retries,
            max_oids: self.max_oids_per_request,
            max_inflight: self.max_inflight_per_host,
            oids,
        }
    }
}

/// What an item asks of its engine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ItemKind {
    Icmp {
        metric: IcmpMetric,
        probe: IcmpProbe,
    },
    /// The OID, validated and BER-encoded once at load.
    Snmp { oid: snmp::Oid },
}

/// One item as the config resolved it (input to [`Plan::build`]).
#[derive(Debug, Clone)]
pub struct ItemSpec {
    pub itemid: u64,
    pub key: Arc<str>,
    pub value_type: ValueType,
    /// Polling interval in ms (the config allows 1 s to 1 day). Not a `Duration`: one
    /// `ItemSpec` per item is alive at the config load's peak, and this makes it 80
    /// bytes instead of 96 (16 MB at 1 M items).
    pub interval_ms: u32,
    pub kind: ItemKind,
    /// Preprocessing steps, shared by the items that have the same ones.
    pub pre: Option<Arc<crate::preprocess::Steps>>,
}

/// One host as the config resolved it (input to [`Plan::build`]).
#[derive(Debug, Clone)]
pub struct HostSpec {
    pub name: Arc<str>,
    pub ip: IpAddr,
    /// Present when the host has SNMP items.
    pub snmp: Option<Arc<SnmpParams>>,
    pub items: Vec<ItemSpec>,
}

/// The engine that polls a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    Icmp = 0,
    Snmp = 1,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Icmp, Engine::Snmp];
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Icmp => "icmp",
            Engine::Snmp => "snmp",
        }
    }
}

/// A polled host.
#[derive(Debug, Clone)]
pub struct PlanHost {
    pub name: Arc<str>,
    pub ip: IpAddr,
    pub snmp: Option<Arc<SnmpParams>>,
    /// Stable hash of the host name (shards, spreading).
    pub hash: u64,
}

impl PlanHost {
    /// The address its SNMP requests go to (what the SNMP engine knows the host by),
    /// when it has SNMP parameters.
    pub fn snmp_addr(&self) -> Option<SocketAddr> {
        self.snmp.as_ref().map(|p| SocketAddr::new(self.ip, p.port))
    }
}

/// A polled item.
#[derive(Debug, Clone)]
pub struct PlanItem {
    pub itemid: u64,
    pub key: Arc<str>,
    pub value_type: ValueType,
    /// Its preprocessing steps: 0 none, `i` = [`Plan::pipelines`]`[i - 1]` (see
    /// [`Plan::steps`]). An index, not a pointer: it fits beside `value_type`, and a
    /// million items are 8 MB smaller.
    pub pre: u16,
    pub kind: ItemKind,
}

/// Most distinct preprocessing pipelines a plan can index ([`PlanItem::pre`]).
pub const MAX_PIPELINES: usize = u16::MAX as usize;

/// A unit of scheduling: items of one host and engine polled together.
#[derive(Debug, Clone)]
pub struct Task {
    pub engine: Engine,
    pub host: u32,
    pub interval_ms: u64,
    /// Offset of this task's slots within its interval: slots are at
    /// `phase_ms + k * interval_ms` milliseconds of Unix time. [`Plan::build`] spreads
    /// the tasks of an interval over it by a stable hash; [`Plan::group_icmp_phases`]
    /// then gathers ICMP tasks onto the phases of their sweeps.
    pub phase_ms: u64,
    /// This task's items in [`Plan::items`].
    pub items: Range<u32>,
}

/// The whole resolved configuration. `Debug` shows its contents, not its [`Plan::id`]
/// (two plans built alike print alike).
#[derive(Default)]
pub struct Plan {
    pub hosts: Vec<PlanHost>,
    pub items: Vec<PlanItem>,
    /// As [`Plan::build`] makes them: by host (its index), then engine, then interval,
    /// which the scheduler's pass over them at a reload finds cheapest (another order
    /// costs it a sort, not a wrong result).
    pub tasks: Vec<Task>,
    /// The distinct preprocessing pipelines of the items (shared: items with the same
    /// steps have the same `Arc`).
    pub pipelines: Vec<Arc<crate::preprocess::Steps>>,
    /// Unique per built plan (see [`Plan::id`]); 0 for a default one.
    id: u64,
}

/// The next [`Plan::id`].
static NEXT_PLAN_ID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("hosts", &self.hosts)
            .field("items", &self.items)
            .field("tasks", &self.tasks)
            .field("pipelines", &self.pipelines)
            .finish()
    }
}

/// The ICMP tasks of one interval and how many phase groups (sweeps per interval, with
/// grouped phases) they form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpInterval {
    pub interval_ms: u64,
    pub tasks: u64,
    pub groups: u64,
}

/// How many phase groups `tasks` ICMP tasks of one interval form with sweeps of at most
/// `batch` hosts: one if they fit one sweep; otherwise enough that a group, whose size
/// varies with the hash (binomially, ±√size), stays within a sweep: a group that
/// overflowed would leave its last hosts to a sweep of their own or to the next group's.
fn icmp_groups(tasks: u64, batch: u64) -> u64 {
    if tasks <= batch {
        return 1;
    }
    // Three standard deviations of headroom, at most a quarter of the sweep.
    let headroom = ((3.0 * (batch as f64).sqrt()) as u64).min(batch / 4);
    tasks.div_ceil(batch - headroom)
}

/// Stable 64-bit hash (FNV-1a over the parts with a separator, then a splitmix64 finaliser
/// so that `% n` is well spread).
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h = FNV_OFFSET;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h = fnv1a(h, &[0xff]);
        }
        h = fnv1a(h, p);
    }
    mix64(h)
}

/// FNV-1a's starting state.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a: `h` (from [`FNV_OFFSET`]) with `bytes` hashed in.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64's finaliser: every input bit reaches every output bit.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Itemid for an item without an explicit one: a stable hash of (host name, key), in
/// `[2^62, 2^63)` so it never collides with the small ids Zabbix hands out and stays
/// positive for tools that read UInt64 as a signed integer.
pub fn derive_itemid(host: &str, key: &str) -> u64 {
    let h = stable_hash(&[b"itemid", host.as_bytes(), key.as_bytes()]);
    (h & 0x3fff_ffff_ffff_ffff) | 0x4000_0000_0000_0000
}

/// Scale-out: whether `host` belongs to process shard `index` of `count` (`--shard i/N`).
/// Uses its own hash seed so that it is independent of the scheduler's shard choice.
pub fn host_in_process_shard(host: &str, index: u32, count: u32) -> bool {
    count <= 1
        || stable_hash(&[b"process-shard", host.as_bytes()]) % u64::from(count) == u64::from(index)
}

impl Plan {
    /// Build the plan from resolved hosts. Hosts must already be validated (unique names
    /// and itemids); the order of `hosts` and of their items does not change the result's
    /// schedule (phases depend only on names and parameters).
    pub fn build(hosts: Vec<HostSpec>) -> Plan {
        Self::build_releasing(hosts, usize::MAX, || {})
    }

    /// [`Plan::build`] that drops the hosts it is done with as it goes and calls
    /// `release()` after every `chunk` hosts (the daemon hands freed pages back to the
    /// system there), so the resolved config and the plan are not resident together:
    /// at 1 M items each is ~100 MB.
    ///
    /// Invariant: every long-lived allocation of the plan is made before the first host
    /// is freed (names in a first pass; items reserved whole; tasks reserved for the
    /// worst case and shrunk at the end). A long-lived allocation made after would take
    /// a freed chunk of the config, scattered over its pages, and pin them all
    /// (measured: 16 MB of names kept 176 MB of freed config resident at 1 M items).
    pub fn build_releasing(hosts: Vec<HostSpec>, chunk: usize, mut release: impl FnMut()) -> Plan {
        let n_items: usize = hosts.iter().map(|h| h.items.len()).sum();
        // The pipelines (few, shared by the config) and their indices, before any host
        // is freed (see the invariant above).
        let mut pipelines: Vec<Arc<crate::preprocess::Steps>> = Vec::new();
        let mut pipeline_index: HashMap<*const crate::preprocess::Steps, u16> = HashMap::new();
        for pre in hosts
            .iter()
            .flat_map(|h| &h.items)
            .filter_map(|i| i.pre.as_ref())
        {
            pipeline_index.entry(Arc::as_ptr(pre)).or_insert_with(|| {
                pipelines.push(pre.clone());
                u16::try_from(pipelines.len()).expect("more than MAX_PIPELINES pipelines")
            });
        }
        let mut plan = Plan {
            pipelines,
            hosts: hosts
                .iter()
                .map(|host| PlanHost {
                    name: Arc::from(&*host.name),
                    ip: host.ip,
                    snmp: host.snmp.clone(),
                    hash: stable_hash(&[host.name.as_bytes()]),
                })
                .collect(),
            items: Vec::with_capacity(n_items),
            // At most one task per item.
            tasks: Vec::with_capacity(n_items),
            id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
        };
        // Item indices of the host by task (engine, interval, probe).
        let mut groups: HashMap<(Engine, u64, Option<IcmpProbe>), Vec<usize>> = HashMap::new();
        let mut keys = Vec::new();
        let mut probe_desc = String::new();
        for (hidx, host) in hosts.into_iter().enumerate() {
            if hidx > 0 && hidx % chunk == 0 {
                release();
            }
            groups.clear();
            for (i, item) in host.items.iter().enumerate() {
                let interval_ms = u64::from(item.interval_ms.max(1));
                let gk = match &item.kind {
                    ItemKind::Icmp { probe, .. } => (Engine::Icmp, interval_ms, Some(*probe)),
                    ItemKind::Snmp { .. } => (Engine::Snmp, interval_ms, None),
                };
                groups.entry(gk).or_default().push(i);
            }
            keys.clear();
            keys.extend(groups.keys().copied());
            // Every field of the group's key: one left out gives its groups the map's
            // order, another at every build.
            keys.sort_by_key(|(e, i, p)| {
                (
                    *e,
                    *i,
                    p.map(|p| {
                        let backoff = p.retry_backoff_pct;
                        (
                            p.packets,
                            p.interval_ms,
                            p.size,
                            p.timeout_ms,
                            backoff,
                            p.target,
                        )
                    }),
                )
            });
            for &gk in &keys {
                let items = groups.remove(&gk).unwrap_or_default();
                let (engine, interval_ms, probe) = gk;
                let start = plan.items.len() as u32;
                for it in items.into_iter().map(|i| &host.items[i]) {
                    plan.items.push(PlanItem {
                        itemid: it.itemid,
                        key: it.key.clone(),
                        value_type: it.value_type,
                        kind: it.kind.clone(),
                        pre: it
                            .pre
                            .as_ref()
                            .map_or(0, |p| pipeline_index[&Arc::as_ptr(p)]),
                    });
                }
                // One reused buffer: a String per task would be a garbage allocation
                // between the plan's.
                probe_desc.clear();
                if let Some(p) = probe {
                    let _ = write!(
                        probe_desc,
                        "{:?}/{}/{:?}/{}/{:?}",
                        p.target, p.packets, p.interval_ms, p.size, p.timeout_ms
                    );
                    // Appended only for retries: the other probes keep their phases.
                    if p.retry_backoff_pct > 0 {
                        let _ = write!(probe_desc, "/retry{}", p.retry_backoff_pct);
                    }
                }
                // An SNMP host's phase does not depend on the interval: its tasks of
                // intervals that divide one another then share slots, are taken
                // together and polled in one chain of requests (a device gets its
                // requests one after another, see the scheduler's `Serial`).
                let phase_ms = match engine {
                    Engine::Snmp => stable_hash(&[b"phase", host.name.as_bytes(), b"snmp"]),
                    Engine::Icmp => stable_hash(&[
                        b"phase",
                        host.name.as_bytes(),
                        engine.as_str().as_bytes(),
                        &interval_ms.to_le_bytes(),
                        probe_desc.as_bytes(),
                    ]),
                } % interval_ms;
                plan.tasks.push(Task {
                    engine,
                    host: hidx as u32,
                    interval_ms,
                    phase_ms,
                    items: start..plan.items.len() as u32,
                });
            }
        }
        // Tasks are counted only now; the plan lives for the process: no slack.
        plan.tasks.shrink_to_fit();
        plan
    }

    /// Puts the ICMP tasks of each interval on as few phases as sweeps of `batch_hosts`
    /// hosts need (`daemon.icmp_phases = "grouped"`, the default): the `n` tasks of an
    /// interval `I` form one group if `n ≤ batch_hosts`, else about `n / batch_hosts`
    /// groups with room for the hash's spread of their sizes, phases `I / groups`
    /// apart, so 4,096 hosts every 10 s are one sweep every 10 s instead of ten sweeps of
    /// ~410 (what spreading every task over its interval plus `batch_window = 1s` gives).
    /// A sweep's sends and reads run on caches gone cold since the last one, so larger
    /// sweeps cost less per probe (BENCHMARKS.md, run 17). SNMP tasks stay spread: a
    /// device answers one request at a time, and its iterations are agent-bound.
    ///
    /// Invariants: a task's group is its spread phase's position in the interval (`phase
    /// × groups / I`), so groups are even in expectation and a task only changes group
    /// when its interval's group count does; every phase stays below its interval; the
    /// groups of an interval start at an offset hashed from the interval, so daemons
    /// and intervals do not all fire at second 0 of Unix time.
    pub fn group_icmp_phases(&mut self, batch_hosts: usize) {
        // Per interval, once: its group count and its groups' offset.
        let layout: HashMap<u64, (u64, u64)> = self
            .icmp_intervals(batch_hosts)
            .into_iter()
            .map(|g| {
                let i = g.interval_ms;
                (
                    i,
                    (
                        g.groups,
                        stable_hash(&[b"icmp-group", &i.to_le_bytes()]) % i,
                    ),
                )
            })
            .collect();
        for t in self.tasks.iter_mut().filter(|t| t.engine == Engine::Icmp) {
            let (groups, offset) = layout[&t.interval_ms];
            let interval = t.interval_ms;
            // phase < interval ≤ a day and groups ≤ interval: the product fits in u64.
            let group = t.phase_ms * groups / interval;
            t.phase_ms = (group * interval / groups + offset) % interval;
        }
    }

    /// The ICMP tasks of each interval (ascending) and the phase groups they form with
    /// sweeps of `batch_hosts` ([`Plan::group_icmp_phases`]; `check-config` shows it).
    pub fn icmp_intervals(&self, batch_hosts: usize) -> Vec<IcmpInterval> {
        let batch = (batch_hosts as u64).max(1);
        let mut tasks: BTreeMap<u64, u64> = BTreeMap::new();
        for t in self.tasks.iter().filter(|t| t.engine == Engine::Icmp) {
            *tasks.entry(t.interval_ms).or_default() += 1;
        }
        tasks
            .into_iter()
            .map(|(interval_ms, tasks)| IcmpInterval {
                interval_ms,
                tasks,
                // At most one group per millisecond of the interval (≥ 1 ms, see build).
                groups: icmp_groups(tasks, batch).min(interval_ms),
            })
            .collect()
    }

    /// Values per second `engine`'s items produce: Σ over its items of 1 / interval.
    pub fn values_per_second(&self, engine: Engine) -> f64 {
        self.per_second(engine, |t| t.items.len() as f64)
    }

    /// Echo requests per second the ICMP tasks ask for: Σ packets / interval.
    pub fn icmp_probe_rate(&self) -> f64 {
        self.per_second(Engine::Icmp, |t| {
            self.task_probe(t).map_or(0.0, |p| f64::from(p.packets))
        })
    }

    /// SNMP requests per second at the least: each task's items in requests of its
    /// host's `max_oids_per_request` (more when an agent makes a host's smaller, or
    /// with retries).
    pub fn snmp_request_rate(&self) -> f64 {
        self.per_second(Engine::Snmp, |t| {
            let per = self.hosts[t.host as usize]
                .snmp
                .as_ref()
                .map_or(1, |p| p.max_oids_per_request.max(1));
            t.items.len().div_ceil(per) as f64
        })
    }

    /// Σ over `engine`'s tasks of `per_run(task)` / interval, per second.
    fn per_second(&self, engine: Engine, per_run: impl Fn(&Task) -> f64) -> f64 {
        self.tasks
            .iter()
            .filter(|t| t.engine == engine && t.interval_ms > 0)
            .map(|t| per_run(t) * 1000.0 / t.interval_ms as f64)
            // Not `sum()`: the float sum of nothing is -0.0, which prints as "-0.00".
            .fold(0.0, |a, b| a + b)
    }

    /// The probe an ICMP task sends: its items share one (that is what makes them one
    /// task), so the first item's. `None` for SNMP tasks.
    pub fn task_probe(&self, task: &Task) -> Option<IcmpProbe> {
        match self.task_items(task).first()?.kind {
            ItemKind::Icmp { probe, .. } => Some(probe),
            ItemKind::Snmp { .. } => None,
        }
    }

    /// Tells plans apart: no two built in one process have the same (an address would
    /// not do: a plan freed at a reload can leave its place to the next one). What
    /// keeps state per plan (an SNMP driver's [`snmp::HostMemory`]) notices a reload
    /// or a discovery's re-plan by it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The preprocessing steps of `item`, if it has any.
    pub fn steps(&self, item: &PlanItem) -> Option<&Arc<crate::preprocess::Steps>> {
        self.pipelines.get(usize::from(item.pre).checked_sub(1)?)
    }

    /// Items of a task.
    pub fn task_items(&self, task: &Task) -> &[PlanItem] {
        &self.items[task.items.start as usize..task.items.end as usize]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::keys::{IcmpDefaults, IcmpKey, ItemKey};

    /// An ICMP item of `host` as the config resolves it (a float, no preprocessing).
    pub(crate) fn icmp_item(host: &str, key: &str, interval_s: u64) -> ItemSpec {
        let k = IcmpKey::parse(&ItemKey::parse(key).unwrap(), &IcmpDefaults::default()).unwrap();
        ItemSpec {
            itemid: derive_itemid(host, key),
            key: key.into(),
            value_type: ValueType::Float,
            interval_ms: interval_s as u32 * 1000,
            kind: ItemKind::Icmp {
                metric: k.metric,
                probe: k.probe,
            },
            pre: None,
        }
    }

    #[test]
    fn items_index_the_shared_pipelines() {
        use crate::preprocess::{Step, Steps};
        // 72 bytes: the memory budget per item (200 B at 1M items) counts on it.
        assert_eq!(std::mem::size_of::<PlanItem>(), 72);
        let mult = Arc::new(Steps::new(vec![Step::Multiplier(1000.0)]).unwrap());
        let discard = Arc::new(Steps::new(vec![Step::DiscardUnchanged]).unwrap());
        let with = |key: &str, host: &str, pre: Option<&Arc<Steps>>| ItemSpec {
            pre: pre.cloned(),
            ..icmp_item(host, key, 10)
        };
        let plan = Plan::build(
            ["a", "b"]
                .into_iter()
                .map(|h| HostSpec {
                    name: h.into(),
                    ip: "127.0.0.1".parse().unwrap(),
                    snmp: None,
                    items: vec![
                        with("icmppingsec", h, Some(&mult)),
                        with("icmppingloss", h, (h == "b").then_some(&discard)),
                        with("icmpping", h, None),
                    ],
                })
                .collect(),
        );
        assert_eq!(plan.pipelines.len(), 2);
        for it in &plan.items {
            let want = match &*it.key {
                "icmppingsec" => Some(Arc::as_ptr(&mult)),
                "icmpping" => None,
                _ => continue,
            };
            assert_eq!(plan.steps(it).map(Arc::as_ptr), want, "{}", it.key);
        }
        let losses: Vec<_> = plan
            .items
            .iter()
            .filter(|i| &*i.key == "icmppingloss")
            .map(|i| (i.itemid, plan.steps(i).map(Arc::as_ptr)))
            .collect();
        assert_eq!(
            losses,
            [
                (derive_itemid("a", "icmppingloss"), None),
                (
                    derive_itemid("b", "icmppingloss"),
                    Some(Arc::as_ptr(&discard))
                )
            ]
        );
    }

    #[test]
    fn rates_of_an_engine_without_tasks_are_plain_zero() {
        let plan = Plan::build(vec![HostSpec {
            name: "cpe-1".into(),
            ip: "127.0.0.1".parse().unwrap(),
            snmp: None,
            items: vec![icmp_item("cpe-1", "icmpping", 10)],
        }]);
        assert_eq!(
            format!("{:.2}", plan.values_per_second(Engine::Icmp)),
            "0.10"
        );
        // check-config printed "SNMP -0.00" for a config without SNMP.
        assert_eq!(
            format!("{:.2}", plan.values_per_second(Engine::Snmp)),
            "0.00"
        );
    }

    /// `hosts` hosts named `cpe-{i}`, each with an ICMP task every `icmp_s` seconds
    /// and an SNMP task every 10 s.
    fn icmp_and_snmp_hosts(hosts: usize, icmp_s: u64) -> Plan {
        Plan::build(
            (0..hosts)
                .map(|i| {
                    let name = format!("cpe-{i}");
                    let snmp = ItemSpec {
                        itemid: derive_itemid(&name, "ifInOctets.1"),
                        key: "ifInOctets.1".into(),
                        value_type: ValueType::Uint,
                        interval_ms: 10_000,
                        kind: ItemKind::Snmp {
                            oid: snmp::Oid::from_arcs(&[1, 3, 6, 1, 2, 1, 2, 2, 1, 10, 1]).unwrap(),
                        },
                        pre: None,
                    };
                    HostSpec {
                        items: vec![icmp_item(&name, "icmpping", icmp_s), snmp],
                        name: name.into(),
                        ip: "127.0.0.1".parse().unwrap(),
                        snmp: None,
                    }
                })
                .collect(),
        )
    }

    /// Distinct phases of `engine`'s tasks, with how many tasks each.
    fn phases(plan: &Plan, engine: Engine) -> HashMap<(u64, u64), usize> {
        let mut m = HashMap::new();
        for t in plan.tasks.iter().filter(|t| t.engine == engine) {
            assert!(t.phase_ms < t.interval_ms);
            *m.entry((t.interval_ms, t.phase_ms)).or_default() += 1;
        }
        m
    }

    #[test]
    fn icmp_tasks_of_an_interval_share_as_few_phases_as_sweeps_need() {
        let spread = icmp_and_snmp_hosts(4_096, 10);
        assert!(phases(&spread, Engine::Icmp).len() > 3_000);
        let snmp_before = phases(&spread, Engine::Snmp);

        // 4,096 hosts in sweeps of 4,096: one phase, one sweep per interval.
        let mut one = icmp_and_snmp_hosts(4_096, 10);
        one.group_icmp_phases(4_096);
        assert_eq!(phases(&one, Engine::Icmp).len(), 1);
        // SNMP keeps its spread phases.
        assert_eq!(phases(&one, Engine::Snmp), snmp_before);

        // One more host: two groups, half an interval apart, of about half each.
        let mut two = icmp_and_snmp_hosts(4_097, 10);
        two.group_icmp_phases(4_096);
        let p = phases(&two, Engine::Icmp);
        let mut groups: Vec<_> = p.into_iter().collect();
        groups.sort();
        assert_eq!(groups.len(), 2, "{groups:?}");
        assert_eq!(groups[1].0 .1 - groups[0].0 .1, 5_000, "{groups:?}");
        for (_, n) in &groups {
            assert!((1_850..2_250).contains(n), "{groups:?}");
        }

        // Sweeps of 512: 10 groups of ~410 a second apart (8 would fill them to the
        // brim and some would overflow), each within its sweep.
        let mut ten = icmp_and_snmp_hosts(4_096, 10);
        ten.group_icmp_phases(512);
        let p = phases(&ten, Engine::Icmp);
        assert_eq!(p.len(), 10, "{p:?}");
        let mut at: Vec<u64> = p.keys().map(|&(_, ph)| ph).collect();
        at.sort();
        assert!(at.windows(2).all(|w| w[1] - w[0] == 1_000), "{at:?}");
        assert!(p.values().all(|&n| (300..=512).contains(&n)), "{p:?}");
    }

    #[test]
    fn icmp_groups_fit_their_sweeps_at_scale() {
        // 262,144 hosts in sweeps of 16,384: 16 groups of exactly 16,384 would overflow
        // in about half of them (±128); 17 leave room.
        assert_eq!(icmp_groups(262_144, 16_384), 17);
        assert_eq!(icmp_groups(16_384, 16_384), 1);
        assert_eq!(icmp_groups(16_385, 16_384), 2);
        assert_eq!(icmp_groups(5, 1), 5);
        let mut p = icmp_and_snmp_hosts(262_144, 8);
        p.group_icmp_phases(16_384);
        let g = phases(&p, Engine::Icmp);
        assert_eq!(g.len(), 17);
        let max = g.values().max().unwrap();
        assert!(*max <= 16_384, "largest group {max}");
    }

    #[test]
    fn icmp_groups_are_stable_while_their_count_is() {
        // Intervals keep separate groups, each at its own offset.
        let mut a = icmp_and_snmp_hosts(1_000, 10);
        a.group_icmp_phases(4_096);
        let mut b = icmp_and_snmp_hosts(1_001, 10);
        b.group_icmp_phases(4_096);
        let mut c = icmp_and_snmp_hosts(1_000, 60);
        c.group_icmp_phases(4_096);
        let phase = |p: &Plan| {
            let ph = phases(p, Engine::Icmp);
            assert_eq!(ph.len(), 1, "{ph:?}");
            *ph.keys().next().unwrap()
        };
        // A host added to a group leaves everyone's phase where it was.
        assert_eq!(phase(&a), phase(&b));
        assert_ne!(phase(&a).1 % 10_000, phase(&c).1 % 10_000);
    }

    #[test]
    fn itemids_are_stable_and_in_range() {
        let a = derive_itemid("sw-core-1", "icmpping");
        assert_eq!(a, derive_itemid("sw-core-1", "icmpping"));
        assert_ne!(a, derive_itemid("sw-core-1", "icmppingloss"));
        // (host, key) is not ambiguous across the separator.
        assert_ne!(derive_itemid("ab", "c"), derive_itemid("a", "bc"));
        assert!((1 << 62..1 << 63).contains(&a));
        // Pinned value: a change here renumbers every deployed item. Never change it.
        assert_eq!(
            derive_itemid("sw-core-1", "icmpping"),
            6_488_887_004_315_197_563
        );
    }

    #[test]
    fn items_sharing_probes_form_one_task() {
        let h = "h1";
        let plan = Plan::build(vec![HostSpec {
            name: h.into(),
            ip: "127.0.0.1".parse().unwrap(),
            snmp: None,
            items: vec![
                icmp_item(h, "icmpping", 10),
                icmp_item(h, "icmppingloss[,3]", 10),
                icmp_item(h, "icmppingsec[,3,,,,avg]", 10),
                icmp_item(h, "icmpping[,5]", 10),
                icmp_item(h, "icmppingsec", 60),
            ],
        }]);
        assert_eq!(plan.items.len(), 5);
        assert_eq!(plan.tasks.len(), 3);
        let sizes: Vec<usize> = plan.tasks.iter().map(|t| t.items.len()).collect();
        assert!(
            sizes.contains(&3) && sizes.iter().filter(|&&s| s == 1).count() == 2,
            "{sizes:?}"
        );
        for t in &plan.tasks {
            assert!(t.phase_ms < t.interval_ms);
        }
        // 3 packets / 10 s (the shared task) + 5 / 10 s + 3 / 60 s.
        let rate = plan.icmp_probe_rate();
        assert!((rate - 0.85).abs() < 1e-9, "{rate}");
        // Values: 4 items every 10 s + 1 every 60 s; no SNMP.
        let v = plan.values_per_second(Engine::Icmp);
        assert!((v - (0.4 + 1.0 / 60.0)).abs() < 1e-9, "{v}");
        assert_eq!(plan.values_per_second(Engine::Snmp), 0.0);
    }

    /// A host's tasks come in one order whatever the hash map's: probes that differ
    /// only by their target too (the sort left the target out, so their order was the
    /// map's, another at every build).
    #[test]
    fn tasks_of_probes_to_other_targets_come_in_one_order() {
        let host = |h: &str| HostSpec {
            name: h.into(),
            ip: "127.0.56.1".parse().unwrap(),
            snmp: None,
            items: (1..=8)
                .map(|i| icmp_item(h, &format!("icmpping[127.0.56.{i}]"), 10))
                .collect(),
        };
        let order = |p: &Plan| -> Vec<Option<IpAddr>> {
            p.tasks
                .iter()
                .map(|t| p.task_probe(t).unwrap().target)
                .collect()
        };
        let first = order(&Plan::build(vec![host("a")]));
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(first, sorted);
        for _ in 0..4 {
            assert_eq!(order(&Plan::build(vec![host("a")])), first);
        }
    }

    #[test]
    fn building_in_chunks_drops_hosts_as_it_goes_and_gives_the_same_plan() {
        // Shared by every host: its count tells how many HostSpecs are still alive.
        let snmp = Arc::new(SnmpParams {
            version: SnmpVersion::V2c,
            community: "public".into(),
            usm: None,
            port: 161,
            timeout: Duration::from_secs(1),
            retries: 1,
            max_oids_per_request: 32,
            max_inflight_per_host: 1,
        });
        let hosts: Vec<HostSpec> = (0..10)
            .map(|i| {
                let name = format!("cpe-{i}");
                let mut items = vec![
                    icmp_item(&name, "icmpping", 10),
                    icmp_item(&name, "icmppingloss[,3]", 10),
                ];
                if i % 2 == 0 {
                    items.push(icmp_item(&name, "icmppingsec", 60));
                }
                HostSpec {
                    name: name.into(),
                    ip: "127.0.0.1".parse().unwrap(),
                    snmp: Some(snmp.clone()),
                    items,
                }
            })
            .collect();
        let whole = Plan::build(hosts.clone());
        // 10 hosts, chunks of 3: releases after hosts 3, 6 and 9, each with ours, the two
        // plans' 10 references each, and only the hosts not taken yet.
        let mut alive_at_release = Vec::new();
        let chunked = Plan::build_releasing(hosts, 3, || {
            alive_at_release.push(Arc::strong_count(&snmp) - 1 - 20)
        });
        assert_eq!(alive_at_release, vec![7, 4, 1]);
        assert_eq!(format!("{chunked:?}"), format!("{whole:?}"));
        assert_eq!(chunked.items.len(), 25);
        assert_eq!(chunked.tasks.len(), 15);
        assert_eq!(chunked.tasks.capacity(), chunked.tasks.len());
    }

    #[test]
    fn process_shards_partition_hosts() {
        let names: Vec<String> = (0..10_000).map(|i| format!("cpe-{i}")).collect();
        for n in [1u32, 2, 3, 7] {
            let mut counts = vec![0usize; n as usize];
            for name in &names {
                let owners: Vec<u32> = (0..n)
                    .filter(|&i| host_in_process_shard(name, i, n))
                    .collect();
                assert_eq!(owners.len(), 1, "{name} owned by {owners:?} of {n}");
                counts[owners[0] as usize] += 1;
            }
            let expect = names.len() / n as usize;
            for c in counts {
                assert!(
                    c.abs_diff(expect) < expect / 10 + 50,
                    "unbalanced shard: {c} vs {expect}"
                );
            }
        }
    }
}
