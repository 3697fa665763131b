#!/usr/bin/env python3
"""perfsummary.py DIR: the markdown summary of a perf.sh run (DIR holds
kvswap.jsonl, load.jsonl, multicore/ and multicore-j32/), with the
ratios the KV-swap targets need. Standard library only, so it runs on the
GPU machine (no jq there) and here alike; perf.sh writes its output to
DIR/summary.md.

Every figure is a median over perf.sh's alternating rounds; a ratio is
the median of the per-round ratios (each round's runs are back to back,
so drift during the call cancels), the ratio of the medians after it in
brackets where they differ by more than 0.05. A target's verdict is "ok"
or "MISS"; a cell with no data is "-".
"""
import json, os, statistics, sys
from collections import defaultdict


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def verdict(ok):
    return "-" if ok is None else ("ok" if ok else "MISS")


def paired(a, b):
    """Median of per-round ratios a[r]/b[r] over the rounds both have."""
    rs = [a[r] / b[r] for r in a if r in b and b[r] > 0]
    return med(rs)


def ratio_cell(a, b):
    p = paired(a, b)
    if p is None:
        return "-", None
    ma, mb = med(list(a.values())), med(list(b.values()))
    cell = f"{p:.2f}"
    if mb and abs(ma / mb - p) > 0.05:
        cell += f" ({ma / mb:.2f})"
    return cell, p


def load_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    return out


def kvswap_section(rows, clients):
    # key (fs, write_pct, impl, mem) -> clients -> round -> result
    kv = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        res = r["result"]
        kv[(r["fs"], res["write_pct"], r["impl"], res["memory"])][res["clients"]][r["round"]] = res
    if not kv:
        return ["No kvswap results.", ""]
    gbps = lambda key, c: {rd: x["gb_per_sec"] for rd, x in kv[key][c].items()}
    out = ["## KV swap: `bench kvswap` and the Python peer (GB/s, median of rounds)", ""]
    out.append("| filesystem | write % | impl -> memory | " + " | ".join(f"{c} client{'s' * (c > 1)}" for c in clients) +
               " | best then no worse than 0.8x | p99/p50 at %d |" % clients[-1])
    out.append("| --- | ---: | --- | " + " | ".join("---:" for _ in clients) + " | --- | ---: |")
    for key in sorted(kv):
        fs, wp, impl, mem = key
        vals = [med(list(gbps(key, c).values())) for c in clients]
        got = [(c, v) for c, v in zip(clients, vals) if v is not None]
        collapse = None
        if got:
            bi = max(range(len(got)), key=lambda i: got[i][1])
            after = [v / got[bi][1] for _, v in got[bi + 1:] if got[bi][1] > 0]
            collapse = min(after) if after else 1.0
        last = kv[key].get(clients[-1], {})
        tail = med([x["batch_p99_us"] / x["batch_p50_us"] for x in last.values() if x["batch_p50_us"] > 0])
        out.append(f"| {fs} | {wp} | {impl} -> {mem} | " + " | ".join(fmt(v) for v in vals) +
                   f" | {fmt(collapse)} {verdict(None if collapse is None else collapse >= 0.8)} | {fmt(tail, '.1f')} {verdict(None if tail is None else tail <= 10)} |")
    out.append("")

    # The ratios the targets name, per client count.
    fss = sorted({k[0] for k in kv})
    wps = sorted({k[1] for k in kv})
    gpus = sorted({k[3] for k in kv if k[3] != "cpu"})
    out.append("### Ratios (median of per-round ratios; ratio of medians in brackets where it differs)")
    out.append("")
    if not gpus:
        return out + ["No GPU rows in this run, so no GPU ratios.", ""]
    out.append("| filesystem | write % | ratio | target | " + " | ".join(str(c) for c in clients) + " | verdict |")
    out.append("| --- | ---: | --- | ---: | " + " | ".join("---:" for _ in clients) + " | --- |")
    for fs in fss:
        for wp in wps:
            for gpu in gpus:
                eng, cpu, peer = (fs, wp, "engine", gpu), (fs, wp, "engine", "cpu"), (fs, wp, "peer", gpu)
                peer_target = 1.5 if fs == "tmpfs" else 1.0
                for name, a, b, target in ((f"engine {gpu} / engine cpu", eng, cpu, 0.9),
                                           (f"engine {gpu} / peer {gpu}", eng, peer, peer_target)):
                    cells, oks = [], []
                    for c in clients:
                        cell, p = ratio_cell(gbps(a, c), gbps(b, c))
                        cells.append(cell)
                        oks.append(None if p is None else p >= target)
                    known = [o for o in oks if o is not None]
                    v = None if not known else all(known) and len(known) == len(clients)
                    out.append(f"| {fs} | {wp} | {name} | >= {target} | " + " | ".join(cells) + f" | {verdict(v)} |")
            if gpus and 16 in clients and fs == "tmpfs":
                v16 = med(list(gbps((fs, wp, "engine", gpus[0]), 16).values()))
                out.append(f"| {fs} | {wp} | engine {gpus[0]} GB/s at 16 clients | >= 25 | " +
                           " | ".join(fmt(v16) if c == 16 else "" for c in clients) + f" | {verdict(None if v16 is None else v16 >= 25)} |")
    out.append("")
    return out


