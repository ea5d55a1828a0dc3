"""A compiled profile: everything a runtime needs to serve a cohort, in one directory.

Files (format ``wavec-profile/1``):
- ``profile.json``: sessions, workers, arena sizes in bytes, the I/O and state bindings, the tensor table,
  phases, and ``worker_tasks`` ([begin, end) rows of the payload table per worker, in execution order);
- ``payloads.bin``: one 128-byte record per task (wavec/payload.py);
- ``params.bin``: the int64 parameter table the payloads point into (wavec/opcodes.py);
- ``weights.bin``: the weights arena image (weights, small constants, state initial values);
- ``kernel.cu``: the persistent kernel for this profile; ``report.json``: tasks, phases, bytes, FLOPs.

This module imports numpy alone: `wavec run --backend cuda` must work where xDSL is not installed.

profile.json keys (byte offsets are relative to the arena start; arena names are wavec.opcodes.Arena
names in lower case: weights, state, act, input, output):
- ``format``, ``model`` (str), ``sessions`` (N), ``workers`` (blocks, one per SM), ``hw`` (target name),
  ``n_counters`` (uint32 counters the kernel needs; counter 0 is the end-of-beat counter);
- ``arena_bytes``: {arena: bytes}; for input and output this is one half of the double buffer: beat b
  uses the half at ``(b % 2) * arena_bytes[...]`` of a device allocation twice that size;
- ``worker_tasks``: one [begin, end) row range of payloads.bin per worker, in execution order;
- ``inputs``: [{name, shape (one session's frame), offset, session_stride, cohort_axis}] in the input arena;
- ``reset``: {offset, session_stride}: one float32 flag per session in the input arena, 1.0 = reset the
  session's state slots to their initial values before this beat;
- ``outputs``: [{name, shape, offset, session_stride, cohort_axis}] in the output arena;
- ``states``: [{name, output (paired model output or null), shape, offset, session_stride, init_offset,
  cohort_axis}]: slot s of the state occupies ``[offset + s*session_stride, + bytes)`` of the state arena,
  the initial value one session's bytes at ``init_offset`` of the weights arena;
- ``tensors``: [{name, arena, offset, bytes (one session), session_stride}]: every allocation;
- ``phases``: [{name, op, tasks}]; ``bindings``: {name: value} the frontend folded in.
``cohort_axis`` is where the model's own batched layout put the session axis (the runtime's per-session
layout drops it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wavec.errors import ProfileError, RuntimeBackendError
from wavec.payload import PAYLOAD_BYTES, PAYLOAD_DTYPE

FORMAT = "wavec-profile/1"
BACKENDS = ("interp", "cuda")


@dataclass
class Profile:
    """A compiled cohort program. ``meta`` is profile.json's content (see the module docstring)."""

    meta: dict
    payloads: np.ndarray  # PAYLOAD_DTYPE records, grouped by worker in execution order
    params: np.ndarray  # int64
    weights: np.ndarray  # uint8 image of the weights arena
    kernel_source: str = ""
    report: dict = field(default_factory=dict)

    @property
    def sessions(self) -> int:
        return int(self.meta["sessions"])

    def arena_bytes(self, arena: str) -> int:
        return int(self.meta["arena_bytes"][arena])

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes the profile atomically: into a temporary sibling, then renamed over ``directory``."""
        target = Path(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            (tmp / "profile.json").write_text(json.dumps(self.meta, indent=1))
            (tmp / "payloads.bin").write_bytes(np.ascontiguousarray(self.payloads, PAYLOAD_DTYPE).tobytes())
            (tmp / "params.bin").write_bytes(np.ascontiguousarray(self.params, "<i8").tobytes())
            (tmp / "weights.bin").write_bytes(np.ascontiguousarray(self.weights, np.uint8).tobytes())
            (tmp / "kernel.cu").write_text(self.kernel_source)
            (tmp / "report.json").write_text(json.dumps(self.report, indent=1))
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    def run(
        self,
        inputs: dict[str, np.ndarray],
        backend: str = "interp",
        reset: np.ndarray | None = None,
        **options,
    ) -> dict[str, np.ndarray]:
        """Runs ``beats`` beats. ``inputs[name]`` is float32 ``[beats, sessions, *frame]``; ``reset`` is
        bool ``[beats, sessions]`` (the session (re)joins at that beat: its state slot is reset to the
        initial value before the beat). Returns each output as ``[beats, sessions, *shape]``.
        Raises RuntimeBackendError for an unknown backend or inputs of the wrong shape."""
        frames, reset = check_inputs(self, inputs, reset)
        if backend == "interp":
            from wavec.targets.interp import run_beats
        elif backend == "cuda":
            from wavec.targets.cuda import run_beats
        else:
            raise RuntimeBackendError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        return run_beats(self, frames, reset, **options)


def check_inputs(
    profile: Profile, inputs: dict[str, np.ndarray], reset: np.ndarray | None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Validates and normalizes run inputs; returns (frames as float32, reset as bool)."""
    frames: dict[str, np.ndarray] = {}
    beats = None
    for spec in profile.meta["inputs"]:
        name = spec["name"]
        if name not in inputs:
            raise RuntimeBackendError(f"input {name!r} is missing; the profile needs {[s['name'] for s in profile.meta['inputs']]}")
        arr = np.asarray(inputs[name], np.float32)
        want = (profile.sessions, *spec["shape"])
        if arr.ndim != len(want) + 1 or arr.shape[1:] != want:
            raise RuntimeBackendError(
                f"input {name!r} has shape {list(arr.shape)}; expected [beats, {', '.join(map(str, want))}]"
            )
        if beats is not None and arr.shape[0] != beats:
            raise RuntimeBackendError(f"input {name!r} has {arr.shape[0]} beats, others have {beats}")
        beats = arr.shape[0]
        frames[name] = arr
    if beats is None:  # a model with no runtime input: the reset array says how many beats
        if reset is None:
            raise RuntimeBackendError("the profile has no inputs: pass reset [beats, sessions] to set the beat count")
        beats = np.shape(reset)[0]
    if reset is None:
        reset = np.zeros((beats, profile.sessions), bool)
    reset = np.asarray(reset, bool)
    if reset.shape != (beats, profile.sessions):
        raise RuntimeBackendError(f"reset has shape {list(reset.shape)}; expected [{beats}, {profile.sessions}]")
    return frames, reset


