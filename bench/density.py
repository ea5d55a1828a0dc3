#!/usr/bin/env python3
"""Density: the largest cohort each system serves with no late beat in --runs consecutive runs.

    python3 bench/density.py PROFILE_DIR... [--beat-ms 32] [--beats 1000] [--runs 3] [--backend cuda]
                             [--peers graph batched] [--png density.png] [--json FILE]

PROFILE_DIR: one model compiled for several cohort sizes (`scripts/device_profiles.py` writes Silero's
``.device/vad-N``). Every system serves the same recorded frames on a fixed beat clock (wavec.serve.Server):
beat b starts at ``b * beat``, its frames go in then, its outputs are owed by the start of beat b+1. A
beat whose outputs are back after that is late. A cohort is *held* by a system when none of its --runs
runs has a late beat; the system's *density* is the largest cohort it holds among the sizes given (a lower
bound: sizes between two profiles are not tried). Sizes are tried smallest first, and a system stops at the
first size it does not hold (a larger cohort's beat is no shorter).

Systems: ``wavec`` on --backend (the persistent kernel, or the CPU interpreter, which only exercises this
harness); with torch and a GPU, the PyTorch peers on the same clock: ``graph`` (the batched step captured once
in a CUDA graph) and ``batched`` (eager, the whole cohort in one call), of bench/silero_peers.py for Silero
profiles (input ``input`` [576]) and of bench/builder_peers.py for the zoo's builder models (a profile of
model NAME_PRESET runs wavec.zoo's NAME:PRESET, the same weights). Frames: Silero's
`wavec.audio.cohort_schedule` (real speech, staggered joins that reset a slot), or seeded unit-normal frames
for other models; a large cohort's beats cycle through the first ones that fit
gpu_check.FRAME_BYTES_BUDGET (1 GiB) of host memory.

Prints a table (per size and system: late beats over all runs, beat latency p50 / p99 in us, the host's lag
p99 from a beat's start to its frames being handed over, the physical floor from the profile's report and the
p99 over it, held, and whether every run gave the same output bits) and each system's density; --png draws
speed (beat / p99 beat latency: above 1 the p99 beat is on time) against cohort size, one line per system with
its density marked, and the floor's speed; --json writes the rows. Beat latency is the Server's
``compute_us``: the time a beat had the backend.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SILERO_INPUT = ("input", [576])


def is_silero(profile) -> bool:
    return [(i["name"], i["shape"]) for i in profile.meta["inputs"]] == [SILERO_INPUT]


def workload(profile, beats: int):
    """(frames per input, as wavec.serve.Feed takes them; reset [beats, sessions]) for ``beats`` beats."""
    from gpu_check import distinct_beats
    from silero_peers import Beats

    from wavec.audio import cohort_schedule

    n = profile.sessions
    distinct = distinct_beats(beats, profile)
    cycle = np.arange(beats) % distinct
    if is_silero(profile):
        frames, reset = cohort_schedule(n, distinct, seed=100)
        return {SILERO_INPUT[0]: Beats(frames, cycle)}, reset[cycle]
    rng = np.random.default_rng(7)
    frames = {i["name"]: Beats(rng.standard_normal((distinct, n, *i["shape"]), np.float32), cycle)
              for i in profile.meta["inputs"]}
    reset = np.zeros((beats, n), bool)
    reset[0] = True
    return frames, reset


def torch_gpu() -> bool:
    """Whether torch imports and sees a CUDA GPU (the peers' needs)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def zoo_spec(model_name: str) -> str | None:
    """The wavec.zoo ``NAME:PRESET`` a builder profile was compiled from (its model is named NAME_PRESET),
    or None."""
    from wavec import zoo

    name, _, preset = model_name.rpartition("_")
    spec = f"{name}:{preset}"
    return spec if spec in zoo.names() else None


def client_outputs(profile) -> list[str]:
    """The outputs a client is owed each beat: all but the states' updates (all, if that leaves none)."""
    updates = {state.get("output") for state in profile.meta.get("states", [])}
    names = [spec["name"] for spec in profile.meta["outputs"]]
    return [n for n in names if n not in updates] or names


def serve_runs(profile, make_backend, frames, reset, beat_ms: float, runs: int) -> list:
    """--runs ServeResults of ``make_backend()`` serving the frames on a ``beat_ms`` clock. Every system sends
    back the same outputs each beat: those that are not a state's update (the state stays on the GPU, as
    the peers keep theirs)."""
    from wavec.serve import BeatClock, Feed, Server, SessionSchedule

    results = []
    for _ in range(runs):
        backend = make_backend()
        try:
            results.append(Server(profile, BeatClock(beat_ms * 1e3), backend, client_outputs(profile)).run(
                Feed(frames), SessionSchedule.from_reset(reset)))
        finally:
            backend.close()
    return results


def row_of(system: str, sessions: int, results: list, floor: float | None) -> dict:
    """One table row. ``lag_p99_us``: the host's share, from a beat's scheduled start to its frames being
    handed to the system (gathering them and, for a beat published ahead, waiting for the one before);
    ``floor_us``: the beat's physical floor at this size (the profile's report, harness.floor_us),
    and the p99 over it; ``identical_runs``: every run delivered the same output bits (the runs serve the
    same frames and resets); ``late_at``: the first 20 late beats as [run, beat]."""
    compute = np.concatenate([r.compute_us for r in results])
    lag = np.concatenate([r.published_us - r.start_us for r in results])
    late = int(sum(r.summary()["late_beats"] for r in results))
    p99 = round(float(np.percentile(compute, 99)), 1)
    return {"system": system, "sessions": sessions, "runs": len(results), "beats": int(len(compute)),
            "late_beats": late, "held": late == 0, "p50_us": round(float(np.percentile(compute, 50)), 1),
            "p99_us": p99, "max_us": round(float(compute.max()), 1),
            "lag_p99_us": round(float(np.percentile(lag, 99)), 1), "floor_us": floor,
            "p99_over_floor": round(p99 / floor, 1) if floor else None, "identical_runs": identical_runs(results),
            "late_at": [[run, int(b)] for run, r in enumerate(results) for b in np.flatnonzero(r.late)][:20]}


def identical_runs(results: list) -> bool:
    """Whether every run's outputs equal the first run's bit for bit (NaN, an idle slot, equals NaN)."""
    first = results[0].outputs
    return all(np.array_equal(r.outputs[name], first[name], equal_nan=True) for r in results[1:] for name in first)


def densities(rows: list[dict]) -> dict[str, int]:
    """Per system, the largest cohort held (0: none)."""
    out: dict[str, int] = {}
    for row in rows:
        out.setdefault(row["system"], 0)
        if row["held"]:
            out[row["system"]] = max(out[row["system"]], row["sessions"])
    return out


def draw(rows: list[dict], beat_ms: float, path: Path, what: str) -> None:
    """Speed (beat / p99 beat latency) against cohort size, one line per system, its density marked;
    ``what``: the model and backend, in the title. Writes exactly ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    held = densities(rows)
    for system in held:
        mine = sorted((r for r in rows if r["system"] == system), key=lambda r: r["sessions"])
        x = [r["sessions"] for r in mine]
        y = [beat_ms * 1e3 / r["p99_us"] for r in mine]
        line, = ax.plot(x, y, marker="o", label=f"{system}: density {held[system]:,}")
        # a size with late beats is hollow: its compute may fit the beat while the host's lag does not
        late = [(xi, yi) for xi, yi, r in zip(x, y, mine) if not r["held"]]
        if late:
            ax.plot(*zip(*late), linestyle="none", marker="o", markersize=9, markerfacecolor="white",
                    color=line.get_color())
        if held[system]:
            ax.plot([held[system]], [beat_ms * 1e3 / next(r["p99_us"] for r in mine if r["sessions"] == held[system])],
                    marker="*", markersize=16, color=line.get_color())
    floors = sorted({(r["sessions"], r["floor_us"]) for r in rows if r.get("floor_us")})
    if floors:  # the speed a beat at its physical floor would have: the ceiling of every system
        ax.plot([n for n, _ in floors], [beat_ms * 1e3 / f for _, f in floors], color="black", linestyle=":",
                label="physical floor (report)")
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cohort size (sessions)")
    ax.set_ylabel(f"speed: {beat_ms:g} ms beat / p99 beat latency")
    ax.set_title(f"Density ({what}):\nthe largest cohort with no late beat (star; hollow: late beats)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path, help="one model compiled for several cohort sizes")
    ap.add_argument("--beat-ms", type=float, default=32.0, help="beat period and deadline, ms (default 32)")
    ap.add_argument("--beats", type=int, default=1000, help="beats per run (default 1000)")
    ap.add_argument("--runs", type=int, default=3, help="consecutive runs a held cohort passes (default 3)")
    ap.add_argument("--backend", choices=("cuda", "interp"), default="cuda")
    ap.add_argument("--peers", nargs="*", choices=("graph", "batched"), default=["graph", "batched"],
                    help="PyTorch peers, for Silero and zoo profiles (default both; none: leave out)")
    ap.add_argument("--png", type=Path, help="write the chart here")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.beat_ms) and args.beat_ms > 0) or args.beats < 1 or args.runs < 1:
        sys.exit("bench/density.py: --beat-ms must be a finite number > 0, --beats and --runs >= 1")
    for flag, path in (("--json", args.json), ("--png", args.png)):  # before the run, not after it
        if path is not None and (path.is_dir() or not path.parent.is_dir()):
            sys.exit(f"bench/density.py: {flag} {path}: not a file in an existing folder")
    sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "bench")]
    from gpu_check import _import_wavec

    _import_wavec()
    from harness import floor_us

    import wavec
    from wavec.serve import open_backend

    missing = [str(p) for p in args.profiles if not (p / "profile.json").is_file()]
    if missing:
        sys.exit(f"bench/density.py: not a profile: {', '.join(missing)} (compile them with scripts/device_profiles.py)")
    profiles = sorted((wavec.load(p) for p in args.profiles), key=lambda p: p.sessions)
    models = sorted({str(p.meta.get("model")) for p in profiles})
    sizes = [p.sessions for p in profiles]
    if len(models) > 1 or len(set(sizes)) < len(sizes):
        sys.exit(f"bench/density.py: give one model at distinct cohort sizes; got models {models}, sizes {sizes}")
    systems = {"wavec": lambda profile: (lambda: open_backend(profile, args.backend))}
    zoo_model = zoo_spec(models[0])
    if args.peers and not is_silero(profiles[0]) and zoo_model is None:
        print(f"bench/density.py: no PyTorch peers for {models[0]} (they run Silero VAD and the zoo's builder "
              "models); wavec alone", file=sys.stderr)
    elif args.peers and not torch_gpu():
        print("bench/density.py: no PyTorch peers: torch with a CUDA GPU is not here; wavec alone", file=sys.stderr)
    elif args.peers and zoo_model is not None:
        from builder_peers import BuilderPeerBackend

        from wavec import zoo

        model = zoo.get(zoo_model)
        for peer in args.peers:
            systems[peer] = lambda profile, graph=peer == "graph": (
                lambda: BuilderPeerBackend(model, profile.sessions, graph, outputs=client_outputs(profile)))
    elif args.peers:
        from silero_peers import TorchPeerBackend, peer_network

        net = peer_network("cuda")
        for peer in args.peers:
            systems[peer] = lambda profile, graph=peer == "graph": (lambda: TorchPeerBackend(net, profile.sessions, graph))
    rows, stopped = [], set()

    def save() -> None:  # after every row: a run cut short by a time limit keeps what it measured
        if args.json:
            args.json.write_text(json.dumps({"model": models[0], "backend": args.backend, "beat_ms": args.beat_ms,
                                             "runs": args.runs, "beats": args.beats, "rows": rows,
                                             "density": densities(rows)}, indent=1))
        if args.png:
            draw(rows, args.beat_ms, args.png, f"{models[0]}, wavec on {args.backend}")

    for profile in profiles:
        frames, reset = workload(profile, args.beats)
        for system, backend_for in systems.items():
            if system in stopped:
                continue
            rows.append(row_of(system, profile.sessions,
                               serve_runs(profile, backend_for(profile), frames, reset, args.beat_ms, args.runs),
                               floor_us(profile)))
            print(json.dumps(rows[-1]), flush=True)
            save()
            if not rows[-1]["held"]:
                stopped.add(system)
    print(f"{models[0]}: beat {args.beat_ms:g} ms, {args.runs} runs x {args.beats} beats, wavec on {args.backend}")
    print("system | sessions | late beats | p50 us | p99 us | host lag p99 us | floor us | p99 / floor | held | "
          "identical runs")
    for r in rows:
        print(f"{r['system']} | {r['sessions']} | {r['late_beats']} | {r['p50_us']} | {r['p99_us']} | {r['lag_p99_us']} | "
              f"{r['floor_us']} | {r['p99_over_floor']} | {r['held']} | {r['identical_runs']}")
    print("density: " + ", ".join(f"{s} {n:,}" for s, n in densities(rows).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
