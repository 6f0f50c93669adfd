#!/usr/bin/env python3
"""End-to-end benchmark of `netpoller run` into ClickHouse, with peers.

Driven by benches/e2e.sh, which owns the environment (services, release build, the
nft table that silences a quarter of the ICMP hosts, cleanup on exit). This helper:

  oids      walk the local agents once, keep OIDs that exist on every agent and whose
            values are of a stable numeric or text type, verify them with
            `netpoller poll-once`, write target/e2e/oids-{agent,sim}.txt
  run WL    one measured run of workload WL: fresh database, `netpoller run` for
            WARMUP + DURATION seconds, SIGTERM, count rows in ClickHouse, append one
            JSON line to target/e2e/results.jsonl
  peers WL  fping (one process per 16,384 hosts, and as Zabbix 6.0's pingers run it up to
            16,384 hosts), nmap on the tun rig (ICMP) / snmpget and snmpbulkget, sequential and
            parallel, prometheus-snmp-exporter (SNMP), over the same hosts and OIDs as
            workload WL, one JSON line each
  pair WL   two builds (E2E_PAIR) polling ICMP workload WL at once, each its own copy
            of the hosts, for --rounds rounds (they swap places each round): CPU per
            value of both in the same window, one JSON line each per round
  summary   medians per workload and peer: text table on stdout, results.tsv and
            summary.json in target/e2e/

Every address polled is in 127.0.0.0/8. Every process started here is stopped by pid
(and its pid is listed in target/e2e/pids so the shell trap can stop it too). Every
loop is bounded in count and time.
"""

import argparse
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "target", "e2e")
NP = os.environ.get("NETPOLLER", os.path.join(ROOT, "target", "release", "netpoller"))
CH_URL = os.environ.get("NETPOLLER_CH_URL", "http://127.0.0.1:8123")
DB = os.environ.get("E2E_DATABASE", "bench_e2e")
METRICS_ADDR = os.environ.get("E2E_METRICS", "127.0.0.1:19464")
EXPORTER_ADDR = os.environ.get("E2E_EXPORTER", "127.0.0.1:19116")
CH_PIDFILE = os.environ.get("E2E_CH_PIDFILE", os.path.join(ROOT, ".services", "clickhouse.pid"))
PIDS = os.path.join(OUT, "pids")
TICK = os.sysconf("SC_CLK_TCK")

# ICMP hosts live in a /10, by default 127.64.0.0/10 on loopback (E2E_RIG=lo); every
# address there that is 3 mod 4 is silent (25%): benches/e2e.sh drops echo requests to
# them with nft, or (E2E_RIG=tun, 100.64.0.0/10 inside the rig's namespace) tun_echo
# does not answer them.
RIG = os.environ.get("E2E_RIG", "lo")
SILENT = ipaddress.IPv4Network(os.environ.get("E2E_ICMP_NET", "127.64.0.0/10"))
ICMP_BASE = SILENT.network_address
ICMP_EXTRA_BASE = ICMP_BASE + (56 << 16)

# Agents: the four snmpd of scripts/services.sh, snmpsimd, and (for the 10x workloads)
# extra snmpd instances that benches/e2e.sh starts on 127.0.22.N.
SVC_AGENTS = [("127.0.20.1", "public"), ("127.0.20.2", "public"),
              ("127.0.20.3", "public"), ("127.0.20.4", "s3cret")]
SIM = ("127.0.21.1", "public")
EXTRA_AGENT_NET = "127.0.22."

# Workloads. icmp: hosts x 3 items (icmpping, icmppingloss, icmppingsec) every
# icmp_interval s; snmp: agents x oids_per_agent + sim_oids OIDs every 10 s.
WORKLOADS = {
    "icmp": dict(icmp_hosts=4096, icmp_interval=10),
    "snmp": dict(snmp_agents=4, oids_per_agent=1960, sim_oids=160),
    "both": dict(icmp_hosts=4096, icmp_interval=10, snmp_agents=4, oids_per_agent=1960,
                 sim_oids=160),
    "scale10": dict(icmp_hosts=40960, icmp_interval=10, snmp_agents=40, oids_per_agent=1996,
                    sim_oids=160),
    # The big target: >= 100k NVPS.
    "big": dict(icmp_hosts=262144, icmp_interval=8, snmp_agents=40, oids_per_agent=1996,
                sim_oids=160,
                daemon=dict(icmp_batch_hosts=16384, icmp_concurrent_sweeps=4,
                            channel_capacity=262144, snmp_concurrent_iterations=4),
                clickhouse=dict(batch_rows=200000, max_inflight_inserts=4),
                icmp_max_pps=400000),
}
# big's ICMP load alone: CPU per ICMP value at ~100k NVPS, without SNMP in the mix.
WORKLOADS["icmpbig"] = dict((k, v) for k, v in WORKLOADS["big"].items()
                            if k not in ("snmp_agents", "oids_per_agent", "sim_oids"))
# Memory per configured item: ~1M ICMP items polled hourly, so the figure is the plan
# and the scheduler rather than values in flight.
WORKLOADS["mem1m"] = dict(icmp_hosts=82 * 4096, icmp_interval=3600)
SNMP_INTERVAL = 10
FPING_PARALLEL = 1
# fping's CPU for one pass over 4,096 hosts is ~0.15 s and moved ±15% between runs (runs
# 11-16): each run times it this many times, a second apart, and keeps the median.
FPING_REPEAT = int(os.environ.get("FPING_REPEAT", "3"))
# Zabbix 6.0's MAX_PINGER_ITEMS (include/common.h): items one pinger takes at a time.
ZABBIX_PINGER_ITEMS = 128
ZABBIX_PINGERS = 12
ZABBIX_PEER_MAX_HOSTS = 16384
NMAP_MAX_HOSTS = 65536


