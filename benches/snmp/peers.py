#!/usr/bin/env python3
"""net-snmp peers for benches/snmp_get.sh: one `snmpget` process per GET request.

    peers.py TARGETS COUNT PARALLEL

TARGETS has lines `IP[:PORT] COMMUNITY OID...` (same file as `netpoller snmp load`).
The first COUNT (host, OID) pairs, taken round-robin over hosts, are fetched with one
`snmpget -v2c` process each, PARALLEL processes at a time (1 = sequential). Prints one
JSON line: requests, failures, wall_s, req_per_s, cpu_s_per_1000_requests (user+system
of all snmpget children, from getrusage).
"""

import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def main():
    targets, count, parallel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    hosts = []
    for line in open(targets):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        hosts.append((f[0], f[1], f[2:]))
    work = []
    i = 0
    while len(work) < count:
        addr, community, oids = hosts[i % len(hosts)]
        work.append((addr, community, oids[(i // len(hosts)) % len(oids)]))
        i += 1

    def one(w):
        addr, community, oid = w
        r = subprocess.run(
            ["snmpget", "-m", "", "-On", "-v2c", "-c", community, "-t", "1", "-r", "1", addr, oid],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return r.returncode == 0

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if parallel <= 1:
        ok = [one(w) for w in work]
    else:
        with ThreadPoolExecutor(max_workers=parallel) as ex:
            ok = list(ex.map(one, work))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({
        "requests": len(work),
        "failures": ok.count(False),
        "wall_s": wall,
        "req_per_s": len(work) / wall,
        "cpu_s_per_1000_requests": cpu * 1000.0 / len(work),
    }))


if __name__ == "__main__":
    main()
