"""Serving a cohort on a fixed beat clock: admission, late frames, deadlines, and the records of it all.

`wavec run` feeds a profile every beat as fast as it can. A real server has a clock: beat b starts at
``t0 + b * period`` whether or not its frames are in, and owes its outputs by a deadline. This module
drives a backend that way from recorded inputs and writes down, per session and per beat, what happened.

Pieces (numpy only at import; the cuda backend imports cuda-bindings when it is used, the interp backend
the interpreter, so this runs on a GPU machine without xDSL):

- `BeatClock`: monotonic (``time.perf_counter_ns``), fixed period in microseconds; times are microseconds
  since `start()`. Beat b starts at ``b * period_us``; its deadline is ``start + deadline_us`` (default
  one period: the start of beat b+1).
- `SessionSchedule`: which slot is in the cohort at which beat, as spans ``[join, leave)`` per slot. A slot's
  state is reset at every beat where it is admitted (a join) or dropped (a leave), through the profile's
  reset flags: an admitted session starts from the initial state, and a dropped one leaves nothing behind
  for the next occupant. Between spans a slot is *idle*: it is fed silence and its outputs are discarded.
- `Feed`: the recorded frames ``[beats, sessions, *frame]`` per input and, per frame, its arrival relative
  to its beat's scheduled start (``delay_us``; > 0 means it arrives after the beat must start). A frame
  that has not arrived when its beat starts is replaced by silence (zeros) and flagged *substituted*. The
  decision uses the scheduled start, not the moment the host gets round to publishing: a server running
  behind never turns a late frame into a real one, so which frames are real depends on the feed alone, and
  the outputs are those of `Profile.run` on the frames actually used (silence substituted) with resets at
  the admit and drop beats, whatever the timing.
- `Server`: runs beats on a backend. Beat b is published at its start (or as soon as the backend can take
  it, when the server runs behind). The cuda backend takes a beat while the previous one still runs: the
  input arena is double-buffered, so beat b+1's frames go into the other half while b computes and the
  kernel starts b+1 the moment b is done everywhere; the host waits for beat b-1's outputs before it
  publishes b+1 (their halves are the same). The interp backend is synchronous: publishing runs the beat.
  A backend's `input_buffers()` (the cuda backend's pinned staging views) are where the frames are
  gathered, so a beat's frames are copied once on the host (Silero at 16,384 sessions: 38 MB a beat).
  A beat's outputs are done once `collect` has them in host memory (the cuda backend returns views of its
  pinned staging, valid until its next collect); a backend that takes a beat ahead has them stored into
  the result after the next beat is published, while the kernel runs it, so storing (duplex:1b at 96
  sessions: 25.7 MB a beat) does not delay that beat; a synchronous one, before.
- `ServeResult`: the outputs (float32 ``[beats, sessions, *shape]``; NaN where the slot was idle) and the
  records, written by `ServeResult.write_jsonl`.

Records (``wavec-serve-records/1``, JSON Lines; times in microseconds since the clock's start, rounded to
0.1 us), in this order:

- one ``{"record": "serve", "format", "model", "backend", "beat_us", "deadline_us", "beats", "sessions",
  "inputs", "outputs"}`` header;
- per beat, ``{"record": "beat", "beat", "start_us" (scheduled start), "published_us" (inputs handed to the
  backend), "done_us" (outputs back in host memory), "deadline_us", "compute_us", "lateness_us" (done_us -
  deadline_us; > 0 is late), "late", "admitted" [slots], "dropped" [slots]}`` followed by one
  ``{"record": "session", "beat", "session", "input": "real"|"substituted"|"idle",
  "output": "on_time"|"late"|"idle", "lateness_us"}`` per slot (``lateness_us`` null when idle: all sessions
  of a beat complete together, so a session's lateness is its beat's);
- one ``{"record": "summary", ...}``: `ServeResult.summary`.

``compute_us`` is the time the beat had the backend: on cuda from when the kernel could start it (its
publication, or the host seeing the previous beat done when it was published ahead) to the host seeing
its output epoch (`CudaSession.latencies_us`); on interp, writing its inputs, running it and reading its
outputs.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from wavec.errors import RuntimeBackendError, WavecError
from wavec.profile import BACKENDS, Profile, check_inputs

RECORDS_FORMAT = "wavec-serve-records/1"
IDLE, REAL, SUBSTITUTED = 0, 1, 2
INPUT_STATUS = ("idle", "real", "substituted")  # indexed by IDLE, REAL, SUBSTITUTED
SPIN_US = 300.0  # the last stretch before a beat's start is spun, not slept: sleep overshoots by ~100 us


class BeatClock:
    """A fixed beat clock: beat b starts ``b * period_us`` after `start()`, its deadline is ``deadline_us``
    after its start (default: the period, i.e. the next beat's start). Monotonic; microseconds."""

    def __init__(self, period_us: float, deadline_us: float | None = None):
        if not (math.isfinite(period_us) and period_us > 0):
            raise WavecError(f"beat period {period_us} us: must be a positive number of microseconds")
        deadline_us = period_us if deadline_us is None else deadline_us
        if not (math.isfinite(deadline_us) and deadline_us > 0):
            raise WavecError(f"deadline {deadline_us} us: must be a positive number of microseconds")
        self.period_us = float(period_us)
        self.deadline_offset_us = float(deadline_us)
        self._t0 = None

    def start(self) -> None:
        """Beat 0 starts now."""
        self._t0 = time.perf_counter_ns()

    def now_us(self) -> float:
        if self._t0 is None:
            raise RuntimeError("BeatClock.start() was not called")
        return (time.perf_counter_ns() - self._t0) / 1e3

    def start_us(self, beat: int) -> float:
        return beat * self.period_us

    def deadline_us(self, beat: int) -> float:
        return beat * self.period_us + self.deadline_offset_us

    def sleep_until(self, t_us: float) -> None:
        """Returns at or just after ``t_us``: sleeps most of the way, spins the last `SPIN_US`."""
        left = t_us - self.now_us()
        if left > SPIN_US:
            time.sleep((left - SPIN_US) / 1e6)
        while self.now_us() < t_us:
            pass


@dataclass
class SessionSchedule:
    """Which slot serves a session at which beat: ``spans[s]`` is slot s's sorted, disjoint ``(join, leave)``
    beat intervals (``leave`` None: to the end of the run). Slots without spans are idle throughout."""

    spans: list[list[tuple[int, int | None]]]

    @classmethod
    def always(cls, sessions: int) -> "SessionSchedule":
        """Every slot joins at beat 0 and stays."""
        return cls([[(0, None)] for _ in range(sessions)])

    @classmethod
    def from_reset(cls, reset: np.ndarray) -> "SessionSchedule":
        """Every slot stays from beat 0; a True ``reset[b, s]`` (as in `wavec run`'s inputs) is slot s left and
        joined again at beat b."""
        reset = np.asarray(reset, bool)
        spans = []
        for s in range(reset.shape[1]):
            cuts = [0] + [int(b) for b in np.flatnonzero(reset[:, s]) if b > 0]
            spans.append([(a, b) for a, b in zip(cuts, cuts[1:])] + [(cuts[-1], None)])
        return cls(spans)

    def masks(self, beats: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(active, admitted, dropped), bool ``[beats, sessions]``: in the cohort at beat b; joins at b;
        left at b (its first beat out). A slot both dropped and admitted at b (leave == next join) is
        reset once, as a new session."""
        n = len(self.spans)
        active = np.zeros((beats, n), bool)
        admitted = np.zeros((beats, n), bool)
        dropped = np.zeros((beats, n), bool)
        for s, spans in enumerate(self.spans):
            for join, leave in spans:
                end = beats if leave is None else min(leave, beats)
                if join >= beats:
                    continue
                active[join:end, s] = True
                admitted[join, s] = True
                if leave is not None and leave < beats:
                    dropped[leave, s] = True
        dropped &= ~active  # left and rejoined at the same beat: an admission
        return active, admitted, dropped


def _span_int(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WavecError(f"{where} is {value!r}; expected a beat number >= 0")
    return value


def parse_schedule(doc, sessions: int, where: str) -> tuple[SessionSchedule, list[tuple[int, int, float]]]:
    """The schedule JSON (``--schedule``) as a SessionSchedule and its late frames ``(beat, slot, delay_us)``::

        {"sessions": [[{"join": 0}],                           # slot 0: from beat 0 to the end
                      [{"join": 3, "leave": 8}, {"join": 10}],  # slot 1: joins late, drops, rejoins
                      []],                                      # slot 2: idle (as are slots not listed)
         "late_frames": [{"beat": 4, "session": 0, "delay_us": 1500}]}

    ``leave`` is the first beat the session is out (absent or null: it stays). ``late_frames`` (optional) says
    which frames arrive after their beat's start, by how much. Raises WavecError naming ``where`` and the entry."""
    if not isinstance(doc, dict) or not isinstance(doc.get("sessions"), list):
        raise WavecError(f"{where}: expected an object with a \"sessions\" list, e.g. "
                         "{\"sessions\": [[{\"join\": 0}], [{\"join\": 3, \"leave\": 8}]]}")
    unknown = sorted(set(doc) - {"sessions", "late_frames"})
    if unknown:
        raise WavecError(f"{where}: unknown key {unknown[0]!r}; the schedule has \"sessions\" and \"late_frames\"")
    if len(doc["sessions"]) > sessions:
        raise WavecError(f"{where}: schedules {len(doc['sessions'])} sessions; the profile has {sessions} slots")
    spans: list[list[tuple[int, int | None]]] = []
    for s, entry in enumerate(doc["sessions"]):
        at = f"{where}: sessions[{s}]"
        if not isinstance(entry, list):
            raise WavecError(f"{at} is {entry!r}; expected a list of {{\"join\": B, \"leave\": B}} spans")
        slot: list[tuple[int, int | None]] = []
        for k, span in enumerate(entry):
            if not isinstance(span, dict) or "join" not in span or set(span) - {"join", "leave"}:
                raise WavecError(f"{at}[{k}] is {span!r}; expected {{\"join\": B}} or {{\"join\": B, \"leave\": B}}")
            join = _span_int(span["join"], f"{at}[{k}].join")
            leave = span.get("leave")
            if leave is not None:
                leave = _span_int(leave, f"{at}[{k}].leave")
                if leave <= join:
                    raise WavecError(f"{at}[{k}]: leave {leave} is not after join {join}")
            if slot and (slot[-1][1] is None or join < slot[-1][1]):
                raise WavecError(f"{at}[{k}]: joins at {join} before the previous span has left; list spans in order")
            slot.append((join, leave))
        spans.append(slot)
    spans += [[] for _ in range(sessions - len(spans))]
    late = []
    frames = doc.get("late_frames", [])
    if not isinstance(frames, list):
        raise WavecError(f"{where}: late_frames is {frames!r}; expected a list of {{beat, session, delay_us}}")
    for k, item in enumerate(frames):
        at = f"{where}: late_frames[{k}]"
        if not isinstance(item, dict) or set(item) != {"beat", "session", "delay_us"}:
            raise WavecError(f"{at} is {item!r}; expected {{\"beat\": B, \"session\": S, \"delay_us\": D}}")
        beat = _span_int(item["beat"], f"{at}.beat")
        slot_ = _span_int(item["session"], f"{at}.session")
        if slot_ >= sessions:
            raise WavecError(f"{at}.session is {slot_}; the profile has slots 0..{sessions - 1}")
        delay = item["delay_us"]
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
            raise WavecError(f"{at}.delay_us is {delay!r}; expected microseconds after the beat's start")
        late.append((beat, slot_, float(delay)))
    return SessionSchedule(spans), late


class Feed:
    """Recorded frames, float32 ``[beats, sessions, *frame]`` per input, with their arrival: ``delay_us``
    ``[beats, sessions]`` relative to each beat's scheduled start (default 0: every frame is in time; > 0:
    the frame misses its beat and silence replaces it)."""

    def __init__(self, frames: dict[str, np.ndarray], delay_us: np.ndarray | None = None):
        self.frames = frames
        shapes = {a.shape[:2] for a in frames.values()}
        if len(shapes) > 1:
            raise WavecError(f"feed: inputs disagree on [beats, sessions]: {sorted(shapes)}")
        self.beats, self.sessions = shapes.pop() if shapes else (0, 0)
        if delay_us is None:
            delay_us = np.zeros((self.beats, self.sessions))
        self.delay_us = np.asarray(delay_us, np.float64)
        if frames and self.delay_us.shape != (self.beats, self.sessions):
            raise WavecError(f"feed: delay_us has shape {list(self.delay_us.shape)}; expected [{self.beats}, {self.sessions}]")

    @classmethod
    def with_late_frames(cls, frames: dict[str, np.ndarray], late: list[tuple[int, int, float]]) -> "Feed":
        """Frames that all arrive in time except ``late`` ``(beat, slot, delay_us)`` (beats past the run ignored)."""
        feed = cls(frames)
        for beat, slot, delay in late:
            if beat < feed.beats:
                feed.delay_us[beat, slot] = delay
        return feed

    def gather(self, beat: int, active: np.ndarray,
               into: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Beat ``beat``'s frames ``[sessions, *frame]`` as the backend gets them, and the input status per slot
        (IDLE, REAL, SUBSTITUTED): idle slots and frames that arrive after the beat's start get silence.
        ``into``: arrays to write the frames in (a backend's `input_buffers`, so a large cohort's frames
        are copied once, straight where the backend reads them); default: new arrays."""
        status = np.where(active, np.where(self.delay_us[beat] > 0, SUBSTITUTED, REAL), IDLE).astype(np.int8)
        silent = status != REAL
        out = {}
        for name, arr in self.frames.items():
            frame = into[name] if into is not None else np.empty_like(arr[beat])
            copy_silencing(frame, arr[beat], silent)
            out[name] = frame
        return out, status


GATHER_CHUNK_BYTES = 4 << 20  # a gather thread's share of a beat's frames, at least
GATHER_THREADS = min(8, os.cpu_count() or 1)
_gather_pool: ThreadPoolExecutor | None = None
_gather_pool_lock = threading.Lock()


def _forget_gather_pool() -> None:  # a forked child inherits the pool object but none of its threads
    global _gather_pool, _gather_pool_lock
    _gather_pool, _gather_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_gather_pool)


def _gather_threads() -> ThreadPoolExecutor:
    global _gather_pool
    with _gather_pool_lock:
        if _gather_pool is None:
            _gather_pool = ThreadPoolExecutor(GATHER_THREADS, thread_name_prefix="wavec-gather")
        return _gather_pool


def copy_silencing(frame: np.ndarray, source: np.ndarray, silent: np.ndarray,
                   chunk_bytes: int = GATHER_CHUNK_BYTES) -> None:
    """``frame[:] = source`` with the rows where ``silent`` (bool ``[sessions]``) zeroed, split by rows over
    up to GATHER_THREADS threads once a beat's frames pass ``chunk_bytes`` (numpy copies without the GIL).
    With one thread, gathering Silero's 151 MB a beat at 65,536 sessions outlasted the 32 ms beat on the
    H200's host (bench/RESULTS.md, fifth run)."""
    silent = np.asarray(silent, bool)
    if source.shape != frame.shape or silent.shape != frame.shape[:1]:
        raise ValueError(f"copy_silencing: source {source.shape} and silent {silent.shape} must match the frame "
                         f"{frame.shape} and its rows")
    parts = max(1, min(GATHER_THREADS, frame.nbytes // max(1, chunk_bytes), len(frame)))
    bounds = np.linspace(0, len(frame), parts + 1).astype(int)

    def copy(i: int) -> None:
        rows = slice(bounds[i], bounds[i + 1])
        np.copyto(frame[rows], source[rows])
        frame[rows][silent[rows]] = 0

    if parts == 1:
        copy(0)
        return
    chunks = [_gather_threads().submit(copy, i) for i in range(parts)]
    wait(chunks)  # every chunk has stopped writing `frame` before an error is raised
    for chunk in chunks:
        chunk.result()


def check_fetch(profile: Profile, fetch) -> list[str]:
    """The output names to send back each beat, in the profile's order: ``fetch`` (an iterable of output
    names, not a string), checked against the profile's outputs, or all of them for None. Raises
    WavecError for a string, a non-string name, no names, or a name the profile does not output."""
    names = [spec["name"] for spec in profile.meta["outputs"]]
    if fetch is None:
        return names
    if isinstance(fetch, (str, bytes)):
        raise WavecError(f"--fetch {fetch!r}: give a list of output names, not one string")
    fetch = list(fetch)
    if not fetch:
        raise WavecError(f"--fetch: no output named; the profile's outputs are {', '.join(names)}")
    unknown = [n for n in fetch if not isinstance(n, str) or n not in names]
    if unknown:
        raise WavecError(f"--fetch {', '.join(map(repr, unknown))}: not an output of the profile; its outputs are "
                         f"{', '.join(names)}")
    return [n for n in names if n in fetch]


# ---- backends ----------------------------------------------------------------------------------------------


class InterpBackend:
    """The CPU interpreter, synchronous: `publish` runs the beat."""

    name = "interp"
    ahead = 0  # beats that may be published before the previous one is collected

    def __init__(self, profile: Profile, seed: int = 0):
        from wavec.targets.interp import Interpreter

        self.machine = Interpreter(profile, seed)
        self._outputs = None
        self.last_compute_us = 0.0

    def publish(self, frames: dict[str, np.ndarray], reset: np.ndarray) -> None:
        t = time.perf_counter_ns()
        self.machine.write_inputs(frames, reset)
        self.machine.run_beat()
        self._outputs = self.machine.read_outputs()
        self.last_compute_us = (time.perf_counter_ns() - t) / 1e3

    def input_buffers(self) -> None:
        """None: the interpreter copies whatever frames it is given."""
        return None

    def ready(self) -> bool:
        return True

    def collect(self, names=None) -> dict[str, np.ndarray]:
        out, self._outputs = self._outputs, None
        return out if names is None else {name: out[name] for name in names}

    def close(self) -> None:
        pass


class CudaBackend:
    """The persistent kernel through `CudaSession`: a beat may be published while the previous one runs."""

    name = "cuda"
    ahead = 1

    def __init__(self, profile: Profile, **options):
        from wavec.targets.cuda.runtime import CudaSession

        self.session = CudaSession(profile, **options)

    def publish(self, frames: dict[str, np.ndarray], reset: np.ndarray) -> None:
        self.session.publish(frames, reset)

    def input_buffers(self) -> dict[str, np.ndarray]:
        """The session's pinned input staging views: frames written there are published without a copy."""
        return self.session.input_views

    def ready(self) -> bool:
        return self.session.ready()

    def collect(self, names=None) -> dict[str, np.ndarray]:
        """Views of the pinned buffer the outputs came back to, valid until the next collect (the server stores
        them after publishing the next beat, before collecting it)."""
        return self.session.collect(names, copy=False)

    @property
    def last_compute_us(self) -> float:
        return self.session.latencies_us[-1]

    def close(self) -> None:
        self.session.close()


def open_backend(profile: Profile, backend: str, **options):
    """An InterpBackend (options: seed) or a CudaBackend (options: those of CudaSession)."""
    if backend == "interp":
        return InterpBackend(profile, **options)
    if backend == "cuda":
        return CudaBackend(profile, **options)
    raise RuntimeBackendError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")


# ---- the server --------------------------------------------------------------------------------------------


@dataclass
class ServeResult:
    """What a served run produced. Per beat (float64 ``[beats]``, microseconds since the clock's start):
    ``start_us``, ``published_us``, ``done_us``, ``deadline_us``, ``compute_us``; per beat and slot:
    ``input_status`` (int8: IDLE, REAL, SUBSTITUTED), ``admitted``, ``dropped`` (bool). ``outputs`` as
    float32 ``[beats, sessions, *shape]``, NaN where the slot was idle."""

    model: str
    backend: str
    beat_us: float
    deadline_offset_us: float
    outputs: dict[str, np.ndarray]
    input_status: np.ndarray
    admitted: np.ndarray
    dropped: np.ndarray
    start_us: np.ndarray
    published_us: np.ndarray
    done_us: np.ndarray
    deadline_us: np.ndarray
    compute_us: np.ndarray
    input_names: list[str] = field(default_factory=list)

    @property
    def lateness_us(self) -> np.ndarray:
        """Per beat: outputs back minus deadline; > 0 is late."""
        return self.done_us - self.deadline_us

    @property
    def late(self) -> np.ndarray:
        return self.lateness_us > 0

    @property
    def active(self) -> np.ndarray:
        return self.input_status != IDLE

    def summary(self) -> dict:
        """Counts and latency percentiles of the run (the records' last line)."""
        beats = len(self.start_us)

        def pct(values, q):
            return round(float(np.percentile(values, q)), 1) if len(values) else None

        return {
            "beats": beats,
            "sessions": int(self.input_status.shape[1]) if self.input_status.ndim == 2 else 0,
            "late_beats": int(self.late.sum()),
            "real_frames": int((self.input_status == REAL).sum()),
            "substituted_frames": int((self.input_status == SUBSTITUTED).sum()),
            "idle_slots": int((self.input_status == IDLE).sum()),
            "late_outputs": int((self.late[:, None] & self.active).sum()) if beats else 0,
            "admitted": int(self.admitted.sum()),
            "dropped": int(self.dropped.sum()),
            "compute_us": {"p50": pct(self.compute_us, 50), "p99": pct(self.compute_us, 99),
                           "max": pct(self.compute_us, 100)},
            "lateness_us_max": round(float(self.lateness_us.max()), 1) if beats else None,
        }

    def format_summary(self) -> str:
        s = self.summary()
        c = s["compute_us"]
        return (f"{s['beats']} beats x {s['sessions']} sessions on {self.backend} at {self.beat_us / 1e3:g} ms: "
                f"{s['late_beats']} late beats, {s['substituted_frames']} substituted frames "
                f"({s['real_frames']} real, {s['idle_slots']} idle slots), {s['admitted']} admitted, "
                f"{s['dropped']} dropped; beat latency p50 {c['p50']} us, p99 {c['p99']} us, max {c['max']} us")

    def records(self):
        """The record dicts, in file order (see the module docstring)."""
        r1 = lambda v: round(float(v), 1)  # noqa: E731
        yield {"record": "serve", "format": RECORDS_FORMAT, "model": self.model, "backend": self.backend,
               "beat_us": self.beat_us, "deadline_us": self.deadline_offset_us, "beats": len(self.start_us),
               "sessions": int(self.input_status.shape[1]), "inputs": self.input_names, "outputs": list(self.outputs)}
        lateness, late = self.lateness_us, self.late
        for b in range(len(self.start_us)):
            yield {"record": "beat", "beat": b, "start_us": r1(self.start_us[b]), "published_us": r1(self.published_us[b]),
                   "done_us": r1(self.done_us[b]), "deadline_us": r1(self.deadline_us[b]),
                   "compute_us": r1(self.compute_us[b]), "lateness_us": r1(lateness[b]), "late": bool(late[b]),
                   "admitted": np.flatnonzero(self.admitted[b]).tolist(), "dropped": np.flatnonzero(self.dropped[b]).tolist()}
            for s, status in enumerate(self.input_status[b]):
                idle = status == IDLE
                yield {"record": "session", "beat": b, "session": s, "input": INPUT_STATUS[status],
                       "output": "idle" if idle else ("late" if late[b] else "on_time"),
                       "lateness_us": None if idle else r1(lateness[b])}
        yield {"record": "summary", **self.summary()}

    def write_jsonl(self, handle) -> None:
        for rec in self.records():
            handle.write(json.dumps(rec, separators=(",", ":")) + "\n")


class Server:
    """Serves a cohort on ``clock`` through ``backend`` (an InterpBackend or CudaBackend); see the module
    docstring for the beat loop. `run` may be called once."""

    def __init__(self, profile: Profile, clock: BeatClock, backend, fetch: list[str] | None = None):
        """``fetch``: the outputs sent back every beat (default all). A state's update output need not be:
        the state stays on the device. Raises WavecError for a name the profile does not output."""
        self.profile = profile
        self.clock = clock
        self.backend = backend
        self.fetch = check_fetch(profile, fetch)

    def run(self, feed: Feed, schedule: SessionSchedule, beats: int | None = None) -> ServeResult:
        """Serves ``beats`` beats (default: all the feed holds) of ``feed`` under ``schedule``."""
        sessions = self.profile.sessions
        beats = feed.beats if beats is None else beats
        if not 0 <= beats <= feed.beats:
            raise WavecError(f"{beats} beats asked; the recorded inputs hold {feed.beats}")
        if feed.frames and feed.sessions != sessions:
            raise WavecError(f"the feed has {feed.sessions} sessions; the profile has {sessions} slots")
        if len(schedule.spans) != sessions:
            raise WavecError(f"the schedule has {len(schedule.spans)} slots; the profile has {sessions}")
        active, admitted, dropped = schedule.masks(beats)
        reset = admitted | dropped
        status = np.zeros((beats, sessions), np.int8)
        times = {k: np.zeros(beats) for k in ("start", "published", "done", "deadline", "compute")}
        # Written in full before the clock starts: a page of the records first touched during a beat costs that
        # beat a page fault (duplex:1b at 96 sessions stores 25.7 MB a beat).
        outputs = {spec["name"]: np.full((beats, sessions, *spec["shape"]), np.nan, np.float32)
                   for spec in self.profile.meta["outputs"] if spec["name"] in self.fetch}
        clock, backend = self.clock, self.backend
        pending: deque[int] = deque()
        unstored: list[tuple[int, dict]] = []  # a collected beat whose outputs wait for the next publish

        def store() -> None:
            for b, out in unstored:
                for name in self.fetch:  # a backend may return more than was asked for
                    outputs[name][b] = out[name]
            unstored.clear()

        def collect() -> None:
            store()  # the backend's arrays of the previous collect are valid until this one
            b = pending.popleft()
            out = backend.collect(self.fetch)
            times["done"][b] = clock.now_us()
            times["compute"][b] = backend.last_compute_us
            unstored.append((b, out))
            if not backend.ahead:  # publishing runs the next beat over these arrays
                store()

        clock.start()
        for b in range(beats):
            start = clock.start_us(b)
            while True:  # until beat b must start, deliver whatever finishes
                if pending and backend.ready():
                    collect()
                elif clock.now_us() >= start:
                    break
                elif not pending:
                    clock.sleep_until(start)
            while len(pending) > backend.ahead:  # b's halves are still the oldest beat's: wait for it
                collect()
            frames, status[b] = feed.gather(b, active[b], backend.input_buffers())
            times["start"][b], times["deadline"][b] = start, clock.deadline_us(b)
            times["published"][b] = clock.now_us()
            backend.publish(frames, reset[b])
            pending.append(b)
            store()
        while pending:
            collect()
        store()
        for arr in outputs.values():
            arr[~active] = np.nan
        return ServeResult(
            model=str(self.profile.meta.get("model", "")), backend=getattr(backend, "name", type(backend).__name__),
            beat_us=clock.period_us, deadline_offset_us=clock.deadline_offset_us, outputs=outputs,
            input_status=status, admitted=admitted, dropped=dropped,
            start_us=times["start"], published_us=times["published"], done_us=times["done"],
            deadline_us=times["deadline"], compute_us=times["compute"],
            input_names=[spec["name"] for spec in self.profile.meta["inputs"]],
        )


def serve(
    profile: Profile,
    inputs: dict[str, np.ndarray],
    beat_ms: float,
    schedule: SessionSchedule | None = None,
    late_frames: list[tuple[int, int, float]] | None = None,
    beats: int | None = None,
    backend: str = "interp",
    deadline_ms: float | None = None,
    reset: np.ndarray | None = None,
    fetch: list[str] | None = None,
    **options,
) -> ServeResult:
    """Serves recorded ``inputs`` (each float ``[beats, sessions, *frame]``, as `Profile.run` takes them) on a
    ``beat_ms`` clock. ``schedule`` (default: every slot from beat 0 on; or, given ``reset`` as `wavec run`
    reads it, every slot rejoining at its reset beats) says who is in the cohort when; ``late_frames``
    ``(beat, slot, delay_us)`` which frames miss their beat; ``fetch`` which outputs come back (default all).
    ``options`` go to the backend (interp: seed; cuda: those of CudaSession). Raises WavecError for bad
    inputs."""
    if not (isinstance(beat_ms, (int, float)) and math.isfinite(beat_ms) and beat_ms > 0):
        raise WavecError(f"--beat-ms {beat_ms}: the beat period must be a positive number of milliseconds")
    if deadline_ms is not None and not (math.isfinite(deadline_ms) and deadline_ms > 0):
        raise WavecError(f"--deadline-ms {deadline_ms}: the deadline must be a positive number of milliseconds")
    if schedule is not None and reset is not None:
        raise WavecError("give admissions once: a schedule, or reset flags in the inputs, not both")
    frames, reset_flags = check_inputs(profile, inputs, reset)
    if not frames:
        raise WavecError("the profile has no runtime inputs; there is nothing to serve")
    if schedule is None:
        schedule = SessionSchedule.from_reset(reset_flags) if reset is not None else SessionSchedule.always(profile.sessions)
    feed = Feed.with_late_frames(frames, late_frames or [])
    clock = BeatClock(beat_ms * 1e3, None if deadline_ms is None else deadline_ms * 1e3)
    runner = open_backend(profile, backend, **options)
    try:
        return Server(profile, clock, runner, fetch).run(feed, schedule, beats)
    finally:
        runner.close()
