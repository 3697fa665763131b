#!/usr/bin/env python3
"""The torch peer of ipc.sh: REPS device-to-device copies of BYTES bytes
between two tensors on cuda:0 (what a user would run), timed from the
first copy to a synchronize after the last, after one warm-up copy; the
last copy's bytes are checked. Prints one JSON line.

  Usage: ipc_torch.py --bytes N --reps K
"""
import argparse, json, time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--bytes", type=int, required=True)
ap.add_argument("--reps", type=int, default=8)
a = ap.parse_args()
src = torch.randint(0, 256, (a.bytes,), dtype=torch.uint8, device="cuda:0")
dst = torch.empty_like(src)
dst.copy_(src)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(a.reps):
    dst.copy_(src)
torch.cuda.synchronize()
s = time.perf_counter() - t0
if not torch.equal(src, dst):
    raise SystemExit("torch copy differs")
n = a.bytes * a.reps
print(json.dumps({"peer": "torch", "bytes": n, "seconds": s, "gbps": round(n / s / 1e9, 1)}))
