#!/usr/bin/env python3
"""absummary.py: the table of an ab.sh run (its ab.jsonl): per workload,
the median of each side's rounds and the median of the per-round B/A
ratios; file workloads in IOPS (and CPU us per op), KV swap in GB/s (and
batch p99/p50).

    python3 tests/gpu/absummary.py OUT/ab.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def figure(r):
    if "iops" in r:
        return r["iops"] / 1e3, "k IOPS", r.get("user_cpu_us_per_op", 0) + r.get("sys_cpu_us_per_op", 0)
    p50 = r.get("batch_p50_us") or 0
    return r["gb_per_sec"], "GB/s", (r.get("batch_p99_us", 0) / p50 if p50 else 0)


def main(path):
    runs = defaultdict(dict)  # (w, round) -> side -> (value, unit, extra)
    for line in open(path):
        d = json.loads(line)
        runs[(d["w"], d["round"])][d["side"]] = figure(d["result"])
    by_w = defaultdict(list)
    for (w, r), sides in sorted(runs.items()):
        by_w[w].append(sides)
    print("| workload | A | B | B/A per round | B/A (median) | pread | B/pread per round | A extra | B extra |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w, rounds in by_w.items():
        col = lambda s: [x[s][0] for x in rounds if s in x]
        ext = lambda s: [x[s][2] for x in rounds if s in x]
        unit = next(x[s][1] for x in rounds for s in x)
        ratios = [x["B"][0] / x["A"][0] for x in rounds if "A" in x and "B" in x and x["A"][0]]
        vsp = [x["B"][0] / x["pread"][0] for x in rounds if "B" in x and "pread" in x and x["pread"][0]]
        med = lambda v: f"{statistics.median(v):.2f}" if v else "-"
        print(f"| {w} ({unit}) | {' '.join(f'{v:.2f}' for v in col('A'))} | {' '.join(f'{v:.2f}' for v in col('B'))} | "
              f"{' '.join(f'{v:.2f}' for v in ratios)} | {med(ratios)} | {med(col('pread'))} | {' '.join(f'{v:.2f}' for v in vsp)} | {med(ext('A'))} | {med(ext('B'))} |")


if __name__ == "__main__":
    main(sys.argv[1])
