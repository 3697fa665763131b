#!/usr/bin/env python3
"""What a user would otherwise run, timed the way orbitefs times itself.

Whole files (`orbitefs bench load`): one JSON line per peer and pass.

  naive:   numpy.fromfile + torch.from_numpy(...).cuda()
  pinned:  preadv into two pinned buffers, async copies on one stream
  gds:     torch.cuda.gds.GdsFile(...).load_storage (cuFile; ext4 only)

  Usage: peers.py FILE [--runs N] [--cold] [--peers naive,pinned,gds]
  --cold drops the page cache (root: /proc/sys/vm/drop_caches) before
  each pass.

KV-cache swap (`orbitefs bench kvswap`): the way a Python offloader does
it, on the same layer files (DIR/layer-NNN.kv, --groups groups of
--group-bytes each), one JSON object in bench kvswap's shape.

  Usage: peers.py kvswap --dir DIR [--layers 4 --groups 256
         --group-bytes 131072 --batch 16 --clients 1[,4,...] --write-pct 0
         --device cuda:0|cpu --runtime 3 --io-threads N --direct --seed 1]

  Each of --clients threads loops: draw a layer and --batch distinct
  groups, and swap them in (preadv of each group into the client's pinned
  torch buffer by a shared thread pool of --io-threads, each group copied
  to the client's device tensor on the client's CUDA stream as soon as its
  read returns, the stream synchronized at the end) or, for --write-pct
  percent of the batches, out (device -> pinned on the stream, then a
  pwrite of each group by the pool). With --device cpu the pinned buffer
  is the memory (no copy), and without torch (a development machine) an
  anonymous mapping stands in for it. --direct opens the files O_DIRECT.
  Only batches finished within --runtime count; a batch's latency runs
  from its first read to its terminal point. Before the clock starts, one
  swap-in per layer is compared with the files (exit 1 if it differs;
  "verified" in the output). Several --clients counts run
  one after another in one process (one JSON line each), so torch starts
  once.

Runs on the GPU machine's torch venv (/opt/torch/.venv/bin/python3).
"""
import argparse, ctypes, json, mmap, os, random, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np
    import torch
except ImportError:  # the KV peer's cpu path runs without them
    np = torch = None

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


def fs_type(path):
    """The filesystem type of path's mount (the longest matching mount point)."""
    path, best, kind = os.path.realpath(path), "", "?"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mnt = left.split()[4].replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, right.split()[0]
    return kind


class HostBuffer:
    """n bytes of page-aligned host memory: a pinned torch tensor, or an
    anonymous mapping without torch. view(off, n) is a writable memoryview."""

    def __init__(self, n, pinned):
        if pinned:
            self.tensor = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            raw = (ctypes.c_char * n).from_address(self.tensor.data_ptr())
            self.mem = memoryview(raw).cast("B")
        else:
            self.tensor = None
            self.mem = memoryview(mmap.mmap(-1, n))
        if ctypes.addressof(ctypes.c_char.from_buffer(self.mem)) % 4096:
            raise RuntimeError("host buffer is not page-aligned (O_DIRECT needs it)")

    def view(self, off, n):
        return self.mem[off:off + n]


def read_group(fd, buf, off, n):
    got = os.preadv(fd, [buf], off)
    if got != n:
        raise RuntimeError(f"short read: {got} of {n} bytes at {off}")


def write_group(fd, buf, off, n):
    got = os.pwritev(fd, [buf], off)
    if got != n:
        raise RuntimeError(f"short write: {got} of {n} bytes at {off}")


