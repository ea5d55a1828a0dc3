"""Hardware targets: YAML files naming a GPU's SM count, memory and peak rates, with their sources.

`load_hw("h200")` reads targets/hw/h200.yaml from the package; a path to a YAML file works too.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import yaml

from wavec.errors import WavecError
from wavec.opcodes import Opcode

REQUIRED = ("name", "sm_count", "hbm_bandwidth_bytes_per_s", "peak_flops_per_s")


def known_targets() -> list[str]:
    folder = resources.files("wavec.targets") / "hw"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_hw(name_or_path: str) -> dict:
    """The target's facts as a dict. Raises WavecError for an unknown name or a file missing a key."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise WavecError(f"--hw {name_or_path}: no such file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise WavecError(f"--hw {name_or_path}: cannot read the file ({type(e).__name__})") from e
    else:
        candidate = resources.files("wavec.targets") / "hw" / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise WavecError(f"--hw {name_or_path}: unknown target; known: {', '.join(known_targets())}, or give a .yaml path")
        text = candidate.read_text()
    where = f"--hw {name_or_path}"
    try:
        hw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise WavecError(f"{where}: not valid YAML ({problem}{at}); fix the file") from e
    if not isinstance(hw, dict):
        raise WavecError(f"{where}: expected a YAML mapping of {', '.join(REQUIRED)}, got {type(hw).__name__}")
    missing = [k for k in REQUIRED if k not in hw]
    if missing:
        raise WavecError(f"{where}: missing {', '.join(missing)}")
    sm = hw["sm_count"]
    if isinstance(sm, bool) or not isinstance(sm, int) or sm < 1:
        raise WavecError(f"{where}: sm_count is {sm!r}; it must be a whole number >= 1")
    if not isinstance(hw["name"], str) or not hw["name"]:
        raise WavecError(f"{where}: name is {hw['name']!r}; it must be a non-empty string")
    from wavec.targets.cuda.codegen import BLOCK_THREADS  # the persistent block's size when the file names none

    threads = hw.setdefault("threads_per_block", BLOCK_THREADS)
    if isinstance(threads, bool) or not isinstance(threads, int) or not 32 <= threads <= 1024 or threads % 32:
        raise WavecError(f"{where}: threads_per_block is {threads!r}; it must be a multiple of 32 in [32, 1024]")
    l2 = hw.get("l2_bytes")  # optional: without it the kernel never prefetches weights (codegen.prefetch_weights)
    if l2 is not None and (isinstance(l2, bool) or not isinstance(l2, int) or l2 < 1):
        raise WavecError(f"{where}: l2_bytes is {l2!r}; it must be a whole number of bytes >= 1")
    task_us = (hw.get("measured") or {}).get("task_us")  # optional: wpk-schedule's per-opcode task cost
    opcodes = tuple(o.name.lower() for o in Opcode)
    if task_us is not None and not (isinstance(task_us, dict) and set(task_us) <= set(opcodes)
                                    and all(_positive(v) for v in task_us.values())):
        raise WavecError(f"{where}: measured.task_us is {task_us!r}; it must map opcode names "
                         f"({', '.join(opcodes)}) to positive microseconds")
    bw = hw["hbm_bandwidth_bytes_per_s"]
    if not _positive(bw):
        raise WavecError(f"{where}: hbm_bandwidth_bytes_per_s is {bw!r}; it must be a positive number")
    peak = hw["peak_flops_per_s"]
    fp32 = peak.get("fp32") if isinstance(peak, dict) else None
    if not _positive(fp32):
        raise WavecError(f"{where}: peak_flops_per_s.fp32 is {fp32!r}; it must be a positive number")
    return hw


DEFAULT_TASK_OVERHEAD_US = 0.3  # a task's fixed cost (fetch, waits, signal) on a target that measured none


def task_overhead_us(hw: dict) -> dict[str, float]:
    """Each opcode's fixed task cost in microseconds, as wpk-schedule and the modeled timeline charge it:
    the target's ``measured.task_us``, DEFAULT_TASK_OVERHEAD_US where it gives none."""
    measured = (hw.get("measured") or {}).get("task_us") or {}
    return {name: float(measured.get(name, DEFAULT_TASK_OVERHEAD_US)) for name in (o.name.lower() for o in Opcode)}


def _positive(v) -> bool:
    """A positive finite number; YAML 1.1 reads 4.8e12 (no exponent sign) as a string, so digits in a
    string count too."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return False
    try:
        x = float(v)
    except ValueError:
        return False
    return math.isfinite(x) and x > 0
