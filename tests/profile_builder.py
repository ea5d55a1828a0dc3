"""Build small profiles by hand, for tests of the targets and the verifier.

A `ProfileBuilder` allocates tensors in the arenas (bump allocation, 16-byte aligned, one slot per session
unless ``shared``), registers inputs, outputs, the reset flags and states in ``meta`` as wavec/profile.py
describes, and turns a list of tasks (parameter blocks from wavec/opcodes.py plus operands, tile, worker,
waits, signal) into the payload table, the parameter table and the weights image::

    pb = ProfileBuilder(sessions=4, workers=2)
    x = pb.input("x", (8,))
    y = pb.output("y", (8,))
    done = pb.task(EwiseParams((8,), (1,), ((1,),), tuple(compile_expr(parse_expr("relu(%0)")))), [x], y)
    profile = pb.build()

`task` returns the counter the task signals (a fresh one unless ``signal`` is given); another task waits on
it with ``waits=[(counter, signals per beat)]``. Tasks keep their order within a worker; task ids are the
order of `task` calls. Nothing here checks the schedule: that is the verifier's and the interpreter's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from wavec.opcodes import OUT, Arena, ConvParams, Params, contiguous_strides
from wavec.payload import MAX_WAITS, PAYLOAD_DTYPE, pack_arenas
from wavec.profile import FORMAT, Profile, param_extent

ALIGN = 16


@dataclass(frozen=True)
class Tensor:
    """An arena slice: one session's ``shape`` (float32, contiguous) at ``offset + s * session_stride``."""

    name: str
    arena: Arena
    offset: int
    session_stride: int
    shape: tuple[int, ...]

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def bytes(self) -> int:
        return 4 * self.n_elems

    @property
    def strides(self) -> tuple[int, ...]:
        return contiguous_strides(self.shape)

    def at(self, elem: int) -> "Tensor":
        """The same tensor with its start moved by ``elem`` elements (for views that begin mid-tensor)."""
        return replace(self, offset=self.offset + 4 * elem)


@dataclass
class TaskSpec:
    params: Params
    inputs: list[Tensor]
    output: Tensor
    worker: int
    sessions: tuple[int, int]
    elems: tuple[int, int]
    waits: list[tuple[int, int]]
    signal: int
    signal_phase: int = 0