def load(directory: str | os.PathLike) -> Profile:
    """Reads a profile directory. Raises ProfileError naming the missing or malformed file."""
    root = Path(directory)
    if not (root / "profile.json").is_file():
        raise ProfileError(f"{root}: not a wavec profile (no profile.json); write one with `wavec compile ... -o {root}`")
    try:
        meta = json.loads((root / "profile.json").read_text())
    except json.JSONDecodeError as e:
        raise ProfileError(f"{root / 'profile.json'}: not valid JSON ({e})") from e
    if meta.get("format") != FORMAT:
        raise ProfileError(f"{root}: format {meta.get('format')!r}, this wavec reads {FORMAT!r}; recompile the model")
    raw = (root / "payloads.bin").read_bytes()
    if len(raw) % PAYLOAD_BYTES:
        raise ProfileError(f"{root / 'payloads.bin'}: {len(raw)} bytes is not a whole number of 128-byte payloads")
    report_path = root / "report.json"
    return Profile(
        meta=meta,
        payloads=np.frombuffer(raw, PAYLOAD_DTYPE).copy(),
        params=np.fromfile(root / "params.bin", "<i8"),
        weights=np.fromfile(root / "weights.bin", np.uint8),
        kernel_source=(root / "kernel.cu").read_text() if (root / "kernel.cu").exists() else "",
        report=json.loads(report_path.read_text()) if report_path.exists() else {},
    )
