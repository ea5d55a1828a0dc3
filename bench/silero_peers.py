#!/usr/bin/env python3
"""Silero VAD beat latency: the wavec kernel against PyTorch peers, same frames, same precision (fp32).

    python3 bench/silero_peers.py [PROFILE_DIR...] [--beats 1000] [--warmup 100] [--runs 3]
                                  [--solo-beats 10] [--check-beats 50] [--json FILE]

PROFILE_DIR: Silero compiled for a cohort (default .device/vad-1 .device/vad-64 .device/vad-1024, made by
`python3 scripts/device_profiles.py`). For each, on the frames of wavec.audio.cohort_schedule (the shipped
speech, per-session offsets and noise, staggered joins and rejoins that reset a session's state):

- ``wavec``: the profile's persistent kernel (`--backend cuda`): host publishes beat b's frames, sees its
  outputs (mapped host memory);
- ``solo``: PyTorch eager, one session at a time (a request-serving stack's view: S calls per beat);
- ``batched``: PyTorch eager, the whole cohort in one call (frames copied into tensors allocated once);
- ``graph``: the batched call with the state reset, captured once in a CUDA graph and replayed per beat.
Both run through `TorchPeerBackend`, which bench/density.py also serves on a beat clock.

The peers run Silero's own TorchScript network from the same wheel (silero_vad.jit, its 16 kHz
``_model``, called with explicit state: ``out, state = net(x [S, 576], state [2, S, 128])``); a reset zeroes
the session's state first, as the kernel's reset flag does. A peer's beat is wall time from handing over the
frames (host to device copy) to having the outputs on the host, the deadline's view. Every variant runs
``--runs`` times ``--warmup`` + ``--beats`` beats; p50/p99/max are over all timed beats of all runs.
``solo`` runs 2 untimed and ``--solo-beats`` timed beats per run (S eager calls per beat), for cohorts up
to ``--solo-max-sessions`` (its beat is S calls of a one-session beat: 65,536 sessions would take minutes
per beat). Every run serves the same beats; a large cohort's beats cycle through the first of them that fit
gpu_check.FRAME_BYTES_BUDGET (1 GiB) of host memory (65,536 sessions: 151 MB a beat). Before timing, the outputs of
``--check-beats`` beats are compared: wavec against the batched peer (max abs, fp32 both; tolerance 1e-4).

Needs numpy, cuda-bindings, nvcc and torch (the GPU machine); not xDSL. Prints one table; --json writes the
rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-4
STATE_SHAPE = (2, 128)  # Silero's LSTM state per session: [2, S, 128]
SOLO_WARMUP = 2  # untimed beats of the one-session-at-a-time peer (S eager calls each: 1,024 sessions take ~0.5 s)


def peer_network(device: str):
    """Silero's 16 kHz TorchScript network (the jit wrapper's ``_model``): (x [S, 576], state) -> (out, state)."""
    import torch

    from wavec.models import silero_vad_jit_path

    torch.backends.cudnn.allow_tf32 = False  # fp32 as the kernel computes it (TF32 convolutions are the default)
    torch.backends.cuda.matmul.allow_tf32 = False
    wrapper = torch.jit.load(str(silero_vad_jit_path()), map_location=device)
    wrapper.eval()
    return wrapper._model


def torch_beats(net, frames: np.ndarray, reset: np.ndarray) -> np.ndarray:
    """The batched peer's outputs [beats, S, 1] over ``frames`` [beats, S, 576] (no timing)."""
    import torch

    state = torch.zeros(STATE_SHAPE[0], frames.shape[1], STATE_SHAPE[1], device="cuda")
    outs = []
    with torch.inference_mode():
        for b in range(len(frames)):
            state.mul_(torch.from_numpy(~reset[b]).cuda().float()[None, :, None])
            out, state = net(torch.from_numpy(frames[b]).cuda(), state)
            outs.append(out.cpu().numpy())
    return np.stack(outs)


