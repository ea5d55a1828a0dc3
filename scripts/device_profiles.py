#!/usr/bin/env python3
"""Compiles the profiles the GPU machine checks (it has no xDSL, so they are built here and carried).

    python3 scripts/device_profiles.py [--out .device] [--sessions 1 64 1024] [--barrier-sessions 1 64 1024]
                                       [--zoo-sessions 8] [--threads T ...] [--only-threads] [--duplex-sessions N ...]
                                       [--duplex-preset 1b|11b] [--task-costs DIR]

Writes, under --out:
- ``vad-N``: Silero VAD for N sessions, the default pipeline (tile-level dependencies); with ``--task-costs DIR``,
  scheduled by the measured costs of DIR/vad-N.json (a timeline of a vad-N of the same pipeline, traced by
  `scripts/silero_gpu.py --timeline-dir DIR`);
- ``bar-N``: the same with ``wpk-schedule{granularity=phase}`` (a barrier per op), the baseline;
- ``zoo-NAME``: every zoo model at its ``tiny`` preset for --zoo-sessions sessions (generated weights; 0: none);
- ``serve-gru_stack-4``: gru_stack:tiny for 4 sessions on 4 workers, the profile tests/test_serve.py serves;
- ``conv-NAME``: the 1-D convolutions of CONV_CASES (stride, padding, dilation, no bias, a residual epilogue,
  tiles the tiled GEMM does not take beside those it does, taps its copies move 16 bytes at a time) and
  ``conv-rank2`` (a builder conv1d without a batch axis, a residual epilogue of rank 2), at cohorts that cut them for the tiled GEMM
  (wave-to-wpk's tiled_conv_split), for scripts/gpu_check.py to hold against the interpreter;
- ``vad-N-fF``: with ``--min-tile-flops F ...``, Silero VAD for N sessions tiled down to F FLOPs per session;
- ``duplexP-N``: with ``--duplex-sessions N ...``, duplex:P for N sessions, P the --duplex-preset (default 1b;
  bench/density.py runs it against bench/builder_peers.py);
- ``vad-N-tT``: with ``--threads T ...``, Silero VAD for N sessions with T threads per persistent block
  (the H200 target with ``threads_per_block: T``; the default profiles use the target's own).
Also copies the Silero ONNX and TorchScript files there (the GPU machine reaches no registry; set WAVEC_CACHE to
--out).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def silero_graph():
    from wavec.frontends.onnx import import_onnx
    from wavec.models import silero_vad_path

    return import_onnx(silero_vad_path(), bindings={"sr": 16000}, frames={"input": 576}, states=[("state", "stateN")])


def pipeline_with(sessions: int, pass_name: str, option: str) -> str:
    """The default pipeline for the H200 with ``option`` (``name=value``) added to pass ``pass_name``."""
    from wavec.driver import default_pipeline
    from wavec.hw import load_hw

    spec = default_pipeline(sessions, int(load_hw("h200")["sm_count"]))
    assert f"{pass_name}{{" in spec, spec
    return spec.replace(f"{pass_name}{{", f"{pass_name}{{{option} ", 1)


def threads_target(out: Path, threads: int) -> Path:
    """The H200 target file with ``threads_per_block: threads``, written under ``out/hw``."""
    import yaml

    from wavec.hw import load_hw

    path = out / "hw" / f"h200-t{threads}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({**load_hw("h200"), "threads_per_block": threads}))
    return path


# name: (sessions, c_in, c_out, length, kernel, stride, pad, dilation, bias, residual): a Conv, then relu, or
# with `residual` tanh(conv + r), r a second per-session input (an epilogue with an extra input).
CONV_CASES = {
    "s2d1": (1024, 48, 96, 9, 3, 2, 1, 1, True, False),
    "s1d2": (257, 40, 211, 6, 3, 1, 2, 2, True, False),
    "s3k5": (1000, 33, 70, 17, 5, 3, 2, 1, False, False),
    "res": (1024, 64, 64, 4, 3, 1, 1, 1, True, True),
    "k1": (700, 128, 48, 2, 1, 1, 0, 1, True, True),
    "odd": (513, 29, 17, 11, 4, 2, 3, 2, True, False),
    "frames": (520, 3, 70, 64, 8, 4, 4, 1, True, True),  # taps in pieces of 4: the tiled CONV's 16-byte copies
}


def conv_model(c_in, c_out, length, kernel, stride, pad, dilation, bias, residual, seed):
    """A CONV_CASES model (ONNX, opset 17, batch 1), its weights drawn from N(0, 0.2) with ``seed``."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    steps = (length + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, length])]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, steps])
    inits = [helper.make_tensor("W", TensorProto.FLOAT, [c_out, c_in, kernel],
                                rng.normal(0, 0.2, c_out * c_in * kernel).astype(np.float32))]
    if bias:
        inits.append(helper.make_tensor("B", TensorProto.FLOAT, [c_out], rng.normal(0, 0.2, c_out).astype(np.float32)))
    nodes = [helper.make_node("Conv", ["x", "W", "B"][: 2 + bias], ["c"], strides=[stride], pads=[pad, pad],
                              dilations=[dilation])]
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, c_out, steps]))
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])]
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(nodes, "conv", inputs, [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_job(seed: int, case: tuple):
    from wavec.driver import compile_graph
    from wavec.frontends.onnx import import_onnx

    sessions, *shape = case
    return compile_graph(import_onnx(conv_model(*shape, seed=seed)), sessions=sessions)


def rank2_conv_model():
    """A builder conv1d over x [32, 8] (no batch axis: its epilogue's shape is [C, T], rank 2) plus a residual, whose
    tiles the tiled CONV takes at 256 sessions: its epilogue steps a channel along dim rank - 2."""
    from wavec.frontends.builder import Model

    m = Model("conv_rank2", seed=0)
    x, r = m.input("x", [32, 8]), m.input("r", [48, 8])
    m.output("y", m.add(m.conv1d(x, m.weight("w", [48, 32, 3], "fp32"), name="c"), r))
    return m


def default_jobs(sessions: list[int], barrier_sessions: list[int], zoo_sessions: int, task_costs: Path | None) -> list:
    from wavec import zoo
    from wavec.driver import compile_graph
    from wavec.frontends.builder.lower import lower_model

    jobs = []
    for n in sessions:
        costs = measured_costs(task_costs, f"vad-{n}")
        jobs.append((f"vad-{n}", lambda n=n, costs=costs: compile_graph(silero_graph(), sessions=n, task_costs=costs)))
    for n in barrier_sessions:
        jobs.append((f"bar-{n}", lambda n=n: compile_graph(silero_graph(), sessions=n, pipeline=pipeline_with(n, "wpk-schedule", "granularity=phase"))))
    for name in [n for n in zoo.names() if n.endswith(":tiny") and zoo_sessions > 0]:
        jobs.append((f"zoo-{name.split(':')[0]}", lambda name=name: compile_graph(lower_model(zoo.get(name)),
                                                                                 sessions=zoo_sessions)))
    jobs += [(f"conv-{name}", lambda seed=seed, case=case: conv_job(seed, case))
             for seed, (name, case) in enumerate(CONV_CASES.items())]
    jobs.append(("conv-rank2", lambda: compile_graph(rank2_conv_model().lower(), sessions=256)))
    jobs.append(("serve-gru_stack-4", lambda: compile_graph(lower_model(zoo.get("gru_stack:tiny")), sessions=4, workers=4)))
    return jobs


def measured_costs(directory: Path | None, name: str) -> Path | None:
    """``directory/NAME.json``, the timeline `scripts/silero_gpu.py --timeline-dir` wrote for profile NAME (its
    measured task costs), or None without --task-costs. Exits when the directory lacks it."""
    if directory is None:
        return None
    path = directory / f"{name}.json"
    if not path.is_file():
        sys.exit(f"device_profiles: --task-costs {directory}: no {path.name}; trace {name} first "
                 f"(scripts/silero_gpu.py .device/{name} --timeline-dir {directory})")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / ".device")
    ap.add_argument("--sessions", type=int, nargs="*", default=[1, 64, 1024])
    ap.add_argument("--barrier-sessions", type=int, nargs="*", default=[1, 64, 1024],
                    help="cohort sizes of the bar-N profiles (default 1 64 1024; none: leave them out)")
    ap.add_argument("--zoo-sessions", type=int, default=8, help="sessions of the zoo's profiles (0: none)")
    ap.add_argument("--threads", type=int, nargs="*", default=[], help="block sizes to build vad-N-tT for")
    ap.add_argument("--only-threads", action="store_true", help="build only the vad-N-tT and vad-N-fF profiles")
    ap.add_argument("--min-tile-flops", type=int, nargs="*", default=[],
                    help="wave-to-wpk min-tile-flops values to build vad-N-fF for")
    ap.add_argument("--duplex-sessions", type=int, nargs="*", default=[],
                    help="cohort sizes to build duplexP-N for (duplex:P, weights generated on the device; duplex:1b at "
                         "64 sessions: 23 s, 2.1 GB peak here, 39 MB of payloads)")
    ap.add_argument("--duplex-preset", choices=("1b", "11b"), default="1b",
                    help="the duplex preset --duplex-sessions builds (default 1b)")
    ap.add_argument("--task-costs", type=Path, metavar="DIR",
                    help="schedule each vad-N by the measured costs in DIR/vad-N.json (`scripts/silero_gpu.py "
                         "--timeline-dir DIR` on the GPU machine; wavec compile --task-costs)")
    args = ap.parse_args(argv)
    from wavec.driver import compile_graph
    from wavec.models import silero_vad_jit_path, silero_vad_path

    args.out.mkdir(parents=True, exist_ok=True)
    for model in (silero_vad_path(), silero_vad_jit_path()):  # the ONNX model and the PyTorch peers' network
        shutil.copy(model, args.out / Path(model).name)
    jobs = []
    for threads in args.threads:
        hw = threads_target(args.out, threads)
        jobs += [(f"vad-{n}-t{threads}", lambda n=n, hw=hw: compile_graph(silero_graph(), sessions=n, hw=str(hw)))
                 for n in args.sessions]
    for flops in args.min_tile_flops:
        jobs += [(f"vad-{n}-f{flops}", lambda n=n, flops=flops: compile_graph(
            silero_graph(), sessions=n, pipeline=pipeline_with(n, "wave-to-wpk", f"min-tile-flops={flops}")))
            for n in args.sessions]
    if args.duplex_sessions:
        from wavec import zoo
        from wavec.frontends.builder.lower import lower_model

        preset = args.duplex_preset
        jobs += [(f"duplex{preset}-{n}", lambda n=n: compile_graph(lower_model(zoo.get(f"duplex:{preset}")), sessions=n))
                 for n in args.duplex_sessions]
    if not args.only_threads:
        jobs += default_jobs(args.sessions, args.barrier_sessions, args.zoo_sessions, args.task_costs)
    for label, make in jobs:
        t0 = time.perf_counter()
        profile = make()
        profile.save(args.out / label)
        print(f"{label:>24}: {len(profile.payloads):7d} tasks  {time.perf_counter() - t0:6.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
