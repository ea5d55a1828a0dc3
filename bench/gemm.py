#!/usr/bin/env python3
"""Weight-streaming GEMM: the kernel's MATMUL bodies against PyTorch (cuBLAS), the floor and the measured HBM bandwidth.

    python3 bench/gemm.py compile [--out .device/gemm] [--sessions 1 8 64 256] [--layers 8] [--dim 2048] [--dtype bf16]
    python3 bench/gemm.py run [--out .device/gemm] [--beats 300] [--warmup 30] [--set NAME=VALUE]... [--json FILE]

The model: ``layers`` bias-free fp32 linears chained (x <- x W_l, W_l dim x dim, seeded uniform weights of
variance 1/dim, rounded to bfloat16 with ``--dtype bf16``), one ``dim`` frame per session per beat; every weight byte is read once per beat. ``compile``
needs xDSL (run it here; carry --out to the GPU machine). ``run`` needs numpy, cuda-bindings, nvcc and torch:
for each cohort size it checks the kernel's outputs against a float64 numpy chain on fresh random frames, then
times ``--beats`` beats of

- ``wavec``: the profile's kernel as compiled: the tiled GEMM (kTiledGemm) takes tiles of 64 rows and more,
  the weight-streaming GEMM (kStreamGemm) the others;
- ``stream``: the same kernel with ``kTiledGemm = false`` (the streaming GEMM for every tile);
- ``lane``: with both off (the lane-group MATMUL body for every tile);
  (``--set``: a constexpr switch of all three, as gpu_check.py --set, e.g. ``kSvDepth=8``; each variant's own
  switches are set after it, so ``--set`` cannot turn a variant into another)
- ``eager`` / ``graph``: PyTorch fp32 (TF32 off) on the same weights and frames, the whole cohort batched
  ([S, dim] @ [dim, dim] per layer, cuBLAS), eager and replayed as one CUDA graph; wall time per beat
  including the host's synchronize, as a beat's deadline sees it.

``floor_us`` is the weight bytes over 4.2 TB/s (device copy bandwidth measured on this H200), ``wavec_GBps``
the weight bytes over wavec's p50 beat, and ``of_hbm`` that over the HBM read bandwidth measured in the same
run (``hbm_read_GBps``: PyTorch summing a 2 GiB fp32 tensor, best of 20). Prints one table; --json writes the
rows.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HBM_BYTES_PER_S = 4.2e12  # device copy, measured on the H200 the benchmarks run on
TOLERANCE = 1e-4  # fp32: max |got - ref| / (1 + max |ref|) against the float64 chain


def linear_stack(layers: int, dim: int, dtype: str = "fp32"):
    """The benchmark model: ``layers`` chained bias-free linears of ``dim`` x ``dim``, weights of ``dtype``."""
    from wavec.frontends.builder import Model

    m = Model(f"linear_stack_{layers}x{dim}" + ("" if dtype == "fp32" else f"_{dtype}"), seed=7)
    x = m.input("x", [dim])
    for i in range(layers):
        x = m.matmul(x, m.weight(f"w{i}", [dim, dim], dtype, scale=(3.0 / dim) ** 0.5))
    m.output("y", x)
    return m


def compile_profiles(args) -> None:
    from wavec.driver import compile_graph
    from wavec.frontends.builder.lower import lower_model

    for s in args.sessions:
        t0 = time.perf_counter()
        profile = compile_graph(lower_model(linear_stack(args.layers, args.dim, args.dtype)), sessions=s)
        profile.save(args.out / f"gemm-{s}")
        print(f"gemm-{s}: {len(profile.payloads)} tasks, {time.perf_counter() - t0:.1f} s", flush=True)


def stack_weights(profile) -> list[np.ndarray]:
    """The layers' weight matrices, as the device generates them (wavec.weights)."""
    from wavec.weights import from_spec

    specs = {spec["name"]: spec for spec in profile.generated_weights}
    n = int(np.sqrt(specs["w0"]["elems"]))
    return [from_spec(specs[f"w{i}"]).materialize().reshape(n, n) for i in range(len(specs))]


def time_cuda(profile, cubin, frames: np.ndarray, warmup: int) -> np.ndarray:
    from wavec.targets.cuda import runtime

    reset = np.zeros(profile.sessions, bool)
    with runtime.CudaSession(profile, cubin=cubin) as session:
        for b in range(len(frames)):
            session.beat({"x": frames[b]}, reset if b else ~reset)
        return np.array(session.latencies_us[warmup:])


def time_torch(weights: list[np.ndarray], frames: np.ndarray, warmup: int) -> dict[str, np.ndarray]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    ws = [torch.from_numpy(w).cuda() for w in weights]
    x_static = torch.from_numpy(frames[0]).cuda()

    def chain(x):
        for w in ws:
            x = x @ w
        return x

    out = {}
    times = []
    for b in range(len(frames)):
        x = torch.from_numpy(frames[b]).cuda(non_blocking=True)
        t = time.perf_counter_ns()
        chain(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t) / 1e3)
    out["eager"] = np.array(times[warmup:])
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        chain(x_static)  # warm cuBLAS' workspace on the capture stream
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = chain(x_static)
    times = []
    for b in range(len(frames)):
        x_static.copy_(torch.from_numpy(frames[b]).cuda())
        t = time.perf_counter_ns()
        graph.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t) / 1e3)
    out["graph"] = np.array(times[warmup:])
    ref = frames[-1].astype(np.float64)
    for w in weights:
        ref = ref @ w.astype(np.float64)
    out["torch_err"] = float(np.max(np.abs(y_static.cpu().numpy() - ref)) / (1 + np.max(np.abs(ref))))
    return out