def log(*a):
    print("e2e:", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ small helpers

def ch(query, timeout=60):
    req = urllib.request.Request(CH_URL + "/", data=query.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def proc_cpu_split(pid):
    """(utime, stime) of every thread of pid, in seconds (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def proc_cpu(pid):
    """utime + stime of every thread of pid, in seconds (None if gone)."""
    split = proc_cpu_split(pid)
    return None if split is None else split[0] + split[1]


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def record(res):
    """Appends one result (a JSON line) to target/e2e/results.jsonl."""
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")


def register_pid(pid):
    os.makedirs(OUT, exist_ok=True)
    with open(PIDS, "a") as f:
        f.write(f"{pid}\n")


def stop(p, sig=signal.SIGTERM, wait_s=60):
    """Stop a Popen child: sig, bounded wait, then KILL. Returns the exit code."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            log(f"pid {p.pid} ignored {sig!r} for {wait_s}s: KILL")
            p.kill()
            p.wait(timeout=30)
    return p.returncode


def scrape(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def parse_prom(text):
    """Prometheus text -> {(name, labels-string): float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            key, val = line.rsplit(" ", 1)
            v = float(val)
        except ValueError:
            continue
        if "{" in key:
            name, labels = key.split("{", 1)
            labels = "{" + labels
        else:
            name, labels = key, ""
        out[(name, labels)] = v
    return out


def msum(m, name, **want):
    """Sum of samples of `name` whose labels contain every k="v" of want."""
    tot = 0.0
    for (n, labels), v in m.items():
        if n != name:
            continue
        if all(f'{k}="{v2}"' in labels for k, v2 in want.items()):
            tot += v
    return tot


def hist_delta(a, b, name, engine=None):
    """Bucket counts (le -> count) of histogram `name` (for engine, if given), b - a."""
    out = {}
    for (n, labels), v in b.items():
        if n != name + "_bucket" or (engine and f'engine="{engine}"' not in labels):
            continue
        le = labels.split('le="')[1].split('"')[0]
        out[float(le) if le != "+Inf" else float("inf")] = v - a.get((n, labels), 0.0)
    return dict(sorted(out.items()))


def hist_quantile(buckets, q):
    """Upper bound of the bucket holding quantile q (None if empty)."""
    if not buckets:
        return None
    total = max(buckets.values())
    if total <= 0:
        return None
    for le, c in buckets.items():
        if c >= q * total:
            return le
    return float("inf")


def hist_max(buckets):
    """Upper bound of the highest non-empty bucket."""
    prev = 0.0
    top = None
    for le, c in buckets.items():
        if c > prev:
            top = le
        prev = c
    return top


# ------------------------------------------------------------------ hosts and OIDs

# Hosts of the daemons of a pair (`pair`): each its own part of the /10, slot k's ranges
# from ICMP_BASE + k * SLOT_SPAN (room for big's 262,144 hosts), its extra hosts from
# ICMP_EXTRA_BASE + k * 65,536.
SLOT_SPAN = 8 << 16


def icmp_layout(n, slot=0):
    """Cover n hosts with /20 ranges (4,094 hosts each) plus explicit extra hosts, in
    slot `slot`'s part of the /10.

    Returns (cidrs, extra_ips, all_ips)."""
    blocks, rest = divmod(n, 4096)
    cidrs, ips = [], []
    for b in range(blocks):
        net = ipaddress.IPv4Network((int(ICMP_BASE) + slot * SLOT_SPAN + b * 4096, 20))
        cidrs.append(str(net))
        ips.extend(str(h) for h in net.hosts())
    need = n - len(ips)
    extra = [str(ICMP_EXTRA_BASE + (slot << 16) + 1 + i) for i in range(need)]
    ips.extend(extra)
    assert len(ips) == n
    return cidrs, extra, ips


def is_silent(ip):
    a = ipaddress.IPv4Address(ip)
    return a in SILENT and int(a) % 4 == 3


STABLE_PREFIXES = [
    # Order = preference: interface counters first (what SNMP polling mostly is).
    ".1.3.6.1.2.1.2.", ".1.3.6.1.2.1.31.", ".1.3.6.1.2.1.4.", ".1.3.6.1.2.1.5.",
    ".1.3.6.1.2.1.6.", ".1.3.6.1.2.1.7.", ".1.3.6.1.2.1.11.", ".1.3.6.1.4.1.2021.",
    ".1.3.6.1.2.1.25.1.", ".1.3.6.1.2.1.25.2.", ".1.3.6.1.2.1.25.3.", ".1.3.6.1.2.1.1.",
    ".1.3.6.1.2.1.25.6.",
]
# Tables whose rows come and go with processes, sockets and neighbours.
VOLATILE_PREFIXES = [
    ".1.3.6.1.2.1.25.4.", ".1.3.6.1.2.1.25.5.", ".1.3.6.1.2.1.6.13.", ".1.3.6.1.2.1.6.19.",
    ".1.3.6.1.2.1.6.20.", ".1.3.6.1.2.1.7.5.", ".1.3.6.1.2.1.7.7.", ".1.3.6.1.2.1.4.22.",
    ".1.3.6.1.2.1.4.35.", ".1.3.6.1.2.1.3.", ".1.3.6.1.2.1.4.20.", ".1.3.6.1.2.1.4.34.",
    ".1.3.6.1.2.1.4.24.", ".1.3.6.1.2.1.4.21.", ".1.3.6.1.2.1.4.32.", ".1.3.6.1.2.1.4.37.",
    # nsModuleTable: snmpd 5.9 walks it but answers noSuchInstance to many of its rows
    # in a multi-varbind GET (snmpget of the same OIDs one by one works).
    ".1.3.6.1.4.1.8072.1.2.",
    # CPU statistics: a freshly started snmpd answers noSuchInstance for a minute.
    ".1.3.6.1.4.1.2021.11.", ".1.3.6.1.2.1.25.3.3.",
]
TYPE_MAP = {"Counter32": "uint", "Counter64": "uint", "Gauge32": "uint", "Timeticks": "uint",
            "INTEGER": "float", "STRING": "str"}


def walk(addr, community):
    r = subprocess.run([NP, "-q", "snmp", "walk", addr, ".1", "--json", "-c", community,
                        "-t", "2s", "-r", "2"], capture_output=True, text=True, timeout=300)
    rows = []
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if "type" in o:
            rows.append(o)
    return rows


def select(rows, n):
    ok = [o for o in rows if o["type"] in TYPE_MAP
          and not any(o["oid"].startswith(p) for p in VOLATILE_PREFIXES)]
    chosen = []
    for p in STABLE_PREFIXES:
        chosen.extend(o for o in ok if o["oid"].startswith(p))
    rest = [o for o in ok if o not in chosen]
    chosen.extend(rest)
    return [(o["oid"], TYPE_MAP[o["type"]]) for o in chosen[:n]]


def oid_key(oid):
    return "snmp.oid" + oid  # e.g. snmp.oid.1.3.6.1.2.1.2.2.1.10.1


def cmd_oids(args):
    os.makedirs(OUT, exist_ok=True)
    agent_rows = walk(*SVC_AGENTS[0])
    sim_rows = walk(*SIM)
    log(f"walked {len(agent_rows)} OIDs on {SVC_AGENTS[0][0]}, {len(sim_rows)} on {SIM[0]}")
    cand_agent = select(agent_rows, args.agent + 400)
    cand_sim = select(sim_rows, len(sim_rows))
    # Verify with netpoller itself on every service agent and the simulator: keep what
    # answers with a value everywhere, twice.
    bad = set()
    for attempt in range(2):
        cfg = os.path.join(OUT, "verify.toml")
        with open(cfg, "w") as f:
            f.write(config_text(dict(), agent_oids=[c for c in cand_agent if c[0] not in bad],
                                sim_oids=[c for c in cand_sim if c[0] not in bad],
                                agents=SVC_AGENTS, with_clickhouse=False))
        r = subprocess.run([NP, "-q", "poll-once", "-c", cfg, "--json"], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"poll-once failed: {r.stderr}")
        for line in r.stdout.splitlines():
            o = json.loads(line)
            if "error" in o:
                bad.add(o["key"][len("snmp.oid"):])
        log(f"verify pass {attempt + 1}: {len(bad)} OIDs unusable so far")
    good_agent = [c for c in cand_agent if c[0] not in bad][:args.agent]
    good_sim = [c for c in cand_sim if c[0] not in bad][:args.sim]
    if len(good_agent) < args.agent or len(good_sim) < args.sim:
        sys.exit(f"only {len(good_agent)} agent / {len(good_sim)} sim OIDs usable")
    for name, lst in (("oids-agent.txt", good_agent), ("oids-sim.txt", good_sim)):
        with open(os.path.join(OUT, name), "w") as f:
            f.writelines(f"{o} {t}\n" for o, t in lst)
    log(f"kept {len(good_agent)} agent OIDs and {len(good_sim)} simulator OIDs")


def read_oids(name, n):
    with open(os.path.join(OUT, name)) as f:
        lst = [tuple(line.split()) for line in f if line.strip()]
    if len(lst) < n:
        sys.exit(f"{name} holds {len(lst)} OIDs, workload needs {n}: rerun `oids`")
    return lst[:n]


def agents_of(wl):
    n = wl.get("snmp_agents", 0)
    agents = list(SVC_AGENTS[:min(n, 4)])
    agents += [(f"{EXTRA_AGENT_NET}{i}", "public") for i in range(1, max(0, n - 4) + 1)]
    return agents


# ------------------------------------------------------------------ config

def toml_str(s):
    return json.dumps(s)


def config_text(wl, agent_oids=(), sim_oids=(), agents=(), with_clickhouse=True,
                spool_dir=None, slot=0, metrics=METRICS_ADDR, db=DB):
    d = dict(shards=4, metrics_listen=metrics,
             spool_dir=spool_dir or os.path.join(OUT, "spool"),
             batch_window="1s")
    d.update(wl.get("daemon", {}))
    where = ("every address is in 127.0.0.0/8" if RIG == "lo" else
             f"runs in the {RIG} rig's own network namespace")
    out = [f"# Generated by benches/e2e/e2e.py: {where}.", "[daemon]"]
    for k, v in d.items():
        out.append(f"{k} = {toml_str(v)}")
    if with_clickhouse:
        c = dict(url=CH_URL, database=db, batch_rows=50000,
                 compression="none")
        c.update(wl.get("clickhouse", {}))
        out.append("[clickhouse]")
        for k, v in c.items():
            out.append(f"{k} = {toml_str(v)}")
    out += ["[icmp]", 'timeout = "1s"', "packets = 3", 'interval = "20ms"', "size = 68",
            f"max_pps = {wl.get('icmp_max_pps', 100000)}",
            "[snmp]", 'version = "2c"', 'community = "public"', "port = 161",
            'timeout = "2s"', "retries = 1", "max_oids_per_request = 32",
            "max_inflight_per_host = 1"]
    iv = wl.get("icmp_interval", 10)
    out += ["[[templates]]", 'name = "icmp"', "items = [",
            f'  {{ key = "icmpping", interval = "{iv}s" }},',
            f'  {{ key = "icmppingloss[,3]", interval = "{iv}s" }},',
            f'  {{ key = "icmppingsec[,3,,,,avg]", interval = "{iv}s" }},', "]"]
    for tname, oids in (("snmp-agent", agent_oids), ("snmp-sim", sim_oids)):
        if not oids:
            continue
        out += ["[[templates]]", f'name = "{tname}"', "items = ["]
        out += [f'  {{ key = "{oid_key(o)}", oid = "{o}", type = "{t}", '
                f'interval = "{SNMP_INTERVAL}s" }},' for o, t in oids]
        out.append("]")
    nh = wl.get("icmp_hosts", 0)
    if nh:
        cidrs, extra, _ = icmp_layout(nh, slot)
        for c in cidrs:
            out += ["[[host_ranges]]", f'cidr = "{c}"', 'name = "{ip}"', 'templates = ["icmp"]']
        for ip in extra:
            out += ["[[hosts]]", f'name = "{ip}"', f'ip = "{ip}"', 'templates = ["icmp"]']
    if agent_oids:
        # E2E_OVERRIDE='{"snmp_agent": {"version": "3", "security_name": ...}}' polls the
        # snmpd agents (not snmpsimd) with other settings, e.g. as an SNMPv3 user of
        # examples/snmpd/agent.conf.in.
        for ip, comm in agents:
            fields = {"community": comm, **wl.get("snmp_agent", {})}
            table = ", ".join(f"{k} = {toml_str(v)}" for k, v in fields.items())
            out += ["[[hosts]]", f'name = "snmp-{ip}"', f'ip = "{ip}"',
                    'templates = ["snmp-agent"]', f"snmp = {{ {table} }}"]
    if sim_oids:
        out += ["[[hosts]]", f'name = "snmpsim-{SIM[0]}"', f'ip = "{SIM[0]}"',
                'templates = ["snmp-sim"]', f"snmp = {{ community = {toml_str(SIM[1])} }}"]
    return "\n".join(out) + "\n"


def workload_files(name):
    wl = json.loads(json.dumps(WORKLOADS[name]))
    # E2E_OVERRIDE='{"daemon": {"icmp_concurrent_sweeps": 2}}' explores settings.
    for k, v in json.loads(os.environ.get("E2E_OVERRIDE") or "{}").items():
        if isinstance(v, dict):
            wl.setdefault(k, {}).update(v)
        else:
            wl[k] = v
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    agent_oids = read_oids("oids-agent.txt", wl["oids_per_agent"]) if wl.get("snmp_agents") else []
    sim_oids = read_oids("oids-sim.txt", wl["sim_oids"]) if wl.get("sim_oids") else []
    agents = agents_of(wl)
    cfg = os.path.join(d, "netpoller.toml")
    with open(cfg, "w") as f:
        f.write(config_text(wl, agent_oids, sim_oids, agents,
                            spool_dir=os.path.join(d, "spool")))
    icmp_ips = icmp_layout(wl["icmp_hosts"])[2] if wl.get("icmp_hosts") else []
    return wl, cfg, agent_oids, sim_oids, agents, icmp_ips


def expected(wl, agent_oids, sim_oids, agents, icmp_ips):
    icmp_items = 3 * len(icmp_ips)
    snmp_items = len(agent_oids) * len(agents) + len(sim_oids)
    nvps = icmp_items / wl.get("icmp_interval", 10) + snmp_items / SNMP_INTERVAL
    alive = sum(1 for ip in icmp_ips if not is_silent(ip))
    return dict(icmp_hosts=len(icmp_ips), icmp_items=icmp_items, snmp_items=snmp_items,
                items=icmp_items + snmp_items, expected_nvps=nvps, expected_alive=alive)


# ------------------------------------------------------------------ one run

def machine_busy():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def per_thread(pid, name, read):
    """{thread name/tid: read(text of /proc/pid/task/tid/name)} for every thread."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                text = f.read()
        except OSError:
            continue
        out.update(read(tid, text))
    return out


def thread_cpu(pid):
    """{thread name/tid: seconds on a CPU}, from schedstat (ns): /proc's utime + stime
    come in clock ticks (10 ms), 5% of the ICMP thread's 0.4 s in a 45 s window at
    4,096 hosts."""
    def read(tid, text):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            return {}
        return {f"{name}/{tid}": int(text.split()[0]) / 1e9}
    return per_thread(pid, "schedstat", read)


def ctxt_switches(pid):
    """{thread name/tid: context switches (voluntary + involuntary)}: how often each
    thread sleeps and wakes, a cost in itself on a VM."""
    def read(tid, text):
        st = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {f"{st['Name'].strip()}/{tid}": int(st["voluntary_ctxt_switches"])
                + int(st["nonvoluntary_ctxt_switches"])}
    return per_thread(pid, "status", read)


def ksoftirqd_cpu():
    """CPU seconds of the kernel's ksoftirqd threads: network work deferred from the
    sender's context lands there (and not on netpoller) when softirq load is high."""
    tot = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("ksoftirqd"):
                    continue
        except OSError:
            continue
        tot += proc_cpu(pid) or 0.0
    return tot


def snapshot(pid, ch_pid, metrics=METRICS_ADDR):
    return dict(t=time.time(), np_cpu=proc_cpu(pid), np_split=proc_cpu_split(pid), ch_cpu=proc_cpu(ch_pid) if ch_pid else None,
                softirqd=ksoftirqd_cpu(), ctxt=ctxt_switches(pid),
                machine=machine_busy(), threads=thread_cpu(pid),
                metrics=parse_prom(scrape(f"http://{metrics}/metrics")))


def daemon_cpu(a, b):
    """The daemon's CPU seconds between snapshots a and b, and where they come from.

    From the threads' schedstat (ns) when every thread of the first snapshot is still
    there at the second: /proc/PID/stat counts in clock ticks (10 ms), ±10 ms in a
    difference of two readings, 5% of 0.2 s (4,096 hosts, 40 s window), the distance
    between 0.50 and 0.53 of fping. Ticks otherwise (a thread that exited took its time
    with it). A thread that came and went inside the window (a blocking-pool thread)
    took its time with it too: then the process's ticks, which count every thread that
    ever ran, exceed the threads' sum by more than their rounding (a tick per reading)."""
    exact = sum(b["threads"].values()) - sum(a["threads"].values())
    rounding = 3 / TICK
    if (a["threads"] and set(a["threads"]) <= set(b["threads"])
            and b["np_cpu"] - a["np_cpu"] <= exact + rounding):
        return exact, "schedstat"
    return b["np_cpu"] - a["np_cpu"], "ticks"


def thread_seconds(a, b):
    """{thread name/tid: CPU seconds} between snapshots a and b."""
    return {k: v - a["threads"].get(k, 0.0) for k, v in b["threads"].items()}


def thread_groups(tsec):
    """Threads' CPU seconds (`thread_seconds`) by group: the ICMP engine's threads
    (sending, receiving and the ping statistics: what fping does), the SNMP engine's
    thread, and the rest (scheduler, sink, ClickHouse client, HTTP)."""
    groups = {"icmp": 0.0, "snmp": 0.0, "rest": 0.0}
    for k, v in tsec.items():
        groups[next((g for g in ("icmp", "snmp") if k.startswith(f"netpoller-{g}")), "rest")] += v
    return groups


def wait_up(p, metrics, deadline, logs):
    """Waits until netpoller `p` is up: its metrics endpoint at `metrics` answers (config
    loaded, sockets open, schema checked). Exits saying where its `logs` are if it exits
    first or is not up by `deadline` (time.time())."""
    while True:
        if p.poll() is not None:
            sys.exit(f"netpoller run exited with {p.returncode}; see {logs}")
        try:
            scrape(f"http://{metrics}/metrics", timeout=2)
            return
        except OSError:
            if time.time() > deadline:
                sys.exit(f"netpoller metrics endpoint {metrics} not up in time; see {logs}")
            time.sleep(0.2)


def cmd_run(args):
    name = args.workload
    wl, cfg, agent_oids, sim_oids, agents, icmp_ips = workload_files(name)
    exp = expected(wl, agent_oids, sim_oids, agents, icmp_ips)
    ch_pid = None
    if os.path.exists(CH_PIDFILE):
        ch_pid = int(open(CH_PIDFILE).read().strip() or 0) or None
    ch(f"DROP DATABASE IF EXISTS {DB}")
    r = subprocess.run([NP, "-q", "schema", "-c", cfg, "--apply"], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"schema --apply failed: {r.stdout}{r.stderr}")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    logf = os.path.join(OUT, name, f"run{args.index}-{stamp}.log")
    spool = os.path.join(OUT, name, "spool")
    subprocess.run(["rm", "-rf", spool], check=True)
    log(f"{name} run {args.index}: {exp['items']} items, expect {exp['expected_nvps']:.0f} NVPS;"
        f" warm-up {args.warmup}s, window {args.duration}s")
    t_start = time.time()
    with open(logf, "w") as lf:
        nice = int(os.environ.get("E2E_NICE") or 0)
        # E2E_NICE=-10 emulates a dedicated machine on a shared one (builds of others).
        p = subprocess.Popen(["nice", "-n", str(nice), NP, "--log-format", "json", "run", "-c",
                              cfg], stdout=lf,
                             stderr=subprocess.STDOUT, cwd=os.path.join(OUT, name))
    register_pid(p.pid)
    try:
        wait_up(p, METRICS_ADDR, time.time() + 180, logf)
        startup_s = time.time() - t_start
        start_cpu = proc_cpu(p.pid)
        time.sleep(args.warmup)
        a = snapshot(p.pid, ch_pid)
        perf = None
        if os.environ.get("E2E_PERF") == "1":
            # Profile part of the window (call graphs), for BENCHMARKS.md's hot spots.
            perf = subprocess.Popen(["perf", "record", "-F",
                                     os.environ.get("E2E_PERF_FREQ", "499"),
                                     "--call-graph", os.environ.get("E2E_PERF_CALLGRAPH", "fp"),
                                     "-p", str(p.pid),
                                     "-o", os.path.join(OUT, name, f"perf{args.index}-{stamp}.data"),
                                     "--", "sleep", str(min(args.duration, 20))],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            register_pid(perf.pid)
        if os.environ.get("E2E_WCHAN") == "1":
            # Off-CPU view: where netpoller's threads wait, sampled every 50 ms for
            # 20 s (state and kernel wait channel per thread).
            counts = {}
            t_end = time.time() + min(args.duration, 20)
            while time.time() < t_end:
                for tid in os.listdir(f"/proc/{p.pid}/task"):
                    try:
                        with open(f"/proc/{p.pid}/task/{tid}/stat") as f:
                            st = f.read()
                        with open(f"/proc/{p.pid}/task/{tid}/wchan") as f:
                            wc = f.read().strip() or "-"
                    except OSError:
                        continue
                    tname = st[st.index("(") + 1:st.rindex(")")]
                    state = st[st.rindex(")") + 2]
                    k = f"{tname} {state} {wc if state != 'R' else 'running'}"
                    counts[k] = counts.get(k, 0) + 1
                time.sleep(0.05)
            with open(os.path.join(OUT, name, f"wchan{args.index}-{stamp}.txt"), "w") as f:
                for k, v in sorted(counts.items(), key=lambda kv: -kv[1]):
                    f.write(f"{v:6d} {k}\n")
            time.sleep(max(0.0, args.duration - min(args.duration, 20)))
        else:
            time.sleep(args.duration)
        b = snapshot(p.pid, ch_pid)
        if perf is not None:
            stop(perf, signal.SIGINT, wait_s=60)
        hwm = proc_status(p.pid, "VmHWM")
        rss = proc_status(p.pid, "VmRSS")
        threads = len(os.listdir(f"/proc/{p.pid}/task"))
    finally:
        t_term = time.time()
        rc = stop(p, signal.SIGTERM, wait_s=90)
    stop_s = time.time() - t_term
    # Window in whole seconds of `clock`: [lo, hi).
    lo, hi = int(a["t"]) + 1, int(b["t"])
    win = hi - lo
    tables = ["history_dbl", "history_uint", "history_str"]
    icmp_like = "itemname LIKE 'icmpping%'"
    q = " UNION ALL ".join(
        f"SELECT countIf({icmp_like}) AS i, countIf(NOT {icmp_like}) AS s FROM {DB}.{t} "
        f"WHERE clock >= {lo} AND clock < {hi}" for t in tables)
    rows_icmp = rows_snmp = 0
    for line in ch(f"SELECT sum(i), sum(s) FROM ({q}) FORMAT TSV").split("\n"):
        if line.strip():
            rows_icmp, rows_snmp = (int(x) for x in line.split("\t"))
    total_rows = sum(int(ch(f"SELECT count() FROM {DB}.{t} FORMAT TSV")) for t in tables)
    acc = {}
    if icmp_ips:
        # icmpping rows in the window: how many said up / down, and whether an address
        # answered that the nft rule silences or was down although it answers.
        silent = ("(bitAnd(IPv4StringToNum(hostname), 3) = 3 AND "
                  f"IPv4StringToNum(hostname) >= {int(SILENT.network_address)} AND "
                  f"IPv4StringToNum(hostname) <= {int(SILENT.broadcast_address)})")
        r = ch(f"SELECT count(), sum(value), countIf(value = 0 AND NOT {silent}), "
               f"countIf(value = 1 AND {silent}) FROM {DB}.history_uint "
               f"WHERE itemname = 'icmpping' AND clock >= {lo} AND clock < {hi} FORMAT TSV")
        n, up, false_down, false_up = (int(float(x)) for x in r.split())
        acc = dict(icmpping_rows=n, alive_fraction=up / n if n else None,
                   expected_alive_fraction=exp["expected_alive"] / exp["icmp_hosts"],
                   false_down=false_down, false_up=false_up)
    ma, mb = a["metrics"], b["metrics"]

    def d(name, **kw):
        return msum(mb, name, **kw) - msum(ma, name, **kw)

    values = d("netpoller_values_total")
    np_cpu, np_cpu_source = daemon_cpu(a, b)
    split = (None if not (a["np_split"] and b["np_split"]) else
             (b["np_split"][0] - a["np_split"][0], b["np_split"][1] - a["np_split"][1]))
    user_share = split[0] / (split[0] + split[1]) if split and split[0] + split[1] > 0 else None
    ch_cpu = (b["ch_cpu"] - a["ch_cpu"]) if ch_pid and b["ch_cpu"] is not None else None
    rows = rows_icmp + rows_snmp
    span = b["t"] - a["t"]
    busy = (b["machine"][0] - a["machine"][0]) / max(1, b["machine"][1] - a["machine"][1])
    tsec = thread_seconds(a, b)
    tcpu = {k: round(v / span, 3) for k, v in tsec.items()}
    # CPU per value by thread group: the ICMP engine's per ICMP row, the SNMP engine's
    # per SNMP row, the rest per row.
    groups = thread_groups(tsec)
    # CPU per value divides by the values obtained in the CPU's own span (the daemon's
    # counter, sampled with the CPU), not by the rows in the whole-second `clock` window:
    # that window is ~1 s shorter, and ICMP sweeps that come in bursts every few seconds
    # (icmp_phases = "grouped") fall in or out of it whole (±1 burst of 8: ±12%).
    # Rows in ClickHouse still give NVPS and the results' checks.
    per = {"icmp": d("netpoller_values_total", engine="icmp"),
           "snmp": d("netpoller_values_total", engine="snmp"), "rest": values}
    group_us = {g: round(v / per[g] * 1e6, 3) for g, v in groups.items() if per[g]}
    tcpu = dict(sorted(((k, v) for k, v in tcpu.items() if v >= 0.01), key=lambda kv: -kv[1]))
    res = dict(kind="netpoller", workload=name, rig=RIG, run=args.index, log=logf, **exp,
               override=os.environ.get("E2E_OVERRIDE") or None,
               build=os.environ.get("E2E_BUILD") or None,
               startup_s=round(startup_s, 2), startup_cpu_s=start_cpu,
               window_s=win, rows_in_window=rows, rows_icmp=rows_icmp, rows_snmp=rows_snmp,
               nvps=rows / win, values_metric=values, total_rows=total_rows,
               np_cpu_s=np_cpu, np_cpu_source=np_cpu_source, np_cpu_per_1k=np_cpu / (values / 1000) if values else None,
               np_us_per_value=np_cpu / values * 1e6 if values else None,
               # User space vs kernel: on loopback the kernel part includes answering
               # our own pings (the target's work on a real network).
               # The split comes in ticks only: it divides the total in their proportion.
               np_user_us_per_value=user_share * np_cpu / values * 1e6
               if values and user_share is not None else None,
               np_sys_us_per_value=(1 - user_share) * np_cpu / values * 1e6
               if values and user_share is not None else None,
               np_cpu_util=np_cpu / (b["t"] - a["t"]),
               ch_cpu_s=ch_cpu,
               ch_cpu_per_1k=ch_cpu / (values / 1000) if values and ch_cpu is not None else None,
               ch_cpu_util=ch_cpu / (b["t"] - a["t"]) if ch_cpu is not None else None,
               vm_hwm=hwm, vm_rss=rss, hwm_bytes_per_item=hwm / exp["items"] if hwm else None,
               threads=threads, thread_cores=tcpu, thread_group_us_per_value=group_us,
               machine_busy=busy,
               others_cores=busy * os.cpu_count() - np_cpu / span - ((ch_cpu or 0) / span),
               nice=int(os.environ.get("E2E_NICE") or 0), exit_code=rc, stop_s=round(stop_s, 2), **acc)
    for eng in ("icmp", "snmp"):
        lat = hist_delta(ma, mb, "netpoller_lateness_seconds", eng)
        dur = hist_delta(ma, mb, "netpoller_iteration_duration_seconds", eng)
        res[f"{eng}_iterations"] = d("netpoller_iterations_total", engine=eng)
        res[f"{eng}_values"] = d("netpoller_values_total", engine=eng)
        res[f"{eng}_lateness_p50_le"] = hist_quantile(lat, 0.5)
        res[f"{eng}_lateness_p99_le"] = hist_quantile(lat, 0.99)
        res[f"{eng}_lateness_max_le"] = hist_max(lat)
        res[f"{eng}_iteration_p50_le"] = hist_quantile(dur, 0.5)
        res[f"{eng}_iteration_max_le"] = hist_max(dur)
        res[f"{eng}_late_iterations"] = d("netpoller_late_iterations_total", engine=eng)
        res[f"{eng}_skipped_slots"] = d("netpoller_skipped_slots_total", engine=eng)
        res[f"{eng}_late_iterations_total"] = msum(mb, "netpoller_late_iterations_total",
                                                   engine=eng)
        res[f"{eng}_skipped_slots_total"] = msum(mb, "netpoller_skipped_slots_total", engine=eng)
        for reason in ("timeout", "unsupported", "decode", "send"):
            res[f"{eng}_errors_{reason}"] = d("netpoller_item_errors_total", engine=eng,
                                              reason=reason)
        res[f"{eng}_unmatched"] = d("netpoller_unmatched_replies_total", engine=eng)
    # Losses are cumulative since start (a drop during warm-up counts too).
    ins = hist_delta(ma, mb, "netpoller_sink_insert_seconds")
    res["sink_insert_p50_le"] = hist_quantile(ins, 0.5)
    res["sink_insert_max_le"] = hist_max(ins)
    res["ksoftirqd_cores"] = (b["softirqd"] - a["softirqd"]) / span
    ctxt = {k: round((v - a["ctxt"].get(k, 0)) / span) for k, v in b["ctxt"].items()}
    res["np_ctxt_switches_per_s"] = sum(ctxt.values())
    res["thread_ctxt_switches_per_s"] = dict(sorted(((k, v) for k, v in ctxt.items() if v >= 1),
                                                    key=lambda kv: -kv[1]))
    res["sink_dropped_rows"] = msum(mb, "netpoller_sink_dropped_rows_total")
    res["sink_spooled_rows"] = msum(mb, "netpoller_sink_spooled_rows_total")
    res["sink_rejected_rows"] = msum(mb, "netpoller_sink_rejected_rows_total")
    res["sink_insert_errors"] = msum(mb, "netpoller_sink_insert_errors_total")
    res["sink_inserts"] = d("netpoller_sink_inserts_total")
    res["backpressure_waits"] = msum(mb, "netpoller_backpressure_waits_total")
    res["drops"] = res["sink_dropped_rows"] + res["sink_rejected_rows"]
    record(res)
    log(f"{name} run {args.index}: {res['nvps']:.0f} NVPS in ClickHouse "
        f"(expected {exp['expected_nvps']:.0f}), netpoller {res['np_us_per_value'] or 0:.2f} us/value "
        f"(user {res['np_user_us_per_value'] or 0:.2f} + sys {res['np_sys_us_per_value'] or 0:.2f}; "
        f"{res['np_cpu_util'] * 100:.0f}% of a core), ClickHouse "
        f"{(res['ch_cpu_per_1k'] or 0) * 1000:.2f} ms/1k values, VmHWM {(hwm or 0) >> 20} MiB, "
        f"late iterations {res['icmp_late_iterations'] + res['snmp_late_iterations']:.0f}, "
        f"drops {res['drops']:.0f}, spooled {res['sink_spooled_rows']:.0f}, "
        f"backpressure waits {res['backpressure_waits']:.0f}, machine busy {busy * 100:.0f}%, "
        f"context switches {res['np_ctxt_switches_per_s']:.0f}/s "
        f"{res['thread_ctxt_switches_per_s']}, "
        f"threads (cores) {tcpu}, us/value by thread group {group_us}, exit {rc}")


# ------------------------------------------------------------------ two builds at once

def pair_builds():
    """E2E_PAIR="LABEL=BINARY LABEL=BINARY": the two builds `pair` runs."""
    builds = [b.split("=", 1) for b in (os.environ.get("E2E_PAIR") or "").split()]
    if len(builds) != 2 or any(len(b) != 2 or not os.access(b[1], os.X_OK) for b in builds):
        sys.exit('pair: E2E_PAIR must name two builds, "LABEL=BINARY LABEL=BINARY", '
                 "each an executable")
    return builds


def cmd_pair(args):
    """Two builds poll workload WL side by side, each its own copy of its hosts (in its
    slot of the /10), database, spool and metrics port, measured over the same window:
    CPU per value drifts by 10-20% between runs minutes apart on a shared VM, by as
    much as a change is worth, while two daemons running at once see the same machine.
    The builds swap slots each round. ICMP workloads only (SNMP agents would be polled
    twice and answer each daemon more slowly)."""
    name = args.workload
    builds = pair_builds()
    wl = json.loads(json.dumps(WORKLOADS[name]))
    if wl.get("snmp_agents"):
        sys.exit(f"pair: {name} polls SNMP agents; pair runs ICMP workloads only")
    slots = []
    for k in range(2):
        d = os.path.join(OUT, name, f"pair{k}")
        os.makedirs(d, exist_ok=True)
        slot = dict(dir=d, cfg=os.path.join(d, "netpoller.toml"), db=f"{DB}_pair{k}",
                    metrics=f"127.0.0.1:{19470 + k}", spool=os.path.join(d, "spool"))
        with open(slot["cfg"], "w") as f:
            f.write(config_text(wl, slot=k, metrics=slot["metrics"], db=slot["db"],
                                spool_dir=slot["spool"]))
        slots.append(slot)
    items = 3 * wl["icmp_hosts"]
    log(f"{name} pair: {' and '.join(b[0] for b in builds)}, {args.rounds} rounds, "
        f"{items} items each; warm-up {args.warmup}s, window {args.duration}s")
    for rnd in range(1, args.rounds + 1):
        # Round 1: the first build in slot 0; then they swap.
        run = [(slots[k], builds[(k + rnd - 1) % 2]) for k in range(2)]
        procs = []
        try:
            for slot, (label, binary) in run:
                ch(f"DROP DATABASE IF EXISTS {slot['db']}")
                r = subprocess.run([binary, "-q", "schema", "-c", slot["cfg"], "--apply"],
                                   capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    sys.exit(f"schema --apply failed: {r.stdout}{r.stderr}")
                subprocess.run(["rm", "-rf", slot["spool"]], check=True)
                logf = open(os.path.join(slot["dir"], f"round{rnd}-{label}.log"), "w")
                p = subprocess.Popen([binary, "--log-format", "json", "run", "-c", slot["cfg"]],
                                     stdout=logf, stderr=subprocess.STDOUT, cwd=slot["dir"])
                register_pid(p.pid)
                procs.append(p)
            deadline = time.time() + 180
            for (slot, _), p in zip(run, procs):
                wait_up(p, slot["metrics"], deadline, slot["dir"])
            time.sleep(args.warmup)
            a = [snapshot(p.pid, None, slot["metrics"]) for (slot, _), p in zip(run, procs)]
            time.sleep(args.duration)
            b = [snapshot(p.pid, None, slot["metrics"]) for (slot, _), p in zip(run, procs)]
            hwm = [proc_status(p.pid, "VmHWM") for p in procs]
        finally:
            rcs = [stop(p, signal.SIGTERM, wait_s=90) for p in procs]
        busy = (b[0]["machine"][0] - a[0]["machine"][0]) / max(1, b[0]["machine"][1] - a[0]["machine"][1])
        for k, ((slot, (label, _)), sa, sb) in enumerate(zip(run, a, b)):
            def d(metric, **kw):
                return msum(sb["metrics"], metric, **kw) - msum(sa["metrics"], metric, **kw)
            values = d("netpoller_values_total", engine="icmp")
            cpu, source = daemon_cpu(sa, sb)
            groups = thread_groups(thread_seconds(sa, sb))
            res = dict(kind="pair", workload=name, rig=RIG, round=rnd, slot=k, build=label,
                       window_s=round(sb["t"] - sa["t"], 2), values=values, np_cpu_s=cpu,
                       np_cpu_source=source,
                       np_us_per_value=cpu / values * 1e6 if values else None,
                       icmp_us_per_value=groups["icmp"] / values * 1e6 if values else None,
                       rest_us_per_value=groups["rest"] / values * 1e6 if values else None,
                       late_iterations=d("netpoller_late_iterations_total", engine="icmp"),
                       drops=msum(sb["metrics"], "netpoller_sink_dropped_rows_total")
                       + msum(sb["metrics"], "netpoller_sink_rejected_rows_total"),
                       vm_hwm=hwm[k], machine_busy=busy, exit_code=rcs[k])
            record(res)
            log(f"{name} pair round {rnd} slot {k}: {label} {fmt(res['np_us_per_value'])} us/value "
                f"(ICMP threads {fmt(res['icmp_us_per_value'])}, rest "
                f"{fmt(res['rest_us_per_value'])}), {values:.0f} values, late iterations "
                f"{res['late_iterations']:.0f}, drops {res['drops']:.0f}, VmHWM "
                f"{(hwm[k] or 0) >> 20} MiB, machine busy {busy * 100:.0f}%, exit {rcs[k]}")
    pair_summary(os.path.join(OUT, "results.jsonl"), name)


def pair_summary(path, name):
    """Each build's median over the rounds, and the second build's CPU per value as a
    ratio of the first's in each round (the pair's own comparison) and their median."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if r["kind"] == "pair" and r["workload"] == name]
    labels = list(dict.fromkeys(r["build"] for r in rows))
    for label in labels:
        rs = [r for r in rows if r["build"] == label]
        print(f"{name} pair: {label}: {fmt(med([r['np_us_per_value'] for r in rs]))} us/value "
              f"(ICMP threads {fmt(med([r['icmp_us_per_value'] for r in rs]))}, rest "
              f"{fmt(med([r['rest_us_per_value'] for r in rs]))}), median of {len(rs)} rounds")
    if len(labels) == 2:
        ratios = []
        for rnd in sorted({r["round"] for r in rows}):
            by = {r["build"]: r["np_us_per_value"] for r in rows if r["round"] == rnd}
            if by.get(labels[0]) and by.get(labels[1]):
                ratios.append(by[labels[1]] / by[labels[0]])
        print(f"{name} pair: {labels[1]} / {labels[0]} CPU per value, per round: "
              f"{', '.join(fmt(x, 3) for x in ratios)}; median {fmt(med(ratios), 3)}")


# ------------------------------------------------------------------ peers

TIMED_SPLIT = [0.0, 0.0]


def timed(cmd, stdout=None, stderr=None, input_path=None, env=None, timeout=600,
            input_text=None):
    """Run cmd; returns (wall, cpu, rc) with cpu = user + sys of cmd and the children it
    waited for, from wait4's rusage (µs; /usr/bin/time prints 10 ms steps, 6% of
    fping's 0.17 s at 4,096 hosts); user and sys of the last call are left in
    TIMED_SPLIT. Killed after `timeout` s (rc then -9)."""
    if input_text is not None:
        input_path = os.path.join(OUT, "time.in")
        with open(input_path, "w") as f:
            f.write(input_text)
    stdin = open(input_path) if input_path else subprocess.DEVNULL
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=stdin, env=env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if input_path:
            stdin.close()
    TIMED_SPLIT[:] = [ru.ru_utime, ru.ru_stime]
    return time.monotonic() - t0, ru.ru_utime + ru.ru_stime, p.returncode


def peers_icmp(name, icmp_ips, results):
    hosts = os.path.join(OUT, name, "icmp-hosts.txt")
    with open(hosts, "w") as f:
        f.writelines(ip + "\n" for ip in icmp_ips)
    alive_exp = sum(1 for ip in icmp_ips if not is_silent(ip))
    # fping's default -i 10 ms between any two packets would take 3 x hosts x 10 ms;
    # -i 0 sends as fast as it can, like netpoller's paced sweep. One fping keeps at most
    # 65,535 probes in flight ("not enough sequence numbers"), so with -C 3 larger sets
    # run as fping processes of 16,384 hosts each, FPING_PARALLEL (1) at a time: every
    # raw ICMP socket receives every echo reply, so parallel fpings parse each other's
    # replies and overflow their receive buffers (icmpbig: 4 at once lost 4% of the
    # answers). One at a time is fping's best case.
    fping_peer(name, icmp_ips, alive_exp, results, 16384, FPING_PARALLEL, "bash",
               "fping -C3 -p20 -t1000 -r0 -i0 ({procs} proc)", repeat=FPING_REPEAT)
    # fping as a Zabbix 6.0 pinger runs it: a pinger takes up to MAX_PINGER_ITEMS (128)
    # due items, and items of the same probe parameters share one fping, started with
    # popen ("sh -c"); here 3 items per host, so 42 hosts per fping. Each call lasts
    # about the 1 s timeout, so keeping 4,096 hosts every 10 s needs ~10 pingers at once.
    if len(icmp_ips) <= ZABBIX_PEER_MAX_HOSTS:
        fping_peer(name, icmp_ips, alive_exp, results, ZABBIX_PINGER_ITEMS // 3,
                   ZABBIX_PINGERS, "sh",
                   f"fping as Zabbix 6.0's pingers ({{procs}} proc, {ZABBIX_PINGERS} at once)")
    nmap_peer(name, hosts, icmp_ips, alive_exp, results)


def fping_peer(name, icmp_ips, alive_exp, results, chunk, parallel, shell, label,
               repeat=1):
    """fping over `icmp_ips` in processes of `chunk` hosts, `parallel` at a time, each
    started by `shell -c`; CPU of them all (and of the shells). `label` names the peer;
    `{procs}` in it becomes the number of fping processes. With `repeat` > 1 the pass
    runs that many times, a second apart: the result is the pass of median CPU, every
    pass's CPU in `cpu_s_passes`."""
    errf = os.path.join(OUT, name, f"fping-{chunk}.err")
    files = []
    for i in range(0, len(icmp_ips), chunk):
        fn = os.path.join(OUT, name, f"icmp-hosts.{i // chunk}.txt")
        with open(fn, "w") as f:
            f.writelines(ip + "\n" for ip in icmp_ips[i:i + chunk])
        files.append(fn)
    fp = "fping -q -C 3 -p 20 -t 1000 -r 0 -i 0"
    script = "\n".join(f"{fp} -f {fn} 2>{errf}.{k}" for k, fn in enumerate(files))
    def alive_of_pass():
        """Hosts that answered in this pass; the per-chunk stderr files are merged into
        `errf` (the last pass's stays for inspection)."""
        alive = 0
        with open(errf, "w") as ef:
            for k in range(len(files)):
                with open(f"{errf}.{k}") as f:
                    for line in f:
                        ef.write(line)
                        if " : " in line and any(x != "-" for x in
                                                 line.split(" : ", 1)[1].split()):
                            alive += 1
                os.unlink(f"{errf}.{k}")
        return alive

    passes = []
    for i in range(max(1, repeat)):
        if i:
            time.sleep(1)
        wall, cpu, rc = timed(["xargs", "-P", str(parallel), "-d", "\n", "-n", "1",
                               shell, "-c"], stdout=subprocess.DEVNULL,
                              input_text=script + "\n")
        passes.append((cpu, wall, rc, list(TIMED_SPLIT), alive_of_pass()))
    for fn in files:
        os.unlink(fn)
    # The median pass by CPU; its user/sys split goes into the result. Results are equal
    # only if every pass found the expected hosts alive.
    cpu, wall, _, TIMED_SPLIT[:], alive = sorted(passes)[len(passes) // 2]
    rc = max((p[2] for p in passes), key=abs)  # any failing pass fails the peer
    res = icmp_peer_result(label.format(procs=len(files)), name, len(icmp_ips), 3,
                           wall, cpu, rc, alive, alive_exp)
    res["cpu_s_passes"] = [p[0] for p in passes]
    res["alive_passes"] = [p[4] for p in passes]
    res["equal"] = all(p[4] == alive_exp for p in passes)
    results.append(res)


def icmp_peer_result(peer, name, hosts, probes, wall, cpu, rc, alive, alive_exp):
    """An ICMP peer's result line; CPU per probe sent (`probes` per host), which is per
    value for netpoller (one probe per value). User and sys from `timed`'s last call."""
    per = hosts * probes / 1e6
    return dict(kind="peer", peer=peer, workload=name, hosts=hosts, wall_s=wall, cpu_s=cpu,
                cpu_us_per_value=cpu / per, user_us_per_value=TIMED_SPLIT[0] / per,
                sys_us_per_value=TIMED_SPLIT[1] / per,
                alive=alive, expected_alive=alive_exp, equal=alive == alive_exp, rc=rc)


def nmap_peer(name, hosts, icmp_ips, alive_exp, results):
    """nmap's ping sweep (`-sn -PE`: ICMP echo only, one probe per host, no retries as
    fping's -r 0) over the same hosts. Only on the tun rig: nmap reports addresses of
    the machine's own (all of 127.0.0.0/8) up without probing them. Its CPU is per
    probe (one per host), as netpoller's per value is (3 probes, 3 values per host)."""
    if RIG != "tun":
        log("nmap: skipped on the lo rig (it reports local addresses up without probing)")
        return
    if len(icmp_ips) > NMAP_MAX_HOSTS:
        log(f"nmap: skipped above {NMAP_MAX_HOSTS} hosts (it needs ~0.6 ms of wall per host)")
        return
    out = os.path.join(OUT, name, "nmap.gnmap")
    wall, cpu, rc = timed(["nmap", "-sn", "-PE", "-n", "--max-retries", "0", "-iL", hosts,
                           "-oG", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        alive = sum(1 for line in f if line.startswith("Host: ") and "Status: Up" in line)
    results.append(icmp_peer_result("nmap -sn -PE -n --max-retries 0 (1 probe/host)", name,
                                    len(icmp_ips), 1, wall, cpu, rc, alive, alive_exp))


def snmpget_lines(agent_oids, sim_oids, agents, per=32):
    lines = []
    for ip, comm in agents:
        for i in range(0, len(agent_oids), per):
            lines.append(["-c", comm, ip] + [o for o, _ in agent_oids[i:i + per]])
    for i in range(0, len(sim_oids), per):
        lines.append(["-c", SIM[1], SIM[0]] + [o for o, _ in sim_oids[i:i + per]])
    return lines


def bulk_spans(wanted, order, per=32):
    """GETBULK requests (previous OID, max-repetitions) that return every OID of
    `wanted`, given `order`, the agent's walk: a request asks for the OIDs after the one
    before a wanted OID, up to `per` of them, so it may carry unwanted OIDs in between
    (what a bulk poller fetching table columns pays). A span never crosses a volatile
    table, whose rows differ between agents and from one second to the next."""
    pos = {o: i for i, o in enumerate(order)}
    idx = sorted(pos[o] for o in wanted)
    volatile = [any(o.startswith(p) for p in VOLATILE_PREFIXES) for o in order]
    spans, i = [], 0
    while i < len(idx):
        first, j = idx[i], i
        while (j + 1 < len(idx) and idx[j + 1] - first < per
               and not any(volatile[idx[j] + 1:idx[j + 1]])):
            j += 1
        # The OID before the first wanted one, unless that is the walk's start or a row
        # of a volatile table (a process started since the walk would slip in before
        # the span and push its last OID out): then the first one's parent, which
        # precedes it with nothing of the walk in between.
        prev = (order[first - 1] if first > 0 and not volatile[first - 1]
                else order[first].rsplit(".", 1)[0])
        spans.append((prev, idx[j] - first + 1))
        i = j + 1
    return spans


def snmpbulk_lines(agent_oids, sim_oids, agents):
    """snmpbulkget arguments for every agent: spans of the agent OIDs in agent 0's walk
    (all service agents run the same snmpd), of the simulator's in its own."""
    agent_order = [o["oid"] for o in walk(*SVC_AGENTS[0])]
    sim_order = [o["oid"] for o in walk(*SIM)]
    lines = []
    for ip, comm in agents:
        for prev, n in bulk_spans([o for o, _ in agent_oids], agent_order):
            lines.append([f"-Cr{n}", "-c", comm, ip, prev])
    for prev, n in bulk_spans([o for o, _ in sim_oids], sim_order):
        lines.append([f"-Cr{n}", "-c", SIM[1], SIM[0], prev])
    return lines


def peers_snmp(name, agent_oids, sim_oids, agents, results):
    d = os.path.join(OUT, name)
    n_oids = len(agent_oids) * len(agents) + len(sim_oids)
    wanted = {o for o, _ in agent_oids} | {o for o, _ in sim_oids}
    env = dict(os.environ, MIBS="")
    tools = [("snmpget", [], snmpget_lines(agent_oids, sim_oids, agents), "32 OIDs each"),
             ("snmpbulkget", ["-Cn0"], snmpbulk_lines(agent_oids, sim_oids, agents),
              "GETBULK spans of <= 32")]
    for tool, fixed, lines, what in tools:
        argf = os.path.join(d, f"{tool}.args")
        with open(argf, "w") as f:
            f.writelines(" ".join(x) + "\n" for x in lines)
        for par in (1, 8):
            outf = os.path.join(d, f"{tool}-P{par}.out")
            with open(outf, "w") as of:
                wall, cpu, rc = timed(["xargs", "-P", str(par), "-L", "1", tool, "-v2c"] + fixed
                                      + ["-On", "-Oq", "-t", "2", "-r", "1"], stdout=of,
                                      stderr=subprocess.DEVNULL, input_path=argf, env=env)
            # -Oq output has no host: the service agents share their OIDs, so each line
            # of a wanted OID with a value counts once; a bulk span's other OIDs are
            # counted apart (fetched, not wanted).
            answered = fetched = 0
            with open(outf) as f:
                for line in f:
                    oid, _, v = line.rstrip("\n").partition(" ")
                    if not oid.startswith(".") or v.startswith(("No Such", "No more")):
                        continue
                    fetched += 1
                    answered += oid in wanted
            results.append(dict(kind="peer", peer=f"{tool} x{len(lines)} ({what}) -P{par}",
                                workload=name, oids=n_oids, wall_s=wall, cpu_s=cpu,
                                cpu_per_1k=cpu / (n_oids / 1000), requests_per_s=n_oids / wall,
                                answered=answered, fetched=fetched,
                                equal=answered == n_oids, rc=rc))
            log(f"{tool} -P{par}: {n_oids} OIDs in {len(lines)} requests, {wall:.2f}s wall, "
                f"{cpu:.2f}s CPU, {answered} answered, {fetched} fetched")
    exporter_peer(name, agent_oids, sim_oids, agents, results)


def exporter_yml(agent_oids, sim_oids, communities):
    def module(oids, comm):
        lines = ["  get:"] + [f"  - {o[1:]}" for o, _ in oids] + ["  metrics:"]
        for o, t in oids:
            lines += [f"  - name: e2e{o.replace('.', '_')}", f"    oid: {o[1:]}",
                      f"    type: {'DisplayString' if t == 'str' else 'gauge'}",
                      "    help: e2e"]
        lines += ["  version: 2", "  max_repetitions: 25", "  retries: 1", "  timeout: 2s",
                  "  auth:", f"    community: {comm}"]
        return lines
    out = []
    for comm in sorted(communities):
        out += [f"e2e_{comm}:"] + module(agent_oids, comm)
    out += ["e2e_sim:"] + module(sim_oids, SIM[1])
    return "\n".join(out) + "\n"


def exporter_peer(name, agent_oids, sim_oids, agents, results):
    exe = "/usr/bin/prometheus-snmp-exporter"
    if not os.path.exists(exe):
        log("prometheus-snmp-exporter missing: skipped")
        return
    d = os.path.join(OUT, name)
    yml = os.path.join(d, "snmp.yml")
    with open(yml, "w") as f:
        f.write(exporter_yml(agent_oids, sim_oids, {c for _, c in agents}))
    with open(os.path.join(d, "exporter.log"), "w") as lf:
        p = subprocess.Popen([exe, f"--config.file={yml}", f"--web.listen-address={EXPORTER_ADDR}",
                              "--log.level=warn"], stdout=lf, stderr=subprocess.STDOUT)
    register_pid(p.pid)
    try:
        deadline = time.time() + 30
        while True:
            try:
                scrape(f"http://{EXPORTER_ADDR}/", timeout=2)
                break
            except OSError:
                if p.poll() is not None or time.time() > deadline:
                    log(f"exporter did not start (see {d}/exporter.log)")
                    return
                time.sleep(0.2)
        targets = [(ip, f"e2e_{c}") for ip, c in agents] + [(SIM[0], "e2e_sim")]
        n_oids = len(agent_oids) * len(agents) + len(sim_oids)
        rounds, walls, samples = 3, [], []
        cpu0 = proc_cpu(p.pid)
        t0 = time.time()
        for _ in range(rounds):
            # One round = every target scraped at once, as Prometheus does per interval.
            rs = time.time()
            procs = []
            for ip, mod in targets:
                url = f"http://{EXPORTER_ADDR}/snmp?" + urllib.parse.urlencode(
                    dict(target=ip, module=mod))
                procs.append(subprocess.Popen(["curl", "-s", "-m", "60", url],
                                              stdout=subprocess.PIPE, text=True))
            n = 0
            for pr in procs:
                out, _ = pr.communicate(timeout=90)
                n += sum(1 for line in out.splitlines() if line.startswith("e2e_"))
            walls.append(time.time() - rs)
            samples.append(n)
        cpu = proc_cpu(p.pid) - cpu0
        total_wall = time.time() - t0
    finally:
        stop(p, signal.SIGTERM, wait_s=20)
    results.append(dict(kind="peer", peer="prometheus-snmp-exporter 0.21 (curl, all targets at once)",
                        workload=name, oids=n_oids, rounds=rounds,
                        wall_s=statistics.median(walls), cpu_s=cpu / rounds,
                        cpu_per_1k=cpu / rounds / (n_oids / 1000),
                        requests_per_s=n_oids * rounds / total_wall,
                        answered=min(samples), equal=min(samples) == n_oids))
    log(f"exporter: {n_oids} OIDs per round, median round {statistics.median(walls):.2f}s, "
        f"{cpu / rounds:.2f}s CPU per round, samples {samples}")


def cmd_peers(args):
    wl, cfg, agent_oids, sim_oids, agents, icmp_ips = workload_files(args.workload)
    results = []
    if icmp_ips:
        peers_icmp(args.workload, icmp_ips, results)
    if agent_oids:
        peers_snmp(args.workload, agent_oids, sim_oids, agents, results)
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        for r in results:
            r["run"] = args.index
            r["rig"] = RIG
            f.write(json.dumps(r) + "\n")
            log(json.dumps(r))


# ------------------------------------------------------------------ summary

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=2):
    if x is None:
        return "-"
    if isinstance(x, float) and x == float("inf"):
        return "inf"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def print_icmp_ratio(key, s, n):
    """netpoller's workload `key` (summary `n`) against ICMP peer `s`."""
    eng = n.get("icmp_threads_us_per_value")
    # With SNMP in the mix the daemon's CPU per value averages both kinds of value:
    # only the ICMP engine's threads compare with fping there.
    mixed = n.get("snmp_threads_us_per_value") is not None
    daemon = ("- (ICMP and SNMP mixed)" if mixed
              else f"{fmt(n['np_us_per_value'] / s['cpu_us_per_value'])}x")
    tool = s["peer"].split()[0]
    print(f"{key} / {s['peer']}: netpoller daemon {daemon}, ICMP engine threads "
          f"{fmt(eng / s['cpu_us_per_value']) if eng else '-'}x {tool}'s CPU per "
          f"{'value' if tool == 'fping' else 'probe'}")


def cmd_summary(args):
    rows = []
    for path in args.input or [os.path.join(OUT, "results.jsonl")]:
        rows += [json.loads(line) for line in open(path) if line.strip()]
    # Runs with E2E_OVERRIDE / E2E_BUILD / E2E_NICE are variants of their workload: own rows.
    variants = []
    for r in rows:
        tag = " ".join(x for x in (r.get("override") or "",
                                   f"build {r['build']}" if r.get("build") else "",
                                   f"nice {r['nice']}" if r.get("nice") else "",
                                   f"rig {r['rig']}" if r.get("rig", "lo") != "lo" else "")
                       if x)
        if r["kind"] == "netpoller" and tag:
            if (r["workload"], tag) not in variants:
                variants.append((r["workload"], tag))
            r["workload"] = f"{r['workload']}~{variants.index((r['workload'], tag)) + 1}"
    np_rows = [r for r in rows if r["kind"] == "netpoller"]
    peers = [r for r in rows if r["kind"] == "peer"]
    for r in peers:
        if r.get("rig", "lo") != "lo":
            r["peer"] += f" [rig {r['rig']}]"
    order = [w for w in WORKLOADS if any(r["workload"] == w for r in np_rows)]
    order += [f"{w}~{i + 1}" for i, (w, _) in enumerate(variants)]
    summary = dict(workloads={}, peers=[],
                   variants={f"{w}~{i + 1}": t for i, (w, t) in enumerate(variants)})
    cols = ["runs", "items", "expected_nvps", "nvps", "np_us_per_value", "np_cpu_per_1k",
            "np_cpu_util", "ch_cpu_per_1k", "ch_cpu_util", "vm_hwm_mib", "hwm_bytes_per_item",
            "icmp_lateness_p99_le", "icmp_lateness_max_le", "snmp_lateness_max_le",
            "late_iterations", "skipped_slots", "drops", "spooled", "backpressure_waits",
            "errors", "false_down", "false_up"]
    tsv = ["\t".join(["workload"] + cols)]
    for w in order:
        rs = [r for r in np_rows if r["workload"] == w]
        s = dict(runs=len(rs), items=rs[0]["items"], expected_nvps=rs[0]["expected_nvps"])
        for k in ("ksoftirqd_cores", "others_cores", "machine_busy", "sink_insert_max_le"):
            s[k] = med([r.get(k) for r in rs])
        for k in ("nvps", "np_us_per_value", "np_user_us_per_value", "np_sys_us_per_value",
                  "np_cpu_per_1k", "np_cpu_util", "ch_cpu_per_1k",
                  "ch_cpu_util", "hwm_bytes_per_item", "icmp_lateness_p99_le",
                  "icmp_lateness_max_le", "snmp_lateness_max_le", "backpressure_waits",
                  "false_down", "false_up"):
            s[k] = med([r.get(k) for r in rs])
        for g in ("icmp", "snmp", "rest"):
            s[f"{g}_threads_us_per_value"] = med(
                [(r.get("thread_group_us_per_value") or {}).get(g) for r in rs])
        s["vm_hwm_mib"] = med([(r["vm_hwm"] or 0) / 2**20 for r in rs])
        s["late_iterations"] = max(r["icmp_late_iterations"] + r["snmp_late_iterations"] for r in rs)
        s["skipped_slots"] = max(r["icmp_skipped_slots"] + r["snmp_skipped_slots"] for r in rs)
        s["drops"] = max(r["drops"] for r in rs)
        s["spooled"] = max(r["sink_spooled_rows"] for r in rs)
        s["errors"] = max(sum(r[f"{e}_errors_{x}"] for e in ("icmp", "snmp")
                              for x in ("timeout", "unsupported", "decode", "send")) for r in rs)
        s["nvps_runs"] = [round(r["nvps"]) for r in rs]
        summary["workloads"][w] = s
        tsv.append("\t".join([w] + [str(s.get(c)) for c in cols]))
    # Scale ratio: cost per value at 10x vs 1x (both workloads).
    if "both" in summary["workloads"] and "scale10" in summary["workloads"]:
        a, b = summary["workloads"]["both"], summary["workloads"]["scale10"]
        summary["scale_ratio"] = dict(
            items=b["items"] / a["items"], nvps=b["nvps"] / a["nvps"],
            np_cpu_per_value=(b["np_us_per_value"] / a["np_us_per_value"]
                              if a["np_us_per_value"] else None),
            ch_cpu_per_value=(b["ch_cpu_per_1k"] / a["ch_cpu_per_1k"]
                              if a["ch_cpu_per_1k"] else None),
            rss=b["vm_hwm_mib"] / a["vm_hwm_mib"])
    pkeys = sorted({(r["workload"], r["peer"]) for r in peers},
                   key=lambda k: (list(WORKLOADS).index(k[0]), k[1]))
    for w, p in pkeys:
        rs = [r for r in peers if r["workload"] == w and r["peer"] == p]
        s = dict(workload=w, peer=p, runs=len(rs))
        for k in ("wall_s", "cpu_s", "cpu_us_per_value", "cpu_per_1k", "requests_per_s",
                  "alive", "answered", "fetched"):
            s[k] = med([r.get(k) for r in rs])
        s["equal"] = all(r.get("equal") for r in rs)
        summary["peers"].append(s)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(OUT, "results.tsv"), "w") as f:
        f.write("\n".join(tsv) + "\n")
    # Text table.
    print(f"{'workload':9} {'runs':>4} {'items':>8} {'exp NVPS':>9} {'NVPS':>9} "
          f"{'np us/val (user + sys)':>22} {'np core':>7} {'CH ms/1k':>8} {'CH core':>7} {'HWM MiB':>8} "
          f"{'B/item':>7} {'lat p99':>7} {'late':>5} {'skip':>5} {'drops':>5} {'spool':>5} "
          f"{'bp':>5} {'errs':>5}")
    for w, s in summary["workloads"].items():
        print(f"{w:9} {s['runs']:>4} {s['items']:>8,} {s['expected_nvps']:>9,.0f} "
              f"{s['nvps']:>9,.0f} "
              f"{fmt(s['np_us_per_value']) + ' (' + fmt(s['np_user_us_per_value']) + ' + ' + fmt(s['np_sys_us_per_value']) + ')':>22} "
              f"{fmt(s['np_cpu_util']):>7} "
              f"{fmt((s['ch_cpu_per_1k'] or 0) * 1000):>8} {fmt(s['ch_cpu_util']):>7} "
              f"{fmt(s['vm_hwm_mib'], 0):>8} {fmt(s['hwm_bytes_per_item'], 0):>7} "
              f"{fmt(s['icmp_lateness_p99_le']):>7} {s['late_iterations']:>5.0f} "
              f"{s['skipped_slots']:>5.0f} {s['drops']:>5.0f} {s['spooled']:>5.0f} "
              f"{s['backpressure_waits']:>5.0f} {s['errors']:>5.0f}")
    for k, t in summary["variants"].items():
        print(f"  {k}: {t}")
    for w, s in summary["workloads"].items():
        g = {k: s.get(f"{k}_threads_us_per_value") for k in ("icmp", "snmp", "rest")}
        if any(v is not None for v in g.values()):
            parts = [f"{label} {fmt(g[k])} ({per})" for k, label, per in (
                ("icmp", "ICMP engine", "per ICMP value"), ("snmp", "SNMP engine", "per SNMP value"),
                ("rest", "rest", "scheduler, sink, HTTP; per value")) if g[k] is not None]
            print(f"  {w}: CPU us/value by thread: {', '.join(parts)}")
    if "scale_ratio" in summary:
        r = summary["scale_ratio"]
        print(f"scale10 / both: items x{r['items']:.1f}, NVPS x{r['nvps']:.1f}, netpoller CPU "
              f"per value x{fmt(r['np_cpu_per_value'])}, ClickHouse CPU per value "
              f"x{fmt(r['ch_cpu_per_value'])}, peak RSS x{r['rss']:.2f}")
    print()
    print(f"{'workload':9} {'peer':62} {'runs':>4} {'wall s':>7} {'CPU s':>7} {'us/val':>7} "
          f"{'CPU s/1k':>8} {'req/s':>8} {'result':>8} equal")
    for s in summary["peers"]:
        res = s["alive"] if s["alive"] is not None else s["answered"]
        print(f"{s['workload']:9} {s['peer'][:62]:62} {s['runs']:>4} {fmt(s['wall_s']):>7} "
              f"{fmt(s['cpu_s'], 3):>7} {fmt(s['cpu_us_per_value']):>7} "
              f"{fmt(s['cpu_per_1k'], 4):>8} {fmt(s['requests_per_s'], 0):>8} "
              f"{fmt(res, 0):>8} {s['equal']}")
    # netpoller ÷ fping (per value) and ÷ nmap (per probe), ratio of the medians: the
    # whole daemon, and its ICMP engine's threads alone (what fping does: send, receive,
    # statistics; no scheduler or sink).
    for s in summary["peers"]:
        if not s["peer"].startswith(("fping", "nmap")) or not s["cpu_us_per_value"]:
            continue
        # Every variant of the workload on the peer's rig (peers run with each).
        tun = s["peer"].endswith("[rig tun]")
        keys = [s["workload"]] + [f"{w}~{i + 1}" for i, (w, t) in enumerate(variants)
                                  if w == s["workload"] and t.endswith("rig tun") == tun]
        for key in keys:
            n = summary["workloads"].get(key)
            if n:
                print_icmp_ratio(key, s, n)
    # SNMP peers: CPU per value against the daemon's (SNMP workload only) and the SNMP
    # engine's thread.
    for s in summary["peers"]:
        n = summary["workloads"].get(s["workload"])
        if not s["cpu_per_1k"] or not n or n.get("icmp_threads_us_per_value") is not None:
            continue
        peer_us = s["cpu_per_1k"] * 1000
        eng = n.get("snmp_threads_us_per_value")
        print(f"{s['workload']} / {s['peer']}: {fmt(peer_us)} us per value; netpoller daemon "
              f"{fmt(n['np_us_per_value'] / peer_us, 3)}x, SNMP engine thread "
              f"{fmt(eng / peer_us, 3) if eng else '-'}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("oids")
    o.add_argument("--agent", type=int, default=2000)
    o.add_argument("--sim", type=int, default=180)
    r = sub.add_parser("run")
    r.add_argument("workload", choices=list(WORKLOADS))
    r.add_argument("--index", type=int, default=1)
    r.add_argument("--warmup", type=float, default=25)
    r.add_argument("--duration", type=float, default=90)
    p = sub.add_parser("peers")
    p.add_argument("workload", choices=list(WORKLOADS))
    p.add_argument("--index", type=int, default=1)
    pr = sub.add_parser("pair")
    pr.add_argument("workload", choices=list(WORKLOADS))
    pr.add_argument("--rounds", type=int, default=3)
    pr.add_argument("--warmup", type=float, default=25)
    pr.add_argument("--duration", type=float, default=90)
    c = sub.add_parser("config")
    c.add_argument("workload", choices=list(WORKLOADS))
    sm = sub.add_parser("summary")
    sm.add_argument("input", nargs="*", help="results files (default target/e2e/results.jsonl)")
    sub.add_parser("agents-needed")
    a = ap.parse_args()
    if a.cmd == "oids":
        cmd_oids(a)
    elif a.cmd == "run":
        cmd_run(a)
    elif a.cmd == "peers":
        cmd_peers(a)
    elif a.cmd == "pair":
        cmd_pair(a)
    elif a.cmd == "config":
        print(workload_files(a.workload)[1])
    elif a.cmd == "summary":
        cmd_summary(a)


if __name__ == "__main__":
    main()