def kvswap(argv):
    ap = argparse.ArgumentParser(prog="peers.py kvswap")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--group-bytes", type=int, default=128 << 10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clients", default="1", help="client count, or several (1,4,16,64): one result each")
    ap.add_argument("--write-pct", type=int, default=0)
    ap.add_argument("--device", default="cuda:0", help="cuda:N or cpu")
    ap.add_argument("--runtime", type=float, default=3.0, help="seconds")
    ap.add_argument("--io-threads", type=int, default=max(16, 2 * (os.cpu_count() or 1)))
    ap.add_argument("--direct", action="store_true", help="O_DIRECT (ext4)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    gb = a.group_bytes
    errs = []
    try:
        counts = [int(x) for x in a.clients.split(",")]
    except ValueError:
        counts = [0]
    if min(counts) < 1:
        errs.append(f"--clients {a.clients}: want positive counts, comma separated")
    if a.layers < 1 or a.groups < 1 or a.io_threads < 1 or a.runtime <= 0:
        errs.append("--layers, --groups, --clients, --io-threads and --runtime must be positive")
    if gb <= 0 or gb % 4096:
        errs.append(f"--group-bytes {gb}: want a positive multiple of 4096")
    if not 1 <= a.batch <= a.groups:
        errs.append(f"--batch {a.batch}: want 1 to --groups ({a.groups})")
    if not 0 <= a.write_pct <= 100:
        errs.append(f"--write-pct {a.write_pct}: want 0-100")
    cuda = a.device.startswith("cuda")
    if cuda and torch is None:
        errs.append(f"--device {a.device}: torch is not importable here")
    elif a.device != "cpu" and not cuda:
        errs.append(f"--device {a.device}: want cpu or cuda:N")
    if errs:
        ap.error("; ".join(errs))

    flags = (os.O_RDWR if a.write_pct else os.O_RDONLY) | (os.O_DIRECT if a.direct else 0)
    fds = []
    for l in range(a.layers):
        p = os.path.join(a.dir, f"layer-{l:03d}.kv")
        if os.path.getsize(p) < a.groups * gb:
            sys.exit(f"{p}: {os.path.getsize(p)} bytes, want {a.groups * gb} (--groups x --group-bytes)")
        fds.append(os.open(p, flags))
    slot = gb * a.batch
    # Memory is set up before any clock starts, as bench kvswap registers
    # its region first; the largest client count's share serves them all.
    most = max(counts)
    hosts = [HostBuffer(slot, pinned=torch is not None) for _ in range(most)]
    dsts, streams = [None] * most, [None] * most
    if cuda:
        torch.cuda.init()
        dev = torch.device(a.device)
        dsts = [torch.empty(slot, dtype=torch.uint8, device=dev) for _ in range(most)]
        streams = [torch.cuda.Stream(device=dev) for _ in range(most)]
        torch.cuda.synchronize(dev)
    pool = ThreadPoolExecutor(max_workers=a.io_threads)
    verify(a, fds, hosts[0], dsts[0], streams[0], pool)
    for clients in counts:
        print(json.dumps(kvswap_run(a, fds, clients, hosts, dsts, streams, pool)), flush=True)
    pool.shutdown()
    for fd in fds:
        os.close(fd)


def swap_in(a, pool, fd, picks, host, dst, stream):
    """Read groups picks of fd into host by the pool; with a GPU, copy
    each to dst on stream as its read returns, then synchronize."""
    gb = a.group_bytes
    futs = [pool.submit(read_group, fd, host.view(i * gb, gb), g * gb, gb) for i, g in enumerate(picks)]
    for i, f in enumerate(futs):
        f.result()
        if dst is not None:
            with torch.cuda.stream(stream):
                dst[i * gb:(i + 1) * gb].copy_(host.tensor[i * gb:(i + 1) * gb], non_blocking=True)
    if dst is not None:
        stream.synchronize()


def swap_out(a, pool, fd, picks, host, dst, stream):
    """With a GPU, copy dst to host on stream and synchronize; then write
    host's groups to picks of fd by the pool."""
    gb = a.group_bytes
    if dst is not None:
        with torch.cuda.stream(stream):
            host.tensor.copy_(dst, non_blocking=True)
        stream.synchronize()
    futs = [pool.submit(write_group, fd, host.view(i * gb, gb), g * gb, gb) for i, g in enumerate(picks)]
    for f in futs:
        f.result()


def verify(a, fds, host, dst, stream, pool):
    """One swap-in of the last groups of every layer, compared with the
    files read through a plain descriptor: the peer's figures come from a
    path that moves the right bytes."""
    gb = a.group_bytes
    picks = list(range(a.groups - a.batch, a.groups))[::-1]
    for l, fd in enumerate(fds):
        swap_in(a, pool, fd, picks, host, dst, stream)
        if dst is not None:
            got = dst.cpu()
            mem = memoryview((ctypes.c_char * len(got)).from_address(got.data_ptr())).cast("B")
        else:
            mem = host.mem
        with open(os.path.join(a.dir, f"layer-{l:03d}.kv"), "rb") as f:
            for i, g in enumerate(picks):
                f.seek(g * gb)
                if f.read(gb) != bytes(mem[i * gb:(i + 1) * gb]):
                    sys.exit(f"verify: layer {l} group {g} differs from the file after a swap-in")


def kvswap_run(a, fds, clients, hosts, dsts, streams, pool):
    """One measured interval with clients client threads."""
    gb, slot = a.group_bytes, a.group_bytes * a.batch
    results = [None] * clients
    start = time.perf_counter()
    stop_at = start + a.runtime

    def client(c):
        rng = random.Random(a.seed * 1000003 + c)
        host, dst, stream = hosts[c], dsts[c], streams[c]
        lat, batches = [], 0
        while True:
            layer = rng.randrange(a.layers)
            picks = rng.sample(range(a.groups), a.batch)
            write = rng.randrange(100) < a.write_pct
            t0 = time.perf_counter()
            (swap_out if write else swap_in)(a, pool, fds[layer], picks, host, dst, stream)
            t1 = time.perf_counter()
            if t1 > stop_at:
                break  # finished after the interval: not counted
            lat.append(t1 - t0)
            batches += 1
        results[c] = (lat, batches)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(r is None for r in results):
        sys.exit("a client failed (traceback above)")
    secs = min(time.perf_counter() - start, a.runtime)
    lat = sorted(x for r in results for x in r[0])
    batches = sum(r[1] for r in results)
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e6 if lat else 0
    return {
        "peer": "python-threads", "dir": a.dir, "filesystem": fs_type(a.dir), "memory": a.device,
        "direct_io": a.direct, "layers": a.layers, "group_bytes": gb, "batch_groups": a.batch,
        "clients": clients, "write_pct": a.write_pct, "seconds": secs, "batches": batches,
        "bytes": batches * slot, "gb_per_sec": batches * slot / secs / 1e9,
        "batches_per_sec": batches / secs, "batch_p50_us": q(0.50), "batch_p99_us": q(0.99),
        "io_threads": a.io_threads, "pinned": torch is not None, "verified": True,
        "torch": torch.__version__ if torch is not None else None,
    }


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "kvswap":
        return kvswap(sys.argv[2:])
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
