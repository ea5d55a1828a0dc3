#!/usr/bin/env python3
"""Operator bodies alone: norms, softmax, fused LSTM/GRU cells and attention over a ring cache, each a one-op
builder model, the kernel against PyTorch eager and CUDA graphs (bench/builder_peers.py) and the floor.

    python3 bench/bodies.py compile [--out .device/bodies] [--sessions 64 1024 4096] [--bodies NAME ...]
    python3 bench/bodies.py run [--out .device/bodies] [--beats 200] [--warmup 20] [--json FILE]

BODIES holds the models (one session's shapes; weights seeded). ``compile`` needs xDSL (run it here; carry
--out to the GPU machine). ``run`` needs numpy, cuda-bindings, nvcc and torch: for each profile it checks the
kernel against the float64 reference (frontends/builder/reference.py) on the first CHECKED sessions over
CHECK_BEATS beats of fresh unit-normal frames (max |got - ref| / (1 + max |ref|) <= TOLERANCE), then times
``--beats`` beats of

- ``wavec``: the profile's persistent kernel (`CudaSession` beat latency: publish to output epoch);
- ``eager`` / ``graph``: the same model and weights batched over the cohort in PyTorch fp32 (TF32 off),
  eager and as one CUDA graph (`BuilderPeerBackend`: frames staged in pinned memory before the clock starts,
  then copy in, step, outputs back).

``floor_us`` is the profile's physical floor (its report); ``over_best_peer`` wavec's p50 over the faster
peer's. Prints one table; --json writes the rows.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-4
CHECKED, CHECK_BEATS = 4, 3


def layer_norm(m):
    m.output("y", m.layer_norm(m.input("x", (1024,)), m.weight("g", (1024,)), m.weight("b", (1024,))))


def rms_norm(m):
    m.output("y", m.rms_norm(m.input("x", (1024,)), m.weight("g", (1024,))))


def softmax(m):
    m.output("y", m.softmax(m.input("x", (8, 256)), -1))


def lstm_cell(m):
    h, c = m.state("h", (256,)), m.state("c", (256,))
    h2, c2 = m.lstm_cell(m.input("x", (256,)), h, c, m.weight("w", (256, 1024)), m.weight("r", (256, 1024)),
                         m.weight("b", (1024,)))
    m.state_write("h", h2)
    m.state_write("c", c2)
    m.output("y", h2)


def gru_cell(m):
    h = m.state("h", (256,))
    h2 = m.gru_cell(m.input("x", (256,)), h, m.weight("w", (256, 768)), m.weight("r", (256, 768)),
                    m.weight("bw", (768,)), m.weight("br", (768,)))
    m.state_write("h", h2)
    m.output("y", h2)


def attention(m):
    """A decoder step over a 256-slot ring cache, 8 query heads over 2 kv heads of 64."""
    pos = m.beat()
    k = m.ring_write(m.state("k", (256, 2, 64)), m.input("k_new", (2, 64)), pos)
    v = m.ring_write(m.state("v", (256, 2, 64)), m.input("v_new", (2, 64)), pos)
    m.state_write("k", k)
    m.state_write("v", v)
    m.output("y", m.attention(m.input("q", (8, 64)), k, v, pos))


BODIES = {f.__name__: f for f in (layer_norm, rms_norm, softmax, lstm_cell, gru_cell, attention)}


def body_model(name: str):
    from wavec.frontends.builder.model import Model

    model = Model(f"body_{name}")
    BODIES[name](model)
    model.finish()
    return model


def compile_profiles(args) -> None:
    from wavec.driver import compile_graph
    from wavec.frontends.builder.lower import lower_model

    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.bodies:
        for s in args.sessions:
            t0 = time.perf_counter()
            profile = compile_graph(lower_model(body_model(name)), sessions=s)
            profile.save(args.out / f"{name}-{s}")
            print(f"{name}-{s}: {len(profile.payloads)} tasks, {time.perf_counter() - t0:.1f} s", flush=True)


def frames_for(model, beats: int, sessions: int, rng) -> dict[str, np.ndarray]:
    return {n: rng.standard_normal((beats, sessions, *d.shape)).astype(np.float32) for n, d in model.inputs.items()}


def check_error(model, profile, rng, **run_options) -> float:
    """The profile's max error (`Profile.run` with ``run_options``: the backend, its cubin) against the
    float64 reference over the first CHECKED sessions (sessions are independent; the reference runs one at a
    time), over CHECK_BEATS beats of fresh unit-normal frames."""
    from wavec.frontends.builder.reference import Reference

    frames = frames_for(model, CHECK_BEATS, profile.sessions, rng)
    reset = np.zeros((CHECK_BEATS, profile.sessions), bool)
    reset[0] = True
    got = profile.run(frames, reset=reset, **run_options)
    n = min(CHECKED, profile.sessions)
    want = Reference(model).run({k: v[:, :n] for k, v in frames.items()}, reset[:, :n])
    return max(float(np.abs(got[o][:, :n] - w).max() / (1 + np.abs(w).max())) for o, w in want.items())


def time_systems(model, profile, cubin, beats: int, warmup: int, rng) -> dict[str, np.ndarray]:
    from builder_peers import BuilderPeerBackend

    from wavec.targets.cuda import runtime

    frames = frames_for(model, warmup + beats, profile.sessions, rng)
    no_reset = np.zeros(profile.sessions, bool)
    times = {}
    with runtime.CudaSession(profile, cubin=cubin) as session:
        for b in range(warmup + beats):
            session.beat({k: v[b] for k, v in frames.items()}, no_reset)
        times["wavec"] = np.array(session.latencies_us[warmup:])
    for system in ("eager", "graph"):
        peer = BuilderPeerBackend(model, profile.sessions, graph=system == "graph")
        staged = peer.input_buffers()
        beat_us = []
        for b in range(warmup + beats):
            for k, v in frames.items():
                staged[k][...] = v[b]
            peer.publish(staged, no_reset)
            beat_us.append(peer.last_compute_us)
        times[system] = np.array(beat_us[warmup:])
    return times


def run_profiles(args) -> list[dict]:
    from gpu_check import kernel_for
    from harness import floor_us, profiles_to_run

    profiles = profiles_to_run(args, "bodies")  # first: it maps the checkout's packages under `wavec`
    from wavec.targets.cuda.build import build_cubin

    rows = []
    for name, profile in profiles:
        model = body_model(name)
        cubin = build_cubin(kernel_for(profile, False))
        rng = np.random.default_rng(int(time.time()))
        row = {"body": name, "sessions": profile.sessions, "tasks": len(profile.payloads),
               "err": check_error(model, profile, rng, backend="cuda", cubin=cubin)}
        for system, t in time_systems(model, profile, cubin, args.beats, args.warmup, rng).items():
            row[f"{system}_p50"] = round(float(np.percentile(t, 50)), 1)
            row[f"{system}_p99"] = round(float(np.percentile(t, 99)), 1)
        row["floor_us"] = floor_us(profile)
        row["over_best_peer"] = round(row["wavec_p50"] / min(row["eager_p50"], row["graph_p50"]), 2)
        row["ok"] = row["err"] <= TOLERANCE
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


COLUMNS = ["body", "sessions", "tasks", "wavec_p50", "wavec_p99", "eager_p50", "graph_p50", "floor_us",
           "over_best_peer", "err", "ok"]


def main(argv: list[str] | None = None) -> int:
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "scripts")]
    from harness import bench_parser, compile_or_run

    ap = bench_parser(__doc__, "bodies", beats=200, warmup=20)
    ap.add_argument("--sessions", type=int, nargs="*", default=[64, 1024, 4096], help="cohort sizes to compile")
    ap.add_argument("--bodies", nargs="*", choices=list(BODIES), default=list(BODIES), help="bodies to compile")
    return compile_or_run(ap.parse_args(argv), compile_profiles, run_profiles, COLUMNS)


if __name__ == "__main__":
    sys.exit(main())
