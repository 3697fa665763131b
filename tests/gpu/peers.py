#!/usr/bin/env python3
"""What a user would otherwise run to move a file into GPU memory, timed
the same way as `orbitefs bench load`: one JSON line per peer and pass.

  naive:   numpy.fromfile + torch.from_numpy(...).cuda()
  pinned:  preadv into two pinned buffers, async copies on one stream
  gds:     torch.cuda.gds.GdsFile(...).load_storage (cuFile; ext4 only)

Usage: peers.py FILE [--runs N] [--cold] [--peers naive,pinned,gds]
--cold drops the page cache (root: /proc/sys/vm/drop_caches) before each
pass. Runs on the GPU machine's torch venv (/opt/torch/.venv/bin/python3).
"""
import argparse, json, os, sys, time

import numpy as np
import torch

BUF = 64 << 20


def drop_caches():
    os.system("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def naive(path, size):
    a = np.fromfile(path, dtype=np.uint8)
    t = torch.from_numpy(a).cuda()
    torch.cuda.synchronize()
    return t


def pinned(path, size):
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    bufs = [torch.empty(BUF, dtype=torch.uint8).pin_memory() for _ in range(2)]
    events = [None, None]
    stream = torch.cuda.Stream()
    fd = os.open(path, os.O_RDONLY)
    try:
        off, i = 0, 0
        while off < size:
            n = min(BUF, size - off)
            if events[i] is not None:
                events[i].synchronize()
            got = os.preadv(fd, [memoryview(bufs[i].numpy())[:n]], off)
            if got != n:
                raise RuntimeError(f"short read {got} of {n} at {off}")
            with torch.cuda.stream(stream):
                dst[off:off + n].copy_(bufs[i][:n], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(stream)
            events[i] = ev
            off += n
            i ^= 1
        stream.synchronize()
    finally:
        os.close(fd)
    return dst


def gds(path, size):
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    f = torch.cuda.gds.GdsFile(path, os.O_RDONLY | os.O_DIRECT)
    f.load_storage(dst.untyped_storage(), 0)
    torch.cuda.synchronize()
    return dst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--peers", default="naive,pinned,gds")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()
    size = os.path.getsize(a.file)
    torch.cuda.init()
    torch.empty(1, device="cuda")
    for name in a.peers.split(","):
        fn = {"naive": naive, "pinned": pinned, "gds": gds}[name]
        secs, err = [], None
        for _ in range(a.runs):
            if a.cold:
                drop_caches()
            t0 = time.perf_counter()
            try:
                t = fn(a.file, size)
            except Exception as e:  # a refused peer is a result too
                err = f"{type(e).__name__}: {e}"
                break
            secs.append(time.perf_counter() - t0)
            ok = None
            if a.verify:
                ok = bool(torch.equal(t.cpu(), torch.from_numpy(np.fromfile(a.file, dtype=np.uint8))))
            del t
            torch.cuda.empty_cache()
        out = {"peer": name, "file": a.file, "bytes": size, "cold": a.cold, "seconds": secs}
        if secs:
            s = sorted(secs)
            out["median_gb_per_sec"] = size / s[len(s) // 2] / 1e9
            out["best_gb_per_sec"] = size / s[0] / 1e9
        if a.verify:
            out["verified"] = ok
        if err:
            out["error"] = err
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