class TorchPeerBackend:
    """The batched peer (``graph``: its step captured once in a CUDA graph and replayed) as a wavec.serve
    backend, synchronous like the interpreter: `publish` copies the frames and reset flags in, resets the
    flagged slots' state, runs the step and copies the output back; ``last_compute_us`` is that wall time,
    the deadline's view. bench/density.py serves it on a beat clock; time_peer here runs it flat out."""

    ahead = 0

    def __init__(self, net, sessions: int, graph: bool):
        import torch

        self.name = "graph" if graph else "batched"
        self.torch, self.net = torch, net
        self.x = torch.zeros(sessions, 576, device="cuda")
        self.keep = torch.ones(sessions, device="cuda")
        self.state = torch.zeros(STATE_SHAPE[0], sessions, STATE_SHAPE[1], device="cuda")
        self.x_host = torch.zeros(sessions, 576, pin_memory=True)
        self.out_host = torch.zeros(sessions, 1, pin_memory=True)
        self.staged = self.x_host.numpy()
        self.graph = self._capture() if graph else None
        self.last_compute_us = 0.0

    def _step(self):
        self.state.mul_(self.keep[None, :, None])
        out, new_state = self.net(self.x, self.state)
        self.state.copy_(new_state)
        return out

    def _capture(self):
        from builder_peers import capture_graph  # bench/ is on the path of every script that runs this

        graph, self.out = capture_graph(self.torch, self._step, 3, self.state.zero_)
        return graph

    def publish(self, frames: dict[str, np.ndarray], reset: np.ndarray) -> None:
        torch = self.torch
        t = time.perf_counter_ns()
        with torch.inference_mode():
            if frames["input"] is not self.staged:
                np.copyto(self.staged, frames["input"])
            self.x.copy_(self.x_host, non_blocking=True)
            self.keep.copy_(torch.from_numpy((~reset).astype(np.float32)), non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
                out = self.out
            else:
                out = self._step()
            self.out_host.copy_(out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
        self.last_compute_us = (time.perf_counter_ns() - t) / 1e3

    def input_buffers(self) -> dict[str, np.ndarray]:
        """The pinned host frame buffer `publish` copies to the GPU, as CudaSession.input_views for wavec."""
        return {"input": self.staged}

    def ready(self) -> bool:
        return True

    def collect(self, names=None) -> dict[str, np.ndarray]:
        """The speech probability only (``names`` None or ["output"]): the LSTM state stays on the GPU. A view of
        the pinned host output, valid until the next publish: the server stores it before publishing again (no
        beat is taken ahead)."""
        return {"output": self.out_host.numpy()}

    def close(self) -> None:
        pass


class Beats:
    """``values[beats[b]]`` for beat b: the timed beats as indices into fewer distinct beats (a sequence:
    ``len``, ``[b]`` and slices of beats)."""

    def __init__(self, values: np.ndarray, beats: np.ndarray):
        self.values, self.beats = values, beats
        self.shape = (len(beats), *values.shape[1:])

    def __len__(self) -> int:
        return len(self.beats)

    def __getitem__(self, b):
        if isinstance(b, slice):
            return Beats(self.values, self.beats[b])
        if isinstance(b, tuple):
            return self.values[(self.beats[b[0]], *b[1:])]
        return self.values[self.beats[b]]


def time_peer(net, frames, reset: np.ndarray, graph: bool) -> np.ndarray:
    """The batched peer's beat times (us) over ``frames`` [beats, S, 576], each beat as soon as the last.
    The frames are copied into the peer's pinned buffer before its clock starts, as wavec's are before
    its beat is published (CudaSession.latencies_us starts after its host-to-device copy; the peer's
    includes its own: 38 MB at 16,384 sessions)."""
    peer = TorchPeerBackend(net, frames.shape[1], graph)
    times = []
    for b in range(len(frames)):
        np.copyto(peer.staged, frames[b])
        peer.publish({"input": peer.staged}, reset[b])
        times.append(peer.last_compute_us)
    return np.array(times)


def time_solo(net, frames: np.ndarray, reset: np.ndarray) -> np.ndarray:
    import torch

    n = frames.shape[1]
    states = [torch.zeros(STATE_SHAPE[0], 1, STATE_SHAPE[1], device="cuda") for _ in range(n)]
    times = []
    with torch.inference_mode():
        for b in range(len(frames)):
            t = time.perf_counter_ns()
            for s in range(n):
                if reset[b, s]:
                    states[s].zero_()
                out, states[s] = net(torch.from_numpy(frames[b, s : s + 1]).cuda(), states[s])
                out.cpu()
            times.append((time.perf_counter_ns() - t) / 1e3)
    return np.array(times)


def time_wavec(profile, cubin, frames: np.ndarray, reset: np.ndarray) -> np.ndarray:
    from wavec.targets.cuda import runtime

    with runtime.CudaSession(profile, cubin=cubin) as session:
        for b in range(len(frames)):
            session.beat({"input": frames[b]}, reset[b])
        return np.array(session.latencies_us)


def measure(directory: Path, net, args) -> dict:
    from gpu_check import distinct_beats
    from harness import floor_us

    import wavec
    from wavec.audio import cohort_schedule
    from wavec.targets.cuda.build import build_cubin
    from wavec.targets.cuda.runtime import kernel_source

    profile = wavec.load(directory)
    n = profile.sessions
    cubin = build_cubin(kernel_source(profile))
    frames, reset = cohort_schedule(n, args.check_beats, seed=11)
    got = profile.run({"input": frames}, backend="cuda", reset=reset, cubin=cubin)["output"]
    row = {"profile": str(directory), "sessions": n, "tasks": int(len(profile.payloads)),
           "err_vs_torch": float(np.abs(got - torch_beats(net, frames, reset)).max())}
    total = args.warmup + args.beats
    distinct = distinct_beats(total, profile)
    frames, reset = cohort_schedule(n, distinct, seed=100)  # every run serves the same beats
    beats = np.arange(total) % distinct
    frames, reset = Beats(frames, beats), Beats(reset, beats)
    row["distinct_beats"] = distinct
    solo = slice(0, SOLO_WARMUP + args.solo_beats)
    timed = {"wavec": [], "batched": [], "graph": []} | ({"solo": []} if n <= args.solo_max_sessions else {})
    for _ in range(args.runs):
        timed["wavec"].append(time_wavec(profile, cubin, frames, reset)[args.warmup :])
        timed["batched"].append(time_peer(net, frames, reset, graph=False)[args.warmup :])
        timed["graph"].append(time_peer(net, frames, reset, graph=True)[args.warmup :])
        if "solo" in timed:
            timed["solo"].append(time_solo(net, frames[solo], reset[solo])[SOLO_WARMUP:])
    for name in ("solo",):
        row.update({f"{name}_p50": None, f"{name}_p99": None, f"{name}_max": None, f"{name}_beats": 0})
    for name, runs in timed.items():
        t = np.concatenate(runs)
        row[f"{name}_p50"] = round(float(np.percentile(t, 50)), 1)
        row[f"{name}_p99"] = round(float(np.percentile(t, 99)), 1)
        row[f"{name}_max"] = round(float(t.max()), 1)
        row[f"{name}_beats"] = int(len(t))
    best = min((k for k in ("batched", "graph", "solo") if row[f"{k}_p99"] is not None), key=lambda k: row[f"{k}_p99"])
    row["best_peer"] = best
    row["p99_over_best_peer"] = round(row["wavec_p99"] / row[f"{best}_p99"], 3)
    row["floor_us"] = floor_us(profile)
    row["wavec_p99_over_floor"] = round(row["wavec_p99"] / row["floor_us"], 1) if row["floor_us"] else None
    row["ok"] = row["err_vs_torch"] <= TOLERANCE
    return row


COLUMNS = ["sessions", "tasks", "wavec_p50", "wavec_p99", "wavec_max", "graph_p50", "graph_p99", "batched_p50",
           "batched_p99", "solo_p50", "solo_p99", "best_peer", "p99_over_best_peer", "floor_us", "wavec_p99_over_floor",
           "err_vs_torch", "ok"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="*", type=Path,
                    default=[ROOT / ".device" / f"vad-{n}" for n in (1, 64, 1024)], help="Silero profile folders")
    ap.add_argument("--beats", type=int, default=1000, help="timed beats per run (default 1000)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed beats first (default 100)")
    ap.add_argument("--runs", type=int, default=3, help="runs per variant (default 3)")
    ap.add_argument("--solo-beats", type=int, default=10, help="timed beats per run of the one-session-at-a-time peer")
    ap.add_argument("--solo-max-sessions", type=int, default=1024,
                    help="largest cohort the one-session-at-a-time peer runs for (default 1024)")
    ap.add_argument("--check-beats", type=int, default=50, help="beats compared between wavec and PyTorch")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import _import_wavec

    _import_wavec()
    from wavec.targets.cuda import runtime

    missing = [str(p) for p in args.profiles if not (p / "profile.json").is_file()]
    if missing:
        sys.exit(f"bench/silero_peers.py: not a profile: {', '.join(missing)} (compile them with scripts/device_profiles.py)")
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("bench/silero_peers.py: needs torch for the peers (the GPU machine has it)")
    if not runtime.gpu_available():
        sys.exit("bench/silero_peers.py: needs a CUDA GPU with cuda-bindings")
    net = peer_network("cuda")
    rows = []
    for directory in args.profiles:
        rows.append(measure(directory, net, args))
        print(json.dumps(rows[-1]), flush=True)
    print(" | ".join(COLUMNS))
    for row in rows:
        print(" | ".join(f"{row[c]:.1e}" if c.startswith("err") else "-" if row[c] is None else str(row[c]) for c in COLUMNS))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