@dataclass
class ProfileBuilder:
    sessions: int
    workers: int = 1
    model: str = "test"
    arena_bytes: dict[Arena, int] = field(default_factory=lambda: {a: 0 for a in Arena})
    weights: bytearray = field(default_factory=bytearray)
    tasks: list[TaskSpec] = field(default_factory=list)
    meta_extra: dict = field(default_factory=dict)
    n_counters: int = 1  # counter 0 is the end-of-beat counter

    def __post_init__(self) -> None:
        self.inputs: list[dict] = []
        self.outputs: list[dict] = []
        self.states: list[dict] = []
        self.tensors: list[dict] = []
        self.reset: dict | None = None
        self._reset: Tensor | None = None

    # ---- allocation ---------------------------------------------------------------------------
    def tensor(self, name: str, arena: Arena, shape: tuple[int, ...], shared: bool = False) -> Tensor:
        """Allocates ``shape`` float32 per session (or once, ``shared``) at the end of ``arena``."""
        shape = tuple(int(d) for d in shape)
        nbytes = 4 * int(np.prod(shape, dtype=np.int64))
        stride = 0 if shared else -(-nbytes // ALIGN) * ALIGN
        offset = -(-self.arena_bytes[arena] // ALIGN) * ALIGN
        size = nbytes if shared else stride * self.sessions
        self.arena_bytes[arena] = offset + max(size, 4)
        if arena == Arena.WEIGHTS:
            self.weights.extend(b"\0" * (self.arena_bytes[arena] - len(self.weights)))
        self.tensors.append(
            {"name": name, "arena": arena.name.lower(), "offset": offset, "bytes": nbytes, "session_stride": stride}
        )
        return Tensor(name, arena, offset, stride, shape)

    def weight(self, name: str, data: np.ndarray) -> Tensor:
        """A shared float32 constant in the weights arena, holding ``data``."""
        data = np.ascontiguousarray(data, np.float32)
        t = self.tensor(name, Arena.WEIGHTS, data.shape, shared=True)
        self.weights[t.offset : t.offset + t.bytes] = data.tobytes()
        return t

    def act(self, name: str, shape: tuple[int, ...]) -> Tensor:
        return self.tensor(name, Arena.ACT, shape)

    def input(self, name: str, shape: tuple[int, ...]) -> Tensor:
        t = self.tensor(name, Arena.INPUT, shape)
        self.inputs.append(_binding(t))
        return t

    def output(self, name: str, shape: tuple[int, ...]) -> Tensor:
        t = self.tensor(name, Arena.OUTPUT, shape)
        self.outputs.append(_binding(t))
        return t

    def reset_flags(self) -> Tensor:
        """The per-session float32 reset flag (1.0: reset this beat) in the input arena; shape ()."""
        if self.reset is None:
            t = self.tensor("reset", Arena.INPUT, ())
            self.reset = {"offset": t.offset, "session_stride": t.session_stride}
            self._reset = t
        return self._reset

    def state(self, name: str, init: np.ndarray, output: str | None = None) -> tuple[Tensor, Tensor]:
        """A per-session state with initial value ``init``; returns (state slots, initial value in weights)."""
        init_t = self.weight(f"{name}.init", init)
        t = self.tensor(name, Arena.STATE, init_t.shape)
        self.states.append({**_binding(t), "output": output, "init_offset": init_t.offset})
        return t, init_t

    def counter(self) -> int:
        """A fresh counter id."""
        self.n_counters += 1
        return self.n_counters - 1

    # ---- tasks --------------------------------------------------------------------------------
    def task(
        self,
        params: Params,
        inputs: list[Tensor],
        output: Tensor,
        *,
        worker: int = 0,
        sessions: tuple[int, int] | None = None,
        elems: tuple[int, int] | None = None,
        waits: list[tuple[int, int]] = (),
        signal: int | None = None,
        signal_phase: int = 0,
    ) -> int:
        """Appends one task (a tile: ``sessions`` and flat output ``elems``, default all) to ``worker``'s
        list; returns the counter it signals (``signal_phase``, when not 0, is a second one)."""
        if signal is None:
            signal = self.counter()
        if len(waits) > MAX_WAITS:
            raise ValueError(f"at most {MAX_WAITS} waits per task")
        self.tasks.append(
            TaskSpec(
                params,
                list(inputs),
                output,
                worker,
                sessions or (0, self.sessions),
                elems or (0, params.n_elems),
                list(waits),
                signal,
                signal_phase,
            )
        )
        return signal

    def build(self) -> Profile:
        """The Profile: payload rows grouped by worker (stable), params packed in task order."""
        self.reset_flags()  # every profile has reset flags, read or not
        words: list[np.ndarray] = []
        n_words = 0
        at = []
        for spec in self.tasks:
            block = spec.params.pack()
            at.append(n_words)
            words.append(block)
            n_words += len(block)
        order = sorted(range(len(self.tasks)), key=lambda i: self.tasks[i].worker)
        payloads = np.zeros(len(self.tasks), PAYLOAD_DTYPE)
        worker_tasks = [[0, 0] for _ in range(self.workers)]
        for row, i in enumerate(order):
            spec = self.tasks[i]
            rec = payloads[row]
            rec["opcode"] = int(spec.params.pack()[0])
            rec["worker"] = spec.worker
            rec["task"] = i
            rec["signal"] = spec.signal
            rec["signal_phase"] = spec.signal_phase
            rec["n_waits"] = len(spec.waits)
            for k, (c, n) in enumerate(spec.waits):
                rec["wait_counter"][k] = c
                rec["wait_count"][k] = n
            rec["session_begin"], rec["session_end"] = spec.sessions
            rec["elem_begin"], rec["elem_end"] = spec.elems
            rec["params"] = at[i]
            rec["n_inputs"] = len(spec.inputs)
            arenas = [0] * (OUT + 1)
            for k, t in [*enumerate(spec.inputs), (OUT, spec.output)]:
                rec["offset"][k] = t.offset
                rec["session_stride"][k] = t.session_stride
                arenas[k] = int(t.arena)
            rec["arenas"] = pack_arenas(arenas)
        for w in range(self.workers):
            rows = [row for row, i in enumerate(order) if self.tasks[i].worker == w]
            worker_tasks[w] = [rows[0], rows[-1] + 1] if rows else [len(order), len(order)]
        meta = {
            "format": FORMAT,
            "model": self.model,
            "sessions": self.sessions,
            "workers": self.workers,
            "hw": "test",
            "n_counters": self.n_counters,
            "arena_bytes": {a.name.lower(): int(self.arena_bytes[a]) for a in Arena},
            "worker_tasks": worker_tasks,
            "inputs": self.inputs,
            "reset": self.reset,
            "outputs": self.outputs,
            "states": self.states,
            "tensors": self.tensors,
            "phases": [],
            "bindings": {},
            **self.meta_extra,
        }
        params = np.concatenate(words) if words else np.zeros(0, np.int64)
        meta = {**param_extent(len(params), at), **meta}
        return Profile(
            meta=meta,
            payloads=payloads,
            params=params,
            weights=np.frombuffer(bytes(self.weights), np.uint8).copy(),
        )


def _binding(t: Tensor) -> dict:
    return {"name": t.name, "shape": list(t.shape), "offset": t.offset, "session_stride": t.session_stride,
            "cohort_axis": 0}


def conv_params(x_shape, w_shape, *, stride=None, pads=None, dilation=None, group=1, has_bias=False) -> ConvParams:
    """ConvParams for one session's x ``[batch, c_in, *sp]`` and w ``[c_out, c_in/group, *kernel]`` with
    ONNX attributes (``pads`` as ONNX lists them: all begins, then all ends)."""
    nsp = len(x_shape) - 2
    stride = tuple(stride or (1,) * nsp)
    dilation = tuple(dilation or (1,) * nsp)
    pads = tuple(pads or (0,) * (2 * nsp))
    kernel = tuple(w_shape[2:])
    out_sp = tuple(
        (x_shape[2 + i] + pads[i] + pads[nsp + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
        for i in range(nsp)
    )
    return ConvParams(x_shape[0], x_shape[1], w_shape[0], group, int(has_bias), tuple(x_shape[2:]), out_sp,
                      kernel, stride, pads[:nsp], dilation)