VARIANTS = {"wavec": [], "stream": ["kTiledGemm=false"], "lane": ["kTiledGemm=false", "kStreamGemm=false"]}


def variant_source(codegen, kernel: str, settings: list[str]) -> str:
    for setting in settings:
        kernel = codegen.with_constant(kernel, *setting.split("=", 1))
    return kernel


def hbm_read_gbps() -> float:
    """GB/s of the best of 20 sums of a 2 GiB fp32 tensor (reads it once each), timed with CUDA events."""
    import torch

    x = torch.ones(1 << 29, device="cuda")
    best = float("inf")
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x.sum()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    gbps = x.numel() * 4 / best / 1e9
    del x
    torch.cuda.empty_cache()
    return gbps


def run_profiles(args) -> list[dict]:
    from harness import profiles_to_run

    profiles = [profile for _, profile in profiles_to_run(args, "gemm")]  # first: it maps `wavec`
    from wavec.targets.cuda import codegen, runtime
    from wavec.targets.cuda.build import build_cubin

    kernels = [runtime.kernel_source(p) for p in profiles]
    try:
        sources = [variant_source(codegen, kernel, args.set + settings) for kernel in kernels
                   for settings in VARIANTS.values()]
    except ValueError as e:  # a --set name the kernel does not have
        sys.exit(f"bench/gemm.py: --set: {e}")
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # nvcc is single-threaded
        built = list(pool.map(build_cubin, sources))
    hbm = hbm_read_gbps()
    rows = []
    for i, profile in enumerate(profiles):
        weights = stack_weights(profile)
        wbytes = sum(w.nbytes for w in weights)
        cubins = dict(zip(VARIANTS, built[len(VARIANTS) * i:len(VARIANTS) * (i + 1)]))
        rng = np.random.default_rng(int(time.time()))
        check = rng.normal(size=(2, profile.sessions, weights[0].shape[0])).astype(np.float32)
        ref = check.astype(np.float64)
        for w in weights:
            ref = ref @ w.astype(np.float64)
        row = {"sessions": profile.sessions, "tasks": len(profile.payloads), "weight_MB": round(wbytes / 1e6, 1)}
        for name, cubin in cubins.items():
            got = runtime.run_beats(profile, {"x": check}, np.ones((2, profile.sessions), bool), cubin=cubin)["y"]
            row[f"{name}_err"] = float(np.max(np.abs(got - ref)) / (1 + np.max(np.abs(ref))))
        frames = rng.normal(size=(args.warmup + args.beats, profile.sessions, weights[0].shape[0])).astype(np.float32)
        lat = {name: time_cuda(profile, cubin, frames, args.warmup) for name, cubin in cubins.items()}
        lat.update(time_torch(weights, frames, args.warmup))
        row["torch_err"] = lat.pop("torch_err")
        for name, t in lat.items():
            row[f"{name}_p50"] = round(float(np.percentile(t, 50)), 1)
            row[f"{name}_p99"] = round(float(np.percentile(t, 99)), 1)
        row["floor_us"] = round(wbytes / HBM_BYTES_PER_S * 1e6, 1)
        row["wavec_GBps"] = round(wbytes / row["wavec_p50"] / 1e3, 0)
        row["hbm_read_GBps"] = round(hbm, 0)
        row["of_hbm"] = round(row["wavec_GBps"] / hbm, 2)
        row["best_peer_p50"] = min(row["eager_p50"], row["graph_p50"])
        row["wavec_over_peer"] = round(row["wavec_p50"] / row["best_peer_p50"], 2)
        row["ok"] = max(row[f"{name}_err"] for name in VARIANTS) <= TOLERANCE
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


COLUMNS = ["sessions", "tasks", "weight_MB", "wavec_p50", "wavec_p99", "stream_p50", "lane_p50", "eager_p50", "graph_p50",
           "floor_us", "wavec_GBps", "hbm_read_GBps", "of_hbm", "wavec_over_peer", "wavec_err", "stream_err", "lane_err", "torch_err", "ok"]


def main(argv: list[str] | None = None) -> int:
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "scripts")]
    from gpu_check import constant_setting
    from harness import bench_parser, compile_or_run

    ap = bench_parser(__doc__, "gemm", beats=300, warmup=30)
    ap.add_argument("--sessions", type=int, nargs="*", default=[1, 8, 64, 256], help="cohort sizes to compile (default 1 8 64 256)")
    ap.add_argument("--layers", type=int, default=8, help="chained linears (default 8)")
    ap.add_argument("--dim", type=int, default=2048, help="their size, dim x dim (default 2048)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="the weights' values: fp32, or rounded to bfloat16 (computed as fp32; default fp32)")
    ap.add_argument("--set", type=constant_setting, action="append", default=[], metavar="NAME=VALUE",
                    help="run the kernels with this constexpr switch set (gpu_check.py --set)")
    return compile_or_run(ap.parse_args(argv), compile_profiles, run_profiles, COLUMNS)


if __name__ == "__main__":
    sys.exit(main())
