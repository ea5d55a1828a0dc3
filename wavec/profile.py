"""A compiled profile: everything a runtime needs to serve a cohort, in one directory.

Files (format ``wavec-profile/2``; /2 added the MATMUL block's ``b_tf32`` word, wavec/opcodes.py):
- ``profile.json``: sessions, workers, arena sizes in bytes, the I/O and state bindings, the tensor table,
  phases, and ``worker_tasks`` ([begin, end) rows of the payload table per worker, in execution order);
- ``payloads.bin``: one 128-byte record per task (wavec/payload.py);
- ``params.bin``: the int64 parameter table the payloads point into (wavec/opcodes.py);
- ``weights.bin``: the weights arena image (weights, small constants, state initial values) less the
  generated weights' bytes (wavec/weights.py ``stored_ranges``: the remaining ranges, concatenated);
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
- ``tensors``: [{name, arena, offset, bytes (one session), session_stride}]: every allocation; optional
  ``part_bytes``: [[begin, end), ...] ranges of a session's slot that another phase writes than the rest (a
  concat's input computed in place, wave-to-wpk), which wpk-verify's dataflow check takes as reads of their own;
- ``phases``: [{name, op, tasks}]; ``bindings``: {name: value} the frontend folded in;
- ``generated_weights``: [{name, offset, elems, kind ("uniform": seed, scale, precision; "constant":
  value)}]: weights made at load from their spec (wavec/weights.py), absent from weights.bin;
- ``ewise_bodies``: [{expr, rank, n_inputs, keep, phases}]: generated CUDA bodies of EWISE expressions (wpk-payload
  numbers them, the kernel's `run_generated_ewise` dispatches on an EWISE block's last word; empty without TVM;
  ``keep`` >= 0: a select's body that stores only where its condition holds, its input ``keep`` being its
  output; absent in older profiles, read as -1);
- ``epilogue_bodies``: [{expr, n_inputs, phases}]: generated CUDA functions of MATMUL / CONV epilogues (wpk-payload
  numbers them, the kernel's `generated_epilogue` switches on an epilogue's last word; absent in older profiles);
- optional: ``block_threads`` (threads per persistent block, the target's ``threads_per_block``),
  ``l2_bytes`` (the target's L2; the kernel prefetches weights into L2 when they outgrow it) and
  ``param_words`` / ``param_window`` (params.bin's length and its longest parameter block, in int64 words;
  `param_extent`: the kernel stages a task's block in shared memory when the longest fits).
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
from wavec.weights import check_stored, from_spec, unpack_stored

FORMAT = "wavec-profile/3"  # 3: a MATMUL / CONV epilogue ends with its generated-body index (wavec.opcodes.Epilogue)
BACKENDS = ("interp", "cuda")


def param_extent(n_words: int, offsets) -> dict[str, int]:
    """profile.json's ``param_words`` (the parameter table's length, ``n_words``) and ``param_window`` (its
    longest block a task reads, in int64 words), from the word offsets the payloads point at: each block
    runs to the next one's start (blocks are packed back to back) or the table's end."""
    starts = sorted({int(o) for o in offsets})
    ends = starts[1:] + [n_words]
    return {"param_words": n_words, "param_window": max((e - s for s, e in zip(starts, ends)), default=0)}


@dataclass(repr=False)
class Profile:
    """A compiled cohort program. ``meta`` is profile.json's content (see the module docstring)."""

    meta: dict
    payloads: np.ndarray  # PAYLOAD_DTYPE records, grouped by worker in execution order
    params: np.ndarray  # int64
    weights: np.ndarray  # uint8: weights.bin, the weights arena less its generated weights (wavec.weights.stored_ranges)
    kernel_source: str = ""
    report: dict = field(default_factory=dict)

    def __repr__(self) -> str:  # profile.json alone can run to megabytes
        return (f"Profile(model={self.meta.get('model', '?')!r}, hw={self.meta.get('hw', '?')!r}, "
                f"sessions={self.meta.get('sessions')}, workers={self.meta.get('workers')}, "
                f"tasks={len(self.payloads)}, phases={len(self.meta.get('phases', []))})")

    @property
    def generated_weights(self) -> list[dict]:
        return self.meta.get("generated_weights", [])

    def weights_arena(self) -> np.ndarray:
        """The weights arena as the kernel sees it (uint8): the stored image with every generated weight
        materialized. Costs the arena's size in host memory; the CUDA runtime generates on the device."""
        from wavec.weights import fill_generated

        image = unpack_stored(self.weights, self.arena_bytes("weights"), self.generated_weights)
        fill_generated(image, self.generated_weights)
        return image

    @property
    def sessions(self) -> int:
        return int(self.meta["sessions"])

    def arena_bytes(self, arena: str) -> int:
        return int(self.meta["arena_bytes"][arena])

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes the profile atomically: into a temporary sibling, then renamed over ``directory``.

        An existing ``directory`` is replaced only when it is itself a wavec profile; anything else (a
        file, a directory of other things, the current directory) is refused with a ProfileError, as is
        a target that cannot be written. Nothing is left behind on failure."""
        return save_profile_files(self, directory)

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


def _float_frames(name: str, value) -> np.ndarray:
    """``value`` as float32; float16/32/64 only, with no finite value that overflows float32."""
    arr = np.asarray(value)
    if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
        raise RuntimeBackendError(
            f"input {name!r} has dtype {arr.dtype}; inputs must be float (float16, float32 or float64)"
        )
    with np.errstate(over="ignore"):
        out = arr.astype(np.float32)
    if arr.dtype.itemsize > 4:
        overflow = np.isfinite(arr) & ~np.isfinite(out)
        if overflow.any():
            bad = arr[overflow].reshape(-1)[0]
            raise RuntimeBackendError(f"input {name!r} holds {bad!r}, which overflows float32; scale the input into float32 range")
    return out


def _reset_flags(value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iuf" or not np.isin(arr, (0, 1)).all():
        raise RuntimeBackendError(f"reset has dtype {arr.dtype}{'' if arr.dtype.kind not in 'iuf' else ' with values other than 0 and 1'}; "
                                  "expected bool [beats, sessions]")
    return arr.astype(bool)


def check_inputs(
    profile: Profile, inputs: dict[str, np.ndarray], reset: np.ndarray | None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Validates and normalizes run inputs; returns (frames as float32, reset as bool). Raises
    RuntimeBackendError for a missing or unknown input name, a non-float dtype or a wrong shape."""
    frames: dict[str, np.ndarray] = {}
    beats = None
    expected = [s["name"] for s in profile.meta["inputs"]]
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise RuntimeBackendError(
            f"unknown input{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the profile's inputs are {expected} (and the optional 'reset')"
        )
    for spec in profile.meta["inputs"]:
        name = spec["name"]
        if name not in inputs:
            raise RuntimeBackendError(f"input {name!r} is missing; the profile needs {expected}")
        arr = _float_frames(name, inputs[name])
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
        beats = np.shape(reset)[0] if np.ndim(reset) else 0
    if reset is None:
        reset = np.zeros((beats, profile.sessions), bool)
    reset = _reset_flags(reset)
    if reset.shape != (beats, profile.sessions):
        raise RuntimeBackendError(f"reset has shape {list(reset.shape)}; expected [{beats}, {profile.sessions}]")
    return frames, reset


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_profile_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding a profile.json object of this format (any version
    of it: an older wavec profile may be replaced too)."""
    try:
        meta = json.loads((path / "profile.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and str(meta.get("format", "")).startswith("wavec-profile/")


def check_save_target(target: Path, what: str) -> None:
    """Refuses to replace anything but a wavec profile directory, and the current directory or one
    that contains it."""
    here = Path.cwd().resolve()
    resolved = target.resolve()
    if resolved == here or resolved in here.parents:
        raise ProfileError(f"{target}: is the current directory or contains it; write the {what} to a new directory, e.g. -o vad.profile")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ProfileError(f"{target}: exists and is not a directory; refusing to replace it. Choose another path for the {what}")
    ancestor = resolved.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ProfileError(f"{target}: {ancestor} is a file, not a directory; choose another path for the {what}")
    if target.is_dir() and not is_profile_dir(target):
        raise ProfileError(
            f"{target}: exists and is not a wavec profile (no profile.json of format {FORMAT!r}); refusing to replace it. "
            f"Choose a new directory for the {what} or remove this one yourself"
        )


def _os_reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def save_profile_files(profile: Profile, directory: str | os.PathLike) -> Path:
    if str(directory).strip() == "":
        raise ProfileError("empty output path; name the profile directory to write, e.g. -o vad.profile")
    target = Path(directory)
    check_save_target(target, "profile")
    parent = target.resolve().parent
    created = [p for p in [parent, *parent.parents] if not p.exists()]
    tmp = backup = None
    try:
        try:
            parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
            os.chmod(tmp, 0o777 & ~_umask())
            (tmp / "profile.json").write_text(json.dumps(profile.meta, indent=1))
            (tmp / "payloads.bin").write_bytes(np.ascontiguousarray(profile.payloads, PAYLOAD_DTYPE).tobytes())
            (tmp / "params.bin").write_bytes(np.ascontiguousarray(profile.params, "<i8").tobytes())
            (tmp / "weights.bin").write_bytes(np.ascontiguousarray(profile.weights, np.uint8).tobytes())
            (tmp / "kernel.cu").write_text(profile.kernel_source)
            (tmp / "report.json").write_text(json.dumps(profile.report, indent=1))
            if target.exists():  # a wavec profile (checked above): swap it out, then drop it
                backup = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=parent))
                os.rename(target, backup / "profile")
            os.rename(tmp, target)
            tmp = None
        except OSError as e:
            raise ProfileError(f"{target}: cannot write the profile ({_os_reason(e)}); choose a writable directory") from e
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if backup is not None and not target.exists() and (backup / "profile").exists():
            os.rename(backup / "profile", target)  # put the old profile back
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
        for p in created:  # parents we made, innermost first
            try:
                p.rmdir()
            except OSError:
                break
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)
    return target


# profile.json: each required key and the JSON type(s) it must have.
REQUIRED_META = {
    "format": str,
    "model": str,
    "sessions": int,
    "workers": int,
    "hw": str,
    "n_counters": int,
    "arena_bytes": dict,
    "worker_tasks": list,
    "inputs": list,
    "outputs": list,
    "states": list,
    "tensors": list,
    "phases": list,
}
ARENAS = ("weights", "state", "act", "input", "output")
_PORT_KEYS = {"name": str, "shape": list, "offset": int, "session_stride": int}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type_ok(v, t) -> bool:
    return _is_int(v) if t is int else isinstance(v, t)


def validate_meta(meta, where: str) -> None:
    """Checks profile.json's structure: every required key with its type, arena sizes, the I/O, state
    and phase entries. Raises ProfileError naming the first problem."""

    def bad(what: str) -> ProfileError:
        return ProfileError(f"{where}: {what}; the profile is damaged, recompile it with `wavec compile ... -o DIR`")

    if not isinstance(meta, dict):
        raise bad(f"is a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != FORMAT:
        raise ProfileError(f"{where}: format {meta.get('format')!r}, this wavec reads {FORMAT!r}; recompile the model")
    for key, t in REQUIRED_META.items():
        if key not in meta:
            raise bad(f"missing key {key!r}")
        if not _type_ok(meta[key], t):
            raise bad(f"key {key!r} is {type(meta[key]).__name__}, expected {t.__name__}")
    for key in ("sessions", "workers"):
        if meta[key] < 1:
            raise bad(f"{key} is {meta[key]}, expected >= 1")
    if meta["n_counters"] < 0:
        raise bad(f"n_counters is {meta['n_counters']}")
    for arena in ARENAS:
        v = meta["arena_bytes"].get(arena)
        if not _is_int(v) or v < 0:
            raise bad(f"arena_bytes[{arena!r}] is {v!r}, expected a byte count")
    for key in ("inputs", "outputs", "states"):
        for i, port in enumerate(meta[key]):
            if not isinstance(port, dict):
                raise bad(f"{key}[{i}] is not an object")
            for k, t in _PORT_KEYS.items():
                if not _type_ok(port.get(k), t):
                    raise bad(f"{key}[{i}].{k} is {port.get(k)!r}, expected {t.__name__}")
            if not all(_is_int(d) and d >= 0 for d in port["shape"]):
                raise bad(f"{key}[{i}].shape {port['shape']!r} is not a list of sizes")
        for i, port in enumerate(meta["states"]):
            if not _is_int(port.get("init_offset")):
                raise bad(f"states[{i}].init_offset is {port.get('init_offset')!r}, expected int")
    for key, least in (("block_threads", 1), ("l2_bytes", 1), ("param_words", 0), ("param_window", 0)):
        if key in meta and not (_is_int(meta[key]) and meta[key] >= least):
            raise bad(f"{key} is {meta[key]!r}, expected a whole number >= {least}")
    reset = meta.get("reset")
    if reset is not None and not (isinstance(reset, dict) and _is_int(reset.get("offset")) and _is_int(reset.get("session_stride"))):
        raise bad(f"reset is {reset!r}, expected {{offset, session_stride}} or null")
    for i, ph in enumerate(meta["phases"]):
        if not (isinstance(ph, dict) and _is_int(ph.get("tasks")) and ph["tasks"] >= 0 and isinstance(ph.get("name"), str)):
            raise bad(f"phases[{i}] is {ph!r}, expected {{name, op, tasks}}")
    if not isinstance(meta.get("bindings", {}), dict):
        raise bad("bindings is not an object")
    generated = meta.get("generated_weights", [])
    if not isinstance(generated, list):
        raise bad("generated_weights is not a list")
    for i, spec in enumerate(generated):
        if not (isinstance(spec, dict) and _is_int(spec.get("offset")) and _is_int(spec.get("elems"))
                and spec["offset"] >= 0 and spec["elems"] >= 1
                and spec["offset"] + 4 * spec["elems"] <= meta["arena_bytes"]["weights"]):
            raise bad(f"generated_weights[{i}] is {spec!r}, expected {{name, offset, elems, kind, ...}} inside the weights arena")
        try:
            from_spec(spec)
        except (ValueError, KeyError, TypeError) as e:
            raise bad(f"generated_weights[{i}]: {e}") from e


def _check_consistency(meta: dict, n_payloads: int, n_params: int, root: Path) -> None:
    def bad(file: str, what: str) -> ProfileError:
        return ProfileError(f"{root / file}: {what}; the profile is damaged, recompile it with `wavec compile ... -o DIR`")

    rows = meta["worker_tasks"]
    if len(rows) != meta["workers"]:
        raise bad("profile.json", f"worker_tasks has {len(rows)} rows for {meta['workers']} workers")
    spans = []
    for w, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and all(_is_int(x) for x in row) and 0 <= row[0] <= row[1] <= n_payloads):
            raise bad("profile.json", f"worker_tasks[{w}] is {row!r}, expected [begin, end] within the {n_payloads} payload rows")
        if row[1] > row[0]:
            spans.append(row)
    covered = 0
    for begin, end in sorted(spans):
        if begin != covered:
            raise bad("profile.json", f"worker_tasks leave payload rows unassigned or assign them twice (at row {min(begin, covered)})")
        covered = end
    if covered != n_payloads:
        raise bad("profile.json", f"worker_tasks cover {covered} of the {n_payloads} payload rows")
    if meta["phases"] and sum(p["tasks"] for p in meta["phases"]) != n_payloads:
        raise bad("profile.json", f"phases hold {sum(p['tasks'] for p in meta['phases'])} tasks, payloads.bin {n_payloads}")
    if n_payloads and not n_params:
        raise bad("params.bin", "is empty but the tasks point into it")


def _check_param_extent(meta: dict, offsets: np.ndarray, n_params: int, root: Path) -> None:
    """The kernel stages ``param_window`` words of each task's parameter block: fewer than its longest block
    would hand a body stale shared memory, so a profile.json that says less than params.bin holds is refused."""
    if "param_window" not in meta and "param_words" not in meta:
        return
    need = param_extent(n_params, offsets)
    for key in ("param_words", "param_window"):
        if key not in meta:
            raise ProfileError(f"{root / 'profile.json'}: missing key {key!r} (it has the other); the profile is "
                               "damaged, recompile it with `wavec compile ... -o DIR`")
        if meta[key] < need[key]:
            raise ProfileError(f"{root / 'profile.json'}: {key} is {meta[key]!r}, but params.bin and payloads.bin "
                               f"need {need[key]}; the profile is damaged, recompile it with `wavec compile ... -o DIR`")


def load(directory: str | os.PathLike) -> Profile:
    """Reads a profile directory. Raises ProfileError naming the missing or malformed file; the structure
    (keys, types, file sizes, worker rows covering the payload table) is checked up front."""
    root = Path(directory)
    hint = "expected a directory written by `wavec compile ... -o DIR`"
    if str(directory).strip() == "":
        raise ProfileError(f"empty profile path; {hint}")
    if not root.is_dir():
        what = "no such directory" if not root.exists() else "not a directory"
        raise ProfileError(f"{root}: not a wavec profile ({what}); {hint}")
    if not (root / "profile.json").is_file():
        raise ProfileError(f"{root}: not a wavec profile (no profile.json); {hint}")
    try:
        meta = json.loads((root / "profile.json").read_text())
    except (ValueError, OSError) as e:
        raise ProfileError(f"{root / 'profile.json'}: not valid JSON ({' '.join(str(e).split())})") from e
    validate_meta(meta, str(root / "profile.json"))
    for name in ("payloads.bin", "params.bin", "weights.bin"):
        if not (root / name).is_file():
            raise ProfileError(f"{root / name}: missing; the profile is incomplete, recompile it with `wavec compile ... -o DIR`")
    try:
        raw = (root / "payloads.bin").read_bytes()
        params_raw = (root / "params.bin").read_bytes()
        weights = np.fromfile(root / "weights.bin", np.uint8)
        kernel_source = (root / "kernel.cu").read_text() if (root / "kernel.cu").is_file() else ""
    except (OSError, ValueError) as e:
        raise ProfileError(f"{root}: cannot read the profile ({' '.join(str(e).split())})") from e
    if len(raw) % PAYLOAD_BYTES:
        raise ProfileError(f"{root / 'payloads.bin'}: {len(raw)} bytes is not a whole number of 128-byte payloads")
    if len(params_raw) % 8:
        raise ProfileError(f"{root / 'params.bin'}: {len(params_raw)} bytes is not a whole number of int64 parameters")
    _check_consistency(meta, len(raw) // PAYLOAD_BYTES, len(params_raw) // 8, root)
    _check_param_extent(meta, np.frombuffer(raw, PAYLOAD_DTYPE)["params"], len(params_raw) // 8, root)
    try:
        check_stored(weights, meta["arena_bytes"]["weights"], meta.get("generated_weights", []))
    except ValueError as e:
        raise ProfileError(f"{root / 'weights.bin'}: {e}; the profile is damaged, recompile it with `wavec compile ... -o DIR`") from e
    report: dict = {}
    report_path = root / "report.json"
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text())
        except (ValueError, OSError) as e:
            raise ProfileError(f"{report_path}: not valid JSON ({' '.join(str(e).split())}); recompile the profile or delete report.json") from e
        if not isinstance(report, dict):
            raise ProfileError(f"{report_path}: is a JSON {type(report).__name__}, not an object; recompile the profile or delete report.json")
    return Profile(
        meta=meta,
        payloads=np.frombuffer(raw, PAYLOAD_DTYPE).copy(),
        params=np.frombuffer(params_raw, "<i8").copy(),
        weights=weights,
        kernel_source=kernel_source,
        report=report,
    )
