#!/usr/bin/env python3
"""The torch side of ipc.sh: the same copies as orbitefs's cuda_ipc
rounds, made by a user with torch on one GPU. Two tensors a and b of
SLOTS slots of BYTES bytes on cuda:0; per direction (write: a -> b,
read: b -> a), one warm-up pass over the slots, then ROUNDS rounds of
REPS back-to-back copy_ calls on the current stream, copy i moving slot
i mod SLOTS, each round timed from before its first copy_ to after a
torch.cuda.synchronize() following its last (as ipc.sh times a round
from its first submit to the end of its batch's wait). Before a
direction's rounds its destination is zeroed; after them it must equal
the source. Prints one JSON line: per direction the round times and
their median.

  Usage: ipc_torch.py --bytes N --slots S --reps K --rounds R
"""
import argparse, json, statistics, time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--bytes", type=int, required=True)
ap.add_argument("--slots", type=int, default=1)
ap.add_argument("--reps", type=int, default=8)
ap.add_argument("--rounds", type=int, default=5)
a = ap.parse_args()
if a.reps < a.slots:
    raise SystemExit(f"--reps {a.reps} must be at least --slots {a.slots}")
x = torch.randint(0, 256, (a.slots, a.bytes), dtype=torch.uint8, device="cuda:0")
y = torch.zeros_like(x)
out = {"peer": "torch", "bytes": a.bytes, "slots": a.slots, "reps": a.reps, "rounds": a.rounds}
for direction, src, dst in (("write", x, y), ("read", y, x)):
    for s in range(a.slots):  # warm-up
        dst[s].copy_(src[s])
    dst.zero_()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for i in range(a.reps):
            s = i % a.slots
            dst[s].copy_(src[s])
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if not torch.equal(src, dst):
        raise SystemExit(f"torch {direction} copy differs")
    m = statistics.median(times)
    out[direction] = {"seconds": [round(t, 6) for t in times], "median_seconds": round(m, 6),
                      "gbps": round(a.bytes * a.reps / m / 1e9, 1)}
print(json.dumps(out))
