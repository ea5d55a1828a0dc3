#!/usr/bin/env python3
"""How fast 132 SMs read a weight matrix cut into column slices, by the slices' layout in memory (CuPy).

    python3 bench/slice_layout.py [--k 2048] [--n 2048] [--cols 16 32 64 256] [--json FILE]

A weight-streaming GEMM gives each SM the columns [c0, c0 + C) of a row-major [K, N] fp32 weight: K pieces
of 4 C bytes, 4 N bytes apart (``strided``). Stored column-blocked instead (each slice's K x C values
contiguous), the same SM reads one run of 4 K C bytes (``blocked``). The matrix is 16 N columns wide (a
vocabulary projection's width at the default N), so its slices outnumber the SMs; each of 132 blocks of 512
threads reads slices in turn with 16-byte loads, 8 in flight a thread, and sums them (so nothing is
optimized away). Four such matrices (1 GB) are read in turn, so none stays in L2. Prints GB/s per layout
and slice width (best of 20 after 3 warm-ups, cupy events) and writes --json.
"""

from __future__ import annotations

import argparse
import json

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(512) read_slices(const float4* __restrict__ w, float* out, long long K,
                                                              long long N4, long long C4, int blocked) {
  // Block b reads columns [b C4, (b + 1) C4) (in float4s) of the [K, N4] matrix: element (k, c) of its slice
  // is at k N4 + b C4 + c when strided, b K C4 + k C4 + c when blocked.
  const long long n_slices = N4 / C4;
  float acc = 0.0f;
  for (long long s = blockIdx.x; s < n_slices; s += gridDim.x) {
    const long long total = K * C4;
    for (long long i0 = threadIdx.x; i0 < total; i0 += 8LL * blockDim.x) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const long long i = i0 + u * (long long)blockDim.x;
        const long long k = i / C4, c = i % C4;
        v[u] = i < total ? w[blocked ? s * K * C4 + i : k * N4 + s * C4 + c] : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
    }
  }
  if (acc == 12345.678f) out[0] = acc;  // never true for the data; keeps the loads
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--cols", type=int, nargs="*", default=[16, 32, 64, 256])
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    import cupy as cp

    fn = cp.RawKernel(KERNEL, "read_slices")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    mats = [cp.random.random(args.k * args.n * 16, dtype=cp.float32) for _ in range(4)]
    out = cp.zeros(1, cp.float32)
    nbytes = args.k * args.n * 4 * 16

    def timed(cols: int, blocked: int) -> float:
        c4 = cols // 4
        n4 = args.n * 16 // 4  # each matrix: K x 16 N floats, so one launch moves 16 x the nominal matrix
        start, end = cp.cuda.Event(), cp.cuda.Event()
        best = float("inf")
        for rep in range(23):
            m = mats[rep % len(mats)]
            start.record()
            fn((sms,), (512,), (m, out, cp.int64(args.k), cp.int64(n4), cp.int64(c4), cp.int32(blocked)))
            end.record()
            end.synchronize()
            if rep >= 3:
                best = min(best, cp.cuda.get_elapsed_time(start, end) * 1e-3)
        return nbytes / best / 1e9

    rows = []
    for cols in args.cols:
        rows.append({"cols": cols, "strided_GBps": round(timed(cols, 0)), "blocked_GBps": round(timed(cols, 1))})
    print(f"K = {args.k}, {16 * args.n} columns, {sms} blocks of 512 threads")
    print("cols | strided_GBps | blocked_GBps")
    for r in rows:
        print(f"{r['cols']} | {r['strided_GBps']} | {r['blocked_GBps']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"k": args.k, "n": 16 * args.n, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
