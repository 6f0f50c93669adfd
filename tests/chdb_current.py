#!/usr/bin/env python3
"""Current ClickHouse check with chDB (pip install chdb-core; import name `chdb`).

The test server is ClickHouse 18.16; production runs 24-26. chDB embeds a current
ClickHouse engine in-process, so this script proves the other end of the range:

1. `netpoller schema --server-version <chDB's version>` prints the DDL for a current
   server (with TTL and ttl_only_drop_parts); every statement runs in chDB.
2. The sink (sink_load, file-sink mode: no [clickhouse]) writes spool segments of
   history and of trends rows; this script reads them independently (header, CRC-32),
   extracts each batch's RowBinary payload to a file, and loads it with the `file()`
   table function, with the column list of each table as Glaber declares it.
3. Glaber's read queries run unchanged and return the values the sink was given.

Usage: python3 tests/chdb_current.py [--netpoller PATH] [--sink-load PATH]
(defaults: target/debug/netpoller and target/debug/sink_load; build them first with
`cargo build --bins -p netpoller -p sink`). Prints `N passed, M failed`; exit 1 on failure.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import chdb
    from chdb import session as chs
except ImportError:
    print("chdb is not installed: pip install chdb-core", file=sys.stderr)
    sys.exit(2)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = {0: ("history_dbl", "Float64"), 1: ("history_uint", "UInt64"), 2: ("history_str", "String"),
          3: ("history_log", "String"), 4: ("trends_dbl", "Float64"), 5: ("trends_uint", "Int64")}
HISTORY_COLUMNS = "day Date, itemid UInt64, clock DateTime, hostname String, itemname String, ns UInt32, value {}"
TRENDS_COLUMNS = ("day Date, itemid UInt64, clock DateTime, value_min {0}, value_max {0}, value_avg {0}, count UInt32, "
                  "hostname String, itemname String")
TREND_ROWS = 200
# Recent data: with `TTL day + INTERVAL 90 DAY` older rows are dropped as soon as
# they are written, which this script also checks.
BASE = int(time.time()) // 3600 * 3600 - 7200
ITEMS = 30
ROWS = 3000  # 100 rows per item, one per second

passed = 0
failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def read_spool(dirname):
    """Yields (table_code, rows, payload) of every record; verifies magic and CRC."""
    for name in sorted(os.listdir(dirname)):
        if not name.endswith(".seg"):
            continue
        data = open(os.path.join(dirname, name), "rb").read()
        pos = 0
        while pos < len(data):
            magic, version, table, _res, rows, _first, length = struct.unpack_from("<4sBBHIII", data, pos)
            assert magic == b"NPSR" and version == 1, (name, pos)
            end = pos + 20 + length
            (crc,) = struct.unpack_from("<I", data, end)
            assert zlib.crc32(data[pos:end]) == crc, f"crc mismatch at {name}:{pos}"
            yield table, rows, data[pos + 20:end]
            pos = end + 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--netpoller", default=os.path.join(ROOT, "target/debug/netpoller"))
    ap.add_argument("--sink-load", default=os.path.join(ROOT, "target/debug/sink_load"))
    args = ap.parse_args()

    version = chdb.query("SELECT version()", "CSV").bytes().decode().strip().strip('"')
    print(f"chDB engine: ClickHouse {version}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "np.toml")
        with open(cfg, "w") as f:
            f.write(f'[daemon]\nspool_dir = "{tmp}/spool"\n\n[clickhouse]\nurl = "http://127.0.0.1:1"\nretention = "90days"\n'
                    'trends_retention = "730days"\n')
        ddl = subprocess.run([args.netpoller, "schema", "-c", cfg, "--server-version", version],
                             check=True, capture_output=True, text=True).stdout
        stmts = [s.strip() for s in ddl.split(";\n") if s.strip() and not s.strip().startswith("--")]
        check("schema prints 7 statements", len(stmts) == 7, str(len(stmts)))
        check("DDL has TTL + ttl_only_drop_parts", all("TTL day + INTERVAL 90 DAY" in s and "ttl_only_drop_parts = 1" in s for s in stmts[1:5]))
        check("trends DDL has its own TTL", all("TTL day + INTERVAL 730 DAY" in s and "trends_" in s for s in stmts[5:]), str(stmts[5:]))

        # The sink writes a spool (file sink: no [clickhouse] section given to sink_load).
        spool = os.path.join(tmp, "spool")
        out = subprocess.run([args.sink_load, f"spool={spool}", f"rows={ROWS}", f"items={ITEMS}", "table=mixed",
                              f"base_clock={BASE}"], check=True, capture_output=True, text=True).stdout
        check("sink wrote every row to the spool", f"spooled={ROWS}" in out, out[-300:])
        tspool = os.path.join(tmp, "tspool")
        out = subprocess.run([args.sink_load, f"spool={tspool}", f"rows={TREND_ROWS}", "items=10", "table=trends",
                              f"base_clock={BASE}"], check=True, capture_output=True, text=True).stdout
        check("sink wrote every trends row to the spool", f"spooled={TREND_ROWS}" in out, out[-300:])

        sess = chs.Session(os.path.join(tmp, "chdb"))
        for s in stmts:
            sess.query(s)
        created = sess.query("SHOW CREATE TABLE glaber.history_dbl", "TSV").bytes().decode()
        check("table created with TTL", "TTL day + toIntervalDay(90)" in created, created)
        check("table created with ttl_only_drop_parts", "ttl_only_drop_parts = 1" in created, created)

        loaded = {}
        batches = list(read_spool(spool)) + list(read_spool(tspool))
        for i, (code, rows, payload) in enumerate(batches):
            table, vtype = TABLES[code]
            path = os.path.join(tmp, f"batch{i}.rowbinary")
            with open(path, "wb") as f:
                f.write(payload)
            structure = (TRENDS_COLUMNS if code >= 4 else HISTORY_COLUMNS).format(vtype)
            names = ", ".join(c.split()[0] for c in structure.split(", "))
            sess.query(f"INSERT INTO glaber.{table} ({names}) "
                       f"SELECT * FROM file('{path}', 'RowBinary', '{structure}')")
            loaded[table] = loaded.get(table, 0) + rows
        count = lambda t: int(sess.query(f"SELECT count() FROM glaber.{t}", "CSV").bytes())
        total = sum(count(t) for t, _ in list(TABLES.values())[:4])
        check("all rows loaded through file()", total == ROWS, f"{total} vs {ROWS}")
        trends = count("trends_dbl") + count("trends_uint")
        check("all trends rows loaded through file()", trends == TREND_ROWS, f"{trends} vs {TREND_ROWS}")
        # sink_load trends: row j -> itemid j % 10, clock at whole hours; trends_uint
        # rows (odd j) have value_min -j, value_max j, count j; trends_dbl (even j)
        # value_min j/1000, value_avg j/1000 + 0.5.
        last = TREND_ROWS - 1
        got = sess.query("SELECT min(value_min), max(value_max), sum(count), countIf(clock % 3600 != 0) "
                         "FROM glaber.trends_uint", "CSV").bytes().decode().strip()
        want = f"-{last},{last},{sum(range(1, TREND_ROWS, 2))},0"
        check("trends_uint values exact (Int64, negative)", got == want, f"{got} vs {want}")
        got = json.loads(sess.query("SELECT value_min, value_avg, count FROM glaber.trends_dbl WHERE itemid = 8 "
                                    "ORDER BY clock DESC LIMIT 1 FORMAT JSON", "JSON").bytes())["data"][0]
        j = TREND_ROWS - 2
        check("trends_dbl values exact", got["value_min"] == j * 0.001 and got["value_avg"] == j * 0.001 + 0.5
              and got["count"] == j, str(got))

        # TTL is live: 200-day-old rows never show up.
        old = [r for r in read_spool(spool)][0]
        opath = os.path.join(tmp, "old.rowbinary")
        with open(opath, "wb") as f:
            f.write(old[2])
        sess.query("CREATE TABLE glaber.ttl_probe AS glaber.history_dbl")
        sess.query(f"INSERT INTO glaber.ttl_probe SELECT toDate(clock - 200*86400), itemid, clock - 200*86400, hostname, itemname, ns, value "
                   f"FROM file('{opath}', 'RowBinary', 'day Date, itemid UInt64, clock DateTime, hostname String, itemname String, ns UInt32, value Float64')")
        sess.query("OPTIMIZE TABLE glaber.ttl_probe FINAL")
        n_old = int(sess.query("SELECT count() FROM glaber.ttl_probe", "CSV").bytes())
        check("rows past retention are expired by TTL", n_old == 0, str(n_old))

        # Day column derived from clock.
        bad_day = int(sess.query("SELECT count() FROM glaber.history_dbl WHERE day != toDate(clock)", "CSV").bytes())
        check("day = toDate(clock)", bad_day == 0, str(bad_day))

        # Glaber's read query for the latest values of an item (itemid 0: a history_dbl item).
        t = BASE + 50
        j = json.loads(sess.query(
            f"SELECT toUInt32(clock) clock, value FROM glaber.history_dbl WHERE itemid=0 AND clock > {t} "
            f"ORDER BY clock DESC LIMIT 10 FORMAT JSON", "JSON").bytes())
        data = j["data"]
        check("latest-values query returns 10 rows", len(data) == 10, str(len(data)))
        # sink_load: row i -> itemid i % 30, clock BASE + i // 30, value i * 0.001.
        last = ROWS - ITEMS  # last row index of itemid 0
        check("newest first, exact clock", data[0]["clock"] == BASE + last // ITEMS, str(data[0]))
        check("exact value", abs(data[0]["value"] - last * 0.001) < 1e-12, str(data[0]))
        check("descending clocks", [d["clock"] for d in data] == sorted([d["clock"] for d in data], reverse=True))

        # uint / str items and the range query used for graphs.
        j = json.loads(sess.query(
            f"SELECT toUInt32(clock) clock, value FROM glaber.history_uint WHERE itemid=1 AND clock > {BASE} "
            f"ORDER BY clock DESC LIMIT 10 FORMAT JSON", "JSON").bytes())
        check("history_uint read", int(j["data"][0]["value"]) == ROWS - ITEMS + 1, str(j["data"][0]))
        j = json.loads(sess.query(
            f"SELECT toUInt32(clock) clock, value FROM glaber.history_str WHERE itemid=2 ORDER BY clock DESC LIMIT 1 FORMAT JSON",
            "JSON").bytes())
        check("history_str read", j["data"][0]["value"] == f"value {ROWS - ITEMS + 2}", str(j["data"][0]))
        n = int(sess.query(
            f"SELECT count() FROM glaber.history_dbl WHERE itemid IN (0, 3, 6) AND clock BETWEEN {BASE} AND {BASE + 9}",
            "CSV").bytes())
        check("range query over several items", n == 30, str(n))
        agg = sess.query(
            "SELECT itemid, toUInt32(toStartOfHour(clock)) h, min(value), max(value), avg(value), count() "
            "FROM glaber.history_dbl WHERE itemid = 0 GROUP BY itemid, h ORDER BY h", "CSV").bytes().decode()
        check("trend-style aggregation", sum(int(l.split(",")[-1]) for l in agg.strip().splitlines()) == ROWS // ITEMS, agg)
        sess.close()

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
