#!/usr/bin/env python3
"""The tensor cores' rate through mma.sync, the instruction every GEMM body of the kernel issues.

    python3 bench/mma_rate.py [--iters 4096] [--repeats 20] [--json FILE]

Runs one block of 512 threads (the H200 target's block) on every SM, each warp issuing ``--iters`` rounds of
8 independent mma.sync chains (8 accumulators, so the rate, not an instruction's latency, bounds it), of

- ``tf32``: m16n8k8 .tf32 with fp32 accumulators (the tiled and streaming GEMMs' 3xTF32 products);
- ``bf16``: m16n8k16 .bf16 with fp32 accumulators (for comparison: the same tensor cores at half the bits).

and prints, per kind: dense TFLOPS (2 m n k per mma, over the best of ``--repeats`` launches timed with CUDA
events), mma a clock per SM (at the device's reported clock), and the ratio to NVIDIA's dense datasheet
figure for H100/H200 SXM (TF32 494.7, BF16 989.4 TFLOPS: half the "with sparsity" figures of the H200
datasheet, which warpgroup MMA, wgmma, reaches and mma.sync need not). Needs numpy, cuda-bindings and nvcc.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 512
CHAINS = 8
DATASHEET_TFLOPS = {"tf32": 494.7, "bf16": 989.4}
FLOPS_PER_MMA = {"tf32": 2 * 16 * 8 * 8, "bf16": 2 * 16 * 8 * 16}

SOURCE = r"""
// CHAINS independent chains of one kind of mma.sync a warp; the operands' bits are arbitrary (the rate does not
// depend on them), and the sums are stored so nothing is optimized away.
// d += a b for one warp's fragments; SHAPE_TYPES names the instruction's shape and types.
#define MMA_SYNC(SHAPE_TYPES)                                                                              \
  asm volatile("mma.sync.aligned." SHAPE_TYPES " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"     \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
struct Tf32 {  // m16n8k8, tf32 operands
  static constexpr unsigned kMask = 0x3F7FE000u, kFlip = 0x2000u;
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    MMA_SYNC("m16n8k8.row.col.f32.tf32.tf32.f32");
  }
};
struct Bf16 {  // m16n8k16, bf16 pairs
  static constexpr unsigned kMask = 0x3F7F3F7Fu, kFlip = 0x10001u;
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    MMA_SYNC("m16n8k16.row.col.f32.bf16.bf16.f32");
  }
};

template <class Kind>
__device__ __forceinline__ void chains(float* out, int iters) {
  const unsigned a0 = threadIdx.x * 0x9E3779B1u & Kind::kMask, b0 = threadIdx.x * 0x85EBCA6Bu & Kind::kMask;
  const unsigned a[4] = {a0, a0 ^ Kind::kFlip, a0 ^ 2 * Kind::kFlip, a0 ^ 3 * Kind::kFlip}, b[2] = {b0, b0 ^ Kind::kFlip};
  float d[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) Kind::mma(d[j], a, b);
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < CHAINS; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) mma_tf32(float* out, int iters) { chains<Tf32>(out, iters); }
extern "C" __global__ void __launch_bounds__(THREADS, 1) mma_bf16(float* out, int iters) { chains<Bf16>(out, iters); }
""".replace("THREADS", str(THREADS)).replace("CHAINS", str(CHAINS))


def measure(iters: int, repeats: int) -> list[dict]:
    """One row per kind: the best of ``repeats`` timed launches on every SM (one untimed launch first)."""
    from wavec.targets.cuda.build import build_cubin
    from wavec.targets.cuda.runtime import check, driver

    cu = driver()
    check(cu.cuInit(0), "cuInit")
    dev = check(cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    attr = cu.CUdevice_attribute
    sms = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "SM count")
    clock_khz = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), "clock rate")
    module = check(cu.cuModuleLoadData(build_cubin(SOURCE).read_bytes()), "cuModuleLoadData")
    out = check(cu.cuMemAlloc(4 * sms * THREADS), "cuMemAlloc")
    start, stop = (check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    rows = []
    for kind in ("tf32", "bf16"):
        func = check(cu.cuModuleGetFunction(module, f"mma_{kind}".encode()), "cuModuleGetFunction")
        args = [ctypes.c_uint64(int(out)), ctypes.c_int(iters)]
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        best_ms = float("inf")
        for r in range(repeats + 1):
            check(cu.cuEventRecord(start, 0), "cuEventRecord")
            check(cu.cuLaunchKernel(func, sms, 1, 1, THREADS, 1, 1, 0, 0, ctypes.addressof(ptrs), 0), f"launch mma_{kind}")
            check(cu.cuEventRecord(stop, 0), "cuEventRecord")
            check(cu.cuEventSynchronize(stop), "cuEventSynchronize")
            if r:  # the first launch loads the module's code
                best_ms = min(best_ms, check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))
        mmas = sms * (THREADS // 32) * CHAINS * iters
        tflops = mmas * FLOPS_PER_MMA[kind] / (best_ms * 1e-3) / 1e12
        rows.append({"kind": kind, "sms": sms, "clock_mhz": clock_khz / 1e3, "best_ms": round(best_ms, 4),
                     "tflops": round(tflops, 1),
                     "mma_per_clock_per_sm": round(mmas / sms / (best_ms * 1e-3 * clock_khz * 1e3), 3),
                     "of_datasheet": round(tflops / DATASHEET_TFLOPS[kind], 3)})
    check(cu.cuMemFree(out), "cuMemFree")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=4096, help="rounds of CHAINS mma a warp (default 4096)")
    ap.add_argument("--repeats", type=int, default=20, help="timed launches; the best counts (default 20)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.repeats < 1:
        sys.exit("bench/mma_rate.py: --iters and --repeats must be >= 1")
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import _import_wavec

    _import_wavec()
    rows = measure(args.iters, args.repeats)
    print("kind | SMs | clock MHz | best ms | dense TFLOPS | mma / clock / SM | of datasheet")
    for r in rows:
        print(f"{r['kind']} | {r['sms']} | {r['clock_mhz']:.0f} | {r['best_ms']} | {r['tflops']} | "
              f"{r['mma_per_clock_per_sm']} | {r['of_datasheet']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
