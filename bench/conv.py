#!/usr/bin/env python3
"""Streaming conv1d: the kernel's CONV body on Silero VAD's five convolutions, against PyTorch (cuDNN) and the floor.

    python3 bench/conv.py compile [--out .device/conv] [--sessions 64 1024 16384] [--shapes stft enc1 ...]
    python3 bench/conv.py run [--out .device/conv] [--beats 200] [--warmup 20] [--set NAME=VALUE]... [--json FILE]

Each profile is one ONNX Conv (with bias) at one of Silero's shapes (SHAPES: the STFT, 1 -> 258 channels, 256
taps, stride 128 over 640 samples, and the four encoder convs), seeded weights, for one cohort size.
``compile`` needs xDSL (run it here; carry --out to the GPU machine). ``run`` needs numpy, cuda-bindings,
nvcc and torch: for each profile it checks the kernel's output against float64 PyTorch on fresh random
frames, then times ``--beats`` beats of

- ``wavec``: the profile's persistent kernel (``--set``: a constexpr switch of it, as gpu_check.py --set,
  e.g. kTiledGemm=false, the CONV without its tiled GEMM);
- ``eager`` / ``graph``: torch.nn.functional.conv1d fp32 (TF32 off, cuDNN) on the whole cohort, eager and
  replayed as a CUDA graph; wall time per beat including the host's synchronize.

``floor_us`` is the profile's physical floor from its report (wavec.report: FLOPs at the target's fp32 peak,
bytes at its HBM bandwidth, the chain of per-phase ideals); ``TFLOPs`` is the report's FLOPs a beat over the
p50 beat.
Prints one table; --json writes the rows.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# name: (c_in, c_out, length, kernel, stride, pad), Silero VAD 16 kHz's convolutions on a 576-sample frame
SHAPES = {
    "stft": (1, 258, 640, 256, 128, 0),
    "enc1": (129, 128, 4, 3, 1, 1),
    "enc2": (128, 64, 4, 3, 2, 1),
    "enc3": (64, 64, 2, 3, 2, 1),
    "enc4": (64, 128, 1, 3, 1, 1),
}
TOLERANCE = 1e-4  # fp32 against float64: max |got - ref| / (1 + max |ref|)


def out_length(length: int, kernel: int, stride: int, pad: int) -> int:
    return (length + 2 * pad - kernel) // stride + 1


def conv_model(shape: str):
    """The ONNX model of one conv: x [N, c_in, length] -> y [N, c_out, T], weights of variance 1/fan-in."""
    import onnx
    from onnx import TensorProto, helper

    c_in, c_out, length, kernel, stride, pad = SHAPES[shape]
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((c_out, c_in, kernel)) / np.sqrt(c_in * kernel)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    t = out_length(length, kernel, stride, pad)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride], pads=[pad, pad], kernel_shape=[kernel])
    graph = helper.make_graph(
        [node], f"conv_{shape}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c_in, length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c_out, t])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def compile_profiles(args) -> None:
    import onnx

    from wavec.driver import compile_graph
    from wavec.frontends.onnx import import_onnx

    args.out.mkdir(parents=True, exist_ok=True)
    for shape in args.shapes:
        model = conv_model(shape)
        onnx.save(model, args.out / f"{shape}.onnx")
        for s in args.sessions:
            t0 = time.perf_counter()
            profile = compile_graph(import_onnx(model), sessions=s)
            profile.save(args.out / f"{shape}-{s}")
            print(f"{shape}-{s}: {len(profile.payloads)} tasks, {time.perf_counter() - t0:.1f} s", flush=True)


def time_torch(model, frames: np.ndarray, warmup: int) -> tuple[dict[str, np.ndarray], "object"]:
    """Eager and CUDA-graph beat times (us) of conv1d over ``frames`` [beats, S, c_in, L], and the last output."""
    import onnx.numpy_helper as nh
    import torch

    torch.backends.cudnn.allow_tf32 = False
    inits = {t.name: torch.from_numpy(nh.to_array(t).copy()).cuda() for t in model.graph.initializer}
    attrs = {a.name: list(a.ints) for a in model.graph.node[0].attribute}
    stride, pad = attrs["strides"][0], attrs["pads"][0]

    def conv(x):
        return torch.nn.functional.conv1d(x, inits["w"], inits["b"], stride=stride, padding=pad)

    host = torch.from_numpy(frames[0]).pin_memory()
    x = host.cuda()
    times = {"eager": [], "graph": []}
    for b in range(len(frames)):
        host.copy_(torch.from_numpy(frames[b]))
        t = time.perf_counter_ns()
        x.copy_(host, non_blocking=True)
        conv(x)
        torch.cuda.synchronize()
        times["eager"].append((time.perf_counter_ns() - t) / 1e3)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        conv(x)  # cuDNN picks its algorithm before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = conv(x)
    for b in range(len(frames)):
        host.copy_(torch.from_numpy(frames[b]))
        t = time.perf_counter_ns()
        x.copy_(host, non_blocking=True)
        graph.replay()
        torch.cuda.synchronize()
        times["graph"].append((time.perf_counter_ns() - t) / 1e3)
    return {k: np.array(v[warmup:]) for k, v in times.items()}, y


def reference(model, frames: np.ndarray) -> np.ndarray:
    """float64 conv1d of ``frames`` [beats, S, c_in, L] (PyTorch on the CPU)."""
    import onnx.numpy_helper as nh
    import torch

    inits = {t.name: torch.from_numpy(nh.to_array(t).astype(np.float64)) for t in model.graph.initializer}
    attrs = {a.name: list(a.ints) for a in model.graph.node[0].attribute}
    x = torch.from_numpy(frames.reshape(-1, *frames.shape[2:]).astype(np.float64))
    y = torch.nn.functional.conv1d(x, inits["w"], inits["b"], stride=attrs["strides"][0], padding=attrs["pads"][0])
    return y.numpy().reshape(*frames.shape[:2], *y.shape[1:])


def run_profiles(args) -> list[dict]:
    import onnx
    from gpu_check import kernel_for
    from harness import floor_us, profiles_to_run

    profiles = profiles_to_run(args, "conv")  # first: it maps the checkout's packages under `wavec`
    from wavec.targets.cuda import runtime
    from wavec.targets.cuda.build import build_cubin

    rows = []
    for shape, profile in profiles:
        model = onnx.load(args.out / f"{shape}.onnx")
        try:
            cubin = build_cubin(kernel_for(profile, False, constants=args.set))
        except ValueError as e:  # a --set name the kernel does not have
            sys.exit(f"bench/conv.py: --set: {e}")
        rng = np.random.default_rng(int(time.time()))
        c_in, length = SHAPES[shape][0], SHAPES[shape][2]
        check = rng.standard_normal((2, profile.sessions, c_in, length)).astype(np.float32)
        want = reference(model, check)
        got = runtime.run_beats(profile, {"x": check}, np.ones((2, profile.sessions), bool), cubin=cubin)["y"]
        row = {"shape": shape, "sessions": profile.sessions, "tasks": len(profile.payloads),
               "err": float(np.max(np.abs(got - want)) / (1 + np.max(np.abs(want))))}
        frames = rng.standard_normal((args.warmup + args.beats, profile.sessions, c_in, length)).astype(np.float32)
        latencies: list[float] = []
        runtime.run_beats(profile, {"x": frames}, np.zeros((len(frames), profile.sessions), bool), cubin=cubin,
                          latencies=latencies)
        timed = {"wavec": np.array(latencies[args.warmup:])}
        peers, y = time_torch(model, frames, args.warmup)
        timed.update(peers)
        row["torch_err"] = float(np.max(np.abs(y.cpu().numpy() - reference(model, frames[-1:])[0]))
                                 / (1 + np.max(np.abs(want))))
        for name, t in timed.items():
            row[f"{name}_p50"] = round(float(np.percentile(t, 50)), 1)
            row[f"{name}_p99"] = round(float(np.percentile(t, 99)), 1)
        row["floor_us"] = floor_us(profile)
        row["TFLOPs"] = round(profile.report["flops_per_beat"] / row["wavec_p50"] / 1e6, 2)
        row["over_best_peer"] = round(row["wavec_p50"] / min(row["eager_p50"], row["graph_p50"]), 2)
        row["ok"] = row["err"] <= TOLERANCE
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


COLUMNS = ["shape", "sessions", "tasks", "wavec_p50", "wavec_p99", "eager_p50", "graph_p50", "floor_us", "TFLOPs",
           "over_best_peer", "err", "torch_err", "ok"]


def main(argv: list[str] | None = None) -> int:
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "scripts")]
    from harness import bench_parser, compile_or_run
    from gpu_check import constant_setting

    ap = bench_parser(__doc__, "conv", beats=200, warmup=20)
    ap.add_argument("--sessions", type=int, nargs="*", default=[64, 1024, 16384], help="cohort sizes to compile")
    ap.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES), help="Silero's convs to compile")
    ap.add_argument("--set", type=constant_setting, action="append", default=[], metavar="NAME=VALUE",
                    help="run the kernel with this constexpr switch set (gpu_check.py --set)")
    return compile_or_run(ap.parse_args(argv), compile_profiles, run_profiles, COLUMNS)


if __name__ == "__main__":
    sys.exit(main())