def load_section(rows):
    by = defaultdict(dict)  # request -> round -> median GB/s of the passes
    for r in rows:
        by[r["request"]][r["round"]] = r["result"]["median_gb_per_sec"]
    if "256MiB" not in by or "4MiB" not in by:
        return ["No bench load pair (256MiB and 4MiB requests).", ""]
    cell, p = ratio_cell(by["256MiB"], by["4MiB"])
    plan = next((r["result"].get("plan") for r in rows if r["request"] == "256MiB"), None)
    return ["## `bench load` tmpfs -> cpu, 256 MiB against 4 MiB requests", "",
            "| 256 MiB GB/s | 4 MiB GB/s | 256 MiB / 4 MiB | target | verdict |", "| ---: | ---: | ---: | ---: | --- |",
            f"| {fmt(med(list(by['256MiB'].values())))} | {fmt(med(list(by['4MiB'].values())))} | {cell} | >= 0.9 | {verdict(p >= 0.9)} |",
            "", f"256 MiB plan: {json.dumps(plan)}", ""]


def multicore_section(d):
    rows = [("4 MiB sequential, qd 32", "multicore", "seqread4m", 0.9),
            ("4 KiB random, one batch at qd 32", "multicore", "randread", 0.5),
            ("4 KiB random, 32 jobs at qd 1", "multicore-j32", "randread", 0.8),
            ("4 MiB sequential writes, qd 32", "multicore", "seqwrite4m", None)]
    out = ["## Engine against the parallel pread loop, tmpfs, every core (bench/multicore.sh)", "",
           "| workload | engine GB/s | engine IOPS | pread GB/s | pread IOPS | engine/pread | target | verdict |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, sub, w, target in rows:
        e = load_jsonl(os.path.join(d, sub, f"{w}.engine.json"))
        p = load_jsonl(os.path.join(d, sub, f"{w}.pread.json"))
        if not e or not p:
            out.append(f"| {name} | - | - | - | - | - | {target or ''} | - |")
            continue
        r = med([a["bytes_per_sec"] / b["bytes_per_sec"] for a, b in zip(e, p) if b["bytes_per_sec"] > 0])
        out.append(f"| {name} | {fmt(med([x['bytes_per_sec'] / 1e9 for x in e]))} | {fmt(med([x['iops'] for x in e]), '.0f')} | "
                   f"{fmt(med([x['bytes_per_sec'] / 1e9 for x in p]))} | {fmt(med([x['iops'] for x in p]), '.0f')} | {fmt(r)} | "
                   f"{'>= ' + str(target) if target else ''} | {verdict(None if target is None or r is None else r >= target)} |")
    out.append("")
    return out


def main():
    d = sys.argv[1]
    clients = [int(c) for c in os.environ.get("PERF_CLIENTS", "1 4 16 64").split()]
    out = ["# perf.sh summary", ""]
    mt = os.path.join(d, "machine.txt")
    if os.path.exists(mt):
        out += ["```", open(mt).read().strip(), "```", ""]
    out += kvswap_section(load_jsonl(os.path.join(d, "kvswap.jsonl")), clients)
    out += load_section(load_jsonl(os.path.join(d, "load.jsonl")))
    out += multicore_section(d)
    print("\n".join(out))


if __name__ == "__main__":
    main()
