"""What the operator micro-benchmarks (bench/conv.py, bench/gemm.py, bench/bodies.py) share: their
``compile | run`` commands and their table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_parser(doc: str, name: str, beats: int, warmup: int) -> argparse.ArgumentParser:
    """The options every micro-benchmark takes: the command, --out (default .device/NAME), --beats,
    --warmup and --json; each adds its own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["compile", "run"], help="compile the profiles (xDSL) or run them (GPU)")
    ap.add_argument("--out", type=Path, default=ROOT / ".device" / name, help=f"profile folder (default .device/{name})")
    ap.add_argument("--beats", type=int, default=beats, help=f"timed beats per system (default {beats})")
    ap.add_argument("--warmup", type=int, default=warmup, help=f"untimed beats first (default {warmup})")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    return ap


def compile_or_run(args, compile_profiles, run_profiles, columns: list[str]) -> int:
    """``compile``: writes the profiles (needs xDSL; 0). ``run``: measures them (needs the GPU), prints one
    table of ``columns`` (errors, the columns ending in ``err``, as 1.2e-07) and writes the rows to
    ``args.json`` when given; 0 when every row is ``ok``, else 1."""
    if args.command == "compile":
        compile_profiles(args)
        return 0
    rows = run_profiles(args)
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(f"{row[c]:.1e}" if c.endswith("err") else str(row[c]) for c in columns))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(row["ok"] for row in rows) else 1


def profiles_to_run(args, bench: str) -> list[tuple[str, object]]:
    """The ``NAME-SESSIONS`` profiles under ``args.out``, by name then cohort size, as (NAME, Profile), with
    the repository's packages importable as ``wavec`` (the GPU machine has no install). Exits with a
    message when there are none or no GPU."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import _import_wavec

    _import_wavec()
    from wavec.profile import load
    from wavec.targets.cuda import runtime

    paths = sorted((p for p in args.out.glob("*-*") if (p / "profile.json").is_file()),
                   key=lambda p: (p.name.rsplit("-", 1)[0], int(p.name.rsplit("-", 1)[1])))
    if not paths:
        sys.exit(f"bench/{bench}.py: no profiles under {args.out}; run `bench/{bench}.py compile --out {args.out}` first")
    if not runtime.gpu_available():
        sys.exit(f"bench/{bench}.py run: needs a CUDA GPU with cuda-bindings (and torch for the peers)")
    return [(p.name.rsplit("-", 1)[0], load(p)) for p in paths]


def floor_us(profile) -> float | None:
    """The beat's physical floor from the profile's report (wavec.report: the larger of the FLOPs at the
    target's peak fp32 rate, the bytes at its HBM bandwidth, and the chain of per-phase ideals), us."""
    floor = (profile.report.get("floor_us") or {}).get("beat")
    return round(float(floor), 2) if floor is not None else None
