"""The builder's record: a ``Model`` is a graph of high-level nodes, one session's view of one beat.

Each call (``m.matmul(a, b)``, ``m.attention(...)``) checks shapes and dtypes at once and appends a
``Node`` (op kind, input tensors, attributes, result shapes, and the user's ``file:line``). Two consumers
read the record: ``lower.py`` turns it into the ``wave`` dialect for the compiler, ``reference.py``
evaluates it with float64 numpy (the independent reference). Semantics of each op are stated in its
method's docstring; both consumers implement exactly that.

Session state comes in two forms:
- ``state(name, shape, init)`` / ``state_write(name, value)``: the value at the start of the beat and the
  one it takes for the next beat; written exactly once (checked);
- ``carry(name, shape, init)``: a state that may be updated several times within a beat (``.value``
  reads the latest, ``.value = v`` updates it); its last value is written at the end of the beat. The
  streaming ops use it (``conv1d``'s context, ``kv_ring``'s cache), and a model that runs two steps per
  beat chains them through it.
``beat()`` is this session's beat index (a state counting from 0, reset when the session (re)joins).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from wavec.errors import BuilderError
from wavec.frontends.builder import init as winit

_HERE = os.path.dirname(os.path.abspath(__file__))

# Elementwise functions: name -> arity. Their meaning: numpy's, with
#   silu(x) = x * sigmoid(x); gelu(x) = tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
#   softplus(x) = log(1 + exp(x)); rsqrt(x) = 1 / sqrt(x); swiglu(a, b) = silu(a) * b;
#   where(c, a, b) = a where c != 0 else b; lt/le/gt/ge/eq give 1.0 or 0.0.
EWISE = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "maximum": 2, "minimum": 2, "pow": 2,
    "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "swiglu": 2,
    "neg": 1, "abs": 1, "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "square": 1, "tanh": 1, "sigmoid": 1,
    "relu": 1, "silu": 1, "gelu": 1, "softplus": 1, "sin": 1, "cos": 1,
    "where": 3,
}
REDUCE_KINDS = ("sum", "mean", "max", "min")


def _site() -> str:
    """``file:line`` of the nearest caller outside this package: the user's line."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
    if f is None:
        return "<builder>"
    path = f.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{f.f_lineno}"


@dataclass(eq=False)
class Node:
    kind: str
    inputs: tuple["Tensor", ...]
    attrs: dict
    shapes: tuple[tuple[int, ...], ...]
    where: str
    id: int = 0
    outputs: tuple["Tensor", ...] = ()


class Tensor:
    """One result of a node: a float32 tensor of one session. Arithmetic operators call the model."""

    __slots__ = ("model", "node", "index", "shape", "dtype")
    __array_priority__ = 100  # numpy scalars on the left defer to Tensor's reflected operators

    def __init__(self, model: "Model", node: Node, index: int, shape: tuple[int, ...], dtype: str = "fp32"):
        self.model, self.node, self.index, self.shape, self.dtype = model, node, index, shape, dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.node.kind}#{self.node.id}[{self.index}], {list(self.shape)})"

    def __add__(self, o): return self.model.add(self, o)
    def __radd__(self, o): return self.model.add(o, self)
    def __sub__(self, o): return self.model.sub(self, o)
    def __rsub__(self, o): return self.model.sub(o, self)
    def __mul__(self, o): return self.model.mul(self, o)
    def __rmul__(self, o): return self.model.mul(o, self)
    def __truediv__(self, o): return self.model.div(self, o)
    def __rtruediv__(self, o): return self.model.div(o, self)
    def __neg__(self): return self.model.neg(self)
    def __matmul__(self, o): return self.model.matmul(self, o)


class Carry:
    """A state that may be updated several times in one beat; see the module docstring."""

    def __init__(self, model: "Model", name: str, initial: Tensor):
        self.model, self.name, self.initial, self._value = model, name, initial, initial

    @property
    def value(self) -> Tensor:
        return self._value

    @value.setter
    def value(self, v: Tensor) -> None:
        v = self.model._tensor(v, "carry")
        if v.shape != self.initial.shape:
            raise self.model._error("carry", f"{self.name!r} is {list(self.initial.shape)}, the new value is {list(v.shape)}")
        self._value = v

    @property
    def shape(self) -> tuple[int, ...]:
        return self.initial.shape


class KVRing:
    """A ring cache of ``capacity`` positions of [heads, dim] keys and values (two carries).
    ``write(k, v, pos)`` stores this step's key and value at slot ``pos mod capacity`` and returns the
    whole caches (K, V), each [capacity, heads, dim]; ``m.attention(q, K, V, pos)`` attends to the
    populated slots (slot j holds a position <= pos)."""

    def __init__(self, model: "Model", name: str, capacity: int, heads: int, dim: int):
        self.model, self.name, self.capacity, self.heads, self.dim = model, name, capacity, heads, dim
        self.k = model.carry(f"{name}.k", (capacity, heads, dim))
        self.v = model.carry(f"{name}.v", (capacity, heads, dim))

    def write(self, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        self.k.value = self.model.ring_write(self.k.value, k, pos)
        self.v.value = self.model.ring_write(self.v.value, v, pos)
        return self.k.value, self.v.value


@dataclass
class _Decl:
    name: str
    shape: tuple[int, ...]
    dtype: str
    value: object  # blob value: RandomWeight / ConstantWeight spec or float32 array
    where: str
    tensor: Tensor | None = None


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


@dataclass
class Model:
    """A streaming model under construction. ``seed`` keys every random weight (with its name)."""

    name: str = "model"
    seed: int = 0
    nodes: list[Node] = field(default_factory=list)
    inputs: dict[str, _Decl] = field(default_factory=dict)
    weights: dict[str, _Decl] = field(default_factory=dict)
    states: dict[str, _Decl] = field(default_factory=dict)
    outputs: dict[str, tuple[Tensor, str]] = field(default_factory=dict)
    state_writes: dict[str, tuple[Tensor, str]] = field(default_factory=dict)
    carries: dict[str, Carry] = field(default_factory=dict)
    _beat: Tensor | None = None

    # -- recording ------------------------------------------------------------------------------

    def _error(self, op: str, what: str, where: str | None = None) -> BuilderError:
        return BuilderError(f"{where or _site()}: {op}: {what}")

    def _node(self, kind: str, inputs: Sequence[Tensor], attrs: dict, shapes: Sequence[Sequence[int]]) -> Node:
        node = Node(kind, tuple(inputs), attrs, tuple(tuple(int(d) for d in s) for s in shapes), _site(), len(self.nodes))
        node.outputs = tuple(Tensor(self, node, i, s) for i, s in enumerate(node.shapes))
        self.nodes.append(node)
        return node

    def _tensor(self, v, op: str) -> Tensor:
        """A Tensor of this model; a Python or numpy number becomes a scalar constant."""
        if isinstance(v, Tensor):
            if v.model is not self:
                raise self._error(op, "the tensor belongs to another Model")
            return v
        if isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool):
            return self.const(np.float32(v))
        raise self._error(op, f"expected a Tensor or a number, got {type(v).__name__}")

    def _fresh(self, op: str, name: str, table: dict) -> None:
        if not isinstance(name, str) or not name or any(c.isspace() or c == '"' for c in name):
            raise self._error(op, f"name {name!r} must be a non-empty string without spaces or quotes")
        if name in table or (table is not self.inputs and (name in self.weights or name in self.states)):
            raise self._error(op, f"name {name!r} is already declared; names of weights and states are unique")

    @staticmethod
    def _shape(shape, op: str, model: "Model") -> tuple[int, ...]:
        try:
            out = tuple(int(d) for d in shape)
        except TypeError as e:
            raise model._error(op, f"shape {shape!r} is not a sequence of whole numbers") from e
        if any(d < 1 for d in out):
            raise model._error(op, f"shape {list(out)} has a dimension < 1")
        return out

    def _dtype(self, dtype: str, op: str, allowed: Sequence[str]) -> str:
        if dtype not in allowed:
            raise self._error(op, f"dtype {dtype!r} is not supported here; use one of {', '.join(allowed)}")
        return dtype

    # -- session interface -------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int], dtype: str = "fp32") -> Tensor:
        """This beat's frame of model input ``name`` (float32, one session)."""
        self._fresh("input", name, self.inputs)
        shape = self._shape(shape, "input", self)
        self._dtype(dtype, "input", ("fp32",))
        t = self._node("input", [], {"name": name}, [shape]).outputs[0]
        self.inputs[name] = _Decl(name, shape, dtype, None, t.node.where, t)
        return t

    def weight(self, name: str, shape: Sequence[int], dtype: str = "fp32", init="random", *,
               scale: float | None = None, fan_in: int | None = None) -> Tensor:
        """A tensor shared by the cohort; ``init`` as in frontends/builder/init.py; ``bf16`` rounds the
        values to bfloat16 (computed as float32). Declaring a weight again with the same shape, dtype and
        a random init returns the same tensor (a layer run twice per beat shares its weights)."""
        shape = self._shape(shape, "weight", self)
        old = self.weights.get(name)
        if old is not None:
            if old.shape != shape or old.dtype != dtype or not (isinstance(init, str) and init in ("random", "zeros", "ones")):
                raise self._error("weight", f"{name!r} is declared again as {list(shape)} {dtype} (first at {old.where} "
                                  f"as {list(old.shape)} {old.dtype}); give weights unique names")
            return old.tensor
        self._fresh("weight", name, self.weights)
        self._dtype(dtype, "weight", winit.DTYPES)
        try:
            value = winit.resolve(init, name, shape, dtype, self.seed, scale, fan_in)
        except (ValueError, KeyError, FileNotFoundError, OSError) as e:
            raise self._error("weight", f"{name!r}: {e}") from e
        t = self._node("weight", [], {"name": name}, [shape]).outputs[0]
        t.dtype = dtype
        self.weights[name] = _Decl(name, shape, dtype, value, t.node.where, t)
        return t

    def state(self, name: str, shape: Sequence[int], dtype: str = "fp32", init="zeros") -> Tensor:
        """The value of persistent state ``name`` at the start of the beat (per session, float32; the
        initial value when the session joins). Give its next value with ``state_write`` once."""
        self._fresh("state", name, self.states)
        shape = self._shape(shape, "state", self)
        self._dtype(dtype, "state", ("fp32",))
        if isinstance(init, str) and init == "random":
            raise self._error("state", f"{name!r}: a state starts from 'zeros', 'ones', a number or an array, not 'random'")
        try:
            value = winit.resolve(init, name, shape, "fp32", self.seed, None, None)
        except (ValueError, KeyError, FileNotFoundError, OSError) as e:
            raise self._error("state", f"{name!r}: {e}") from e
        t = self._node("state", [], {"name": name}, [shape]).outputs[0]
        self.states[name] = _Decl(name, shape, dtype, value, t.node.where, t)
        return t

    def state_write(self, name: str | Tensor, value: Tensor) -> None:
        """The value state ``name`` (or the state tensor itself) takes for the next beat; exactly once."""
        if isinstance(name, Tensor):
            if name.node.kind != "state":
                raise self._error("state_write", f"{name!r} is not a state read; pass the state's name or the tensor m.state returned")
            name = name.node.attrs["name"]
        if name not in self.states:
            raise self._error("state_write", f"state {name!r} was never declared with m.state")
        if name in self.state_writes:
            raise self._error("state_write", f"state {name!r} is written twice (first at {self.state_writes[name][1]})")
        if any(c.name == name for c in self.carries.values()):
            raise self._error("state_write", f"state {name!r} is a carry; update it with carry.value = ...")
        value = self._tensor(value, "state_write")
        decl = self.states[name]
        if value.shape != decl.shape:
            raise self._error("state_write", f"state {name!r} is {list(decl.shape)}, the value is {list(value.shape)}")
        self.state_writes[name] = (value, _site())

    def output(self, name: str, value: Tensor) -> None:
        """This beat's output ``name``."""
        if name in self.outputs:
            raise self._error("output", f"output {name!r} is given twice")
        if not isinstance(name, str) or not name or any(c.isspace() or c == '"' for c in name):
            raise self._error("output", f"name {name!r} must be a non-empty string without spaces or quotes")
        self.outputs[name] = (self._tensor(value, "output"), _site())

    def carry(self, name: str, shape: Sequence[int], init="zeros") -> Carry:
        """A state updated any number of times in a beat (see the module docstring). Asking again for
        a carry of the same name and shape returns it (a layer run twice per beat chains its state)."""
        if name in self.carries:
            c = self.carries[name]
            if c.shape != tuple(shape):
                raise self._error("carry", f"{name!r} is {list(c.shape)} (declared at {c.initial.node.where}), asked again as {list(shape)}")
            return c
        c = Carry(self, name, self.state(name, shape, init=init))
        self.carries[name] = c
        return c

    def beat(self) -> Tensor:
        """This session's beat index as a [1] tensor: 0 at the beat the session joins, then 1, 2, ..."""
        if self._beat is None:
            c = self.carry("beat", (1,))
            self._beat = c.value
            c.value = self.add(c.value, 1.0)
        return self._beat

    def kv_ring(self, name: str, capacity: int, heads: int, dim: int) -> KVRing:
        """A ring cache (see KVRing) of states ``<name>.k`` and ``<name>.v``."""
        if capacity < 1:
            raise self._error("kv_ring", f"capacity {capacity} must be >= 1")
        return KVRing(self, name, int(capacity), int(heads), int(dim))

    def const(self, value) -> Tensor:
        """A compile-time constant (small arrays: iota, frequencies, scalars)."""
        array = np.asarray(value, np.float32)
        return self._node("const", [], {"value": array}, [array.shape]).outputs[0]

    def finish(self) -> None:
        """Writes every carry's last value; checks every state is written. Idempotent."""
        for c in self.carries.values():
            if c.name not in self.state_writes:
                self.state_writes[c.name] = (c.value, c.initial.node.where)
        for name, decl in self.states.items():
            if name not in self.state_writes:
                raise BuilderError(f"{decl.where}: state: state {name!r} is never written; "
                                   f"give its next value with m.state_write({name!r}, value)")
        if not self.outputs:
            raise BuilderError(f"{self.name}: the model has no outputs; add m.output(name, tensor)")

    # -- generic ops -------------------------------------------------------------------------------

    def ewise(self, fn: str, *args) -> Tensor:
        """``fn`` (a name of EWISE) over broadcast operands."""
        if fn not in EWISE:
            raise self._error(fn, f"unknown elementwise function; one of {', '.join(sorted(EWISE))}")
        if len(args) != EWISE[fn]:
            raise self._error(fn, f"takes {EWISE[fn]} operands, got {len(args)}")
        ts = [self._tensor(a, fn) for a in args]
        out = _broadcast([t.shape for t in ts])
        if out is None:
            raise self._error(fn, f"shapes {' and '.join(str(list(t.shape)) for t in ts)} do not broadcast")
        return self._node("ewise", ts, {"fn": fn}, [out]).outputs[0]

    def add(self, a, b): return self.ewise("add", a, b)
    def sub(self, a, b): return self.ewise("sub", a, b)
    def mul(self, a, b): return self.ewise("mul", a, b)
    def div(self, a, b): return self.ewise("div", a, b)
    def maximum(self, a, b): return self.ewise("maximum", a, b)
    def minimum(self, a, b): return self.ewise("minimum", a, b)
    def neg(self, x): return self.ewise("neg", x)
    def abs(self, x): return self.ewise("abs", x)
    def exp(self, x): return self.ewise("exp", x)
    def log(self, x): return self.ewise("log", x)
    def sqrt(self, x): return self.ewise("sqrt", x)
    def rsqrt(self, x): return self.ewise("rsqrt", x)
    def tanh(self, x): return self.ewise("tanh", x)
    def sigmoid(self, x): return self.ewise("sigmoid", x)
    def relu(self, x): return self.ewise("relu", x)
    def silu(self, x): return self.ewise("silu", x)
    def gelu(self, x): return self.ewise("gelu", x)
    def softplus(self, x): return self.ewise("softplus", x)
    def swiglu(self, gate, up): return self.ewise("swiglu", gate, up)
    def where(self, cond, a, b): return self.ewise("where", cond, a, b)

    def matmul(self, a, b) -> Tensor:
        """numpy matmul: a [..., M, K] or [K], b [..., K, N] (rank >= 2); batch axes broadcast."""
        a, b = self._tensor(a, "matmul"), self._tensor(b, "matmul")
        if b.rank < 2:
            raise self._error("matmul", f"the right operand must have rank >= 2, got {list(b.shape)}")
        if a.shape[-1] != b.shape[-2]:
            raise self._error("matmul", f"contraction mismatch: {list(a.shape)} @ {list(b.shape)} "
                              f"({a.shape[-1]} != {b.shape[-2]})")
        if a.rank == 1:
            out = (*b.shape[:-2], b.shape[-1])
        else:
            batch = _broadcast([a.shape[:-2], b.shape[:-2]])
            if batch is None:
                raise self._error("matmul", f"batch axes of {list(a.shape)} and {list(b.shape)} do not broadcast")
            out = (*batch, a.shape[-2], b.shape[-1])
        return self._node("matmul", [a, b], {}, [out]).outputs[0]

    def linear(self, x, w, b=None) -> Tensor:
        """x @ w (+ b)."""
        y = self.matmul(x, w)
        return y if b is None else self.add(y, b)

    def reduce(self, kind: str, x, axes: int | Sequence[int], keepdims: bool = False) -> Tensor:
        """sum / mean / max / min over ``axes``."""
        x = self._tensor(x, f"reduce {kind}")
        if kind not in REDUCE_KINDS:
            raise self._error("reduce", f"kind {kind!r}; one of {', '.join(REDUCE_KINDS)}")
        axes = [axes] if isinstance(axes, int) else list(axes)
        norm = sorted({a % x.rank for a in axes if -x.rank <= a < x.rank})
        if len(norm) != len(axes):
            raise self._error(f"reduce {kind}", f"axes {axes} invalid (or repeated) for rank {x.rank}")
        out = [1 if i in norm else d for i, d in enumerate(x.shape) if keepdims or i not in norm]
        return self._node("reduce", [x], {"kind": kind, "axes": norm, "keepdims": bool(keepdims)}, [out]).outputs[0]

    def sum(self, x, axes, keepdims=False): return self.reduce("sum", x, axes, keepdims)
    def mean(self, x, axes, keepdims=False): return self.reduce("mean", x, axes, keepdims)

    def _axis(self, x: Tensor, axis: int, op: str) -> int:
        if not -x.rank <= axis < x.rank:
            raise self._error(op, f"axis {axis} is out of range for {list(x.shape)}")
        return axis % x.rank

    def softmax(self, x, axis: int = -1) -> Tensor:
        x = self._tensor(x, "softmax")
        return self._node("softmax", [x], {"axis": self._axis(x, axis, "softmax")}, [x.shape]).outputs[0]

    def _norm_params(self, op: str, x: Tensor, *params) -> list[Tensor]:
        out = []
        for p in params:
            p = self._tensor(p, op)
            if p.shape != (x.shape[-1],):
                raise self._error(op, f"parameter is {list(p.shape)}, expected [{x.shape[-1]}] (the last axis of {list(x.shape)})")
            out.append(p)
        return out

    def layer_norm(self, x, gamma, beta, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
        x = self._tensor(x, "layer_norm")
        g, b = self._norm_params("layer_norm", x, gamma, beta)
        return self._node("layer_norm", [x, g, b], {"eps": float(eps)}, [x.shape]).outputs[0]

    def rms_norm(self, x, gamma, eps: float = 1e-6) -> Tensor:
        """x / sqrt(mean(x^2) + eps) * gamma over the last axis."""
        x = self._tensor(x, "rms_norm")
        (g,) = self._norm_params("rms_norm", x, gamma)
        return self._node("rms_norm", [x, g], {"eps": float(eps)}, [x.shape]).outputs[0]

    def rope(self, x, pos, base: float = 10000.0) -> Tensor:
        """Rotary embedding at position ``pos`` ([1]) over the last axis D (even), halves convention:
        with f_i = base^(-2i/D), a = pos f: out = [x1 cos a - x2 sin a, x2 cos a + x1 sin a]."""
        x, pos = self._tensor(x, "rope"), self._tensor(pos, "rope")
        if x.shape[-1] % 2:
            raise self._error("rope", f"the last axis of {list(x.shape)} must be even")
        if pos.shape != (1,):
            raise self._error("rope", f"pos must be [1], got {list(pos.shape)}")
        return self._node("rope", [x, pos], {"base": float(base)}, [x.shape]).outputs[0]

    # -- shape ops ---------------------------------------------------------------------------------

    def concat(self, xs: Sequence, axis: int = 0) -> Tensor:
        ts = [self._tensor(x, "concat") for x in xs]
        if not ts:
            raise self._error("concat", "nothing to concatenate")
        axis = self._axis(ts[0], axis, "concat")
        for t in ts[1:]:
            if t.rank != ts[0].rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if i != axis):
                raise self._error("concat", f"shapes {[list(t.shape) for t in ts]} differ off axis {axis}")
        out = list(ts[0].shape)
        out[axis] = sum(t.shape[axis] for t in ts)
        return self._node("concat", ts, {"axis": axis}, [out]).outputs[0]

    def slice(self, x, axis: int, start: int, stop: int, step: int = 1) -> Tensor:
        """x[..., start:stop:step, ...] along ``axis`` (step > 0)."""
        x = self._tensor(x, "slice")
        axis = self._axis(x, axis, "slice")
        n = x.shape[axis]
        if step < 1 or not 0 <= start < stop <= n:
            raise self._error("slice", f"[{start}:{stop}:{step}] on axis {axis} of {list(x.shape)} is empty or out of range")
        out = list(x.shape)
        out[axis] = len(range(start, stop, step))
        return self._node("slice", [x], {"axis": axis, "start": start, "step": step}, [out]).outputs[0]

    def split(self, x, sizes: Sequence[int], axis: int = -1) -> list[Tensor]:
        x = self._tensor(x, "split")
        axis = self._axis(x, axis, "split")
        if sum(sizes) != x.shape[axis]:
            raise self._error("split", f"sizes {list(sizes)} do not add up to {x.shape[axis]} (axis {axis} of {list(x.shape)})")
        out, at = [], 0
        for s in sizes:
            out.append(self.slice(x, axis, at, at + s))
            at += s
        return out

    def reshape(self, x, shape: Sequence[int]) -> Tensor:
        x = self._tensor(x, "reshape")
        shape = list(shape)
        if shape.count(-1) == 1:
            known = math.prod(d for d in shape if d != -1)
            if known and math.prod(x.shape) % known == 0:
                shape[shape.index(-1)] = math.prod(x.shape) // known
        shape = self._shape(shape, "reshape", self)
        if math.prod(shape) != math.prod(x.shape):
            raise self._error("reshape", f"{list(x.shape)} ({math.prod(x.shape)} elements) cannot become {list(shape)}")
        return self._node("reshape", [x], {}, [shape]).outputs[0]

    def transpose(self, x, perm: Sequence[int]) -> Tensor:
        x = self._tensor(x, "transpose")
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(x.rank)):
            raise self._error("transpose", f"perm {perm} is not a permutation of the axes of {list(x.shape)}")
        return self._node("transpose", [x], {"perm": perm}, [[x.shape[p] for p in perm]]).outputs[0]

    # -- streaming and sequence ops -------------------------------------------------------------------

    def conv1d(self, x, w, b=None, *, name: str, dilation: int = 1, groups: int = 1) -> Tensor:
        """Causal streaming convolution: x [C_in, T] (this beat's T frames), w [C_out, C_in/groups, K],
        b [C_out]. y[:, t] = b + sum_k w[:, :, k] . full[:, t + k*dilation] where full = [context, x]
        and the context (carry ``<name>.context``, [C_in, (K-1)*dilation], zeros at join) is the last
        frames of the stream before this call. Calling it twice with one name chains the context."""
        x, w = self._tensor(x, "conv1d"), self._tensor(w, "conv1d")
        if x.rank != 2 or w.rank != 3:
            raise self._error("conv1d", f"expects x [C_in, T] and w [C_out, C_in/groups, K], got {list(x.shape)} and {list(w.shape)}")
        c_in, _ = x.shape
        c_out, cg, k = w.shape
        if groups < 1 or c_in % groups or c_out % groups or cg * groups != c_in:
            raise self._error("conv1d", f"w {list(w.shape)} with groups={groups} does not fit x with {c_in} channels")
        bias = []
        if b is not None:
            b = self._tensor(b, "conv1d")
            if b.shape != (c_out,):
                raise self._error("conv1d", f"bias is {list(b.shape)}, expected [{c_out}]")
            bias = [b]
        ctx_len = (k - 1) * dilation
        attrs = {"dilation": int(dilation), "groups": int(groups), "bias": bool(bias)}
        if ctx_len == 0:
            return self._node("conv1d", [x, w, *bias], attrs, [(c_out, x.shape[1])]).outputs[0]
        c = self.carry(f"{name}.context", (c_in, ctx_len))
        node = self._node("conv1d", [x, w, *bias, c.value], {**attrs, "context": True},
                          [(c_out, x.shape[1]), (c_in, ctx_len)])
        c.value = node.outputs[1]
        return node.outputs[0]

    def conv_transpose1d(self, x, w, b=None, *, name: str, stride: int) -> Tensor:
        """Streaming transposed convolution: x [C_in, T], w [C_in, C_out, K] (K >= stride), b [C_out].
        Over the whole stream, input frame t adds w[:, :, k]^T x[:, t] at output position t*stride + k;
        this call returns the T*stride positions its frames start, [C_out, T*stride] (+ b), with the
        K - stride positions the previous frames spilled over added (carry ``<name>.tail``)."""
        x, w = self._tensor(x, "conv_transpose1d"), self._tensor(w, "conv_transpose1d")
        if x.rank != 2 or w.rank != 3 or w.shape[0] != x.shape[0]:
            raise self._error("conv_transpose1d", f"expects x [C_in, T] and w [C_in, C_out, K], got {list(x.shape)} and {list(w.shape)}")
        c_in, t = x.shape
        _, c_out, k = w.shape
        if stride < 1 or k < stride:
            raise self._error("conv_transpose1d", f"kernel {k} must be >= stride {stride} >= 1")
        tail = k - stride
        if tail > t * stride:
            raise self._error("conv_transpose1d", f"kernel {k} spills over more than one beat ({t} frames x stride {stride})")
        ins = [x, w]
        if b is not None:
            b = self._tensor(b, "conv_transpose1d")
            if b.shape != (c_out,):
                raise self._error("conv_transpose1d", f"bias is {list(b.shape)}, expected [{c_out}]")
            ins.append(b)
        attrs = {"stride": int(stride), "bias": b is not None}
        if tail == 0:
            return self._node("conv_transpose1d", ins, attrs, [(c_out, t * stride)]).outputs[0]
        c = self.carry(f"{name}.tail", (c_out, tail))
        node = self._node("conv_transpose1d", [*ins, c.value], {**attrs, "tail": True},
                          [(c_out, t * stride), (c_out, tail)])
        c.value = node.outputs[1]
        return node.outputs[0]

    def _cell_check(self, op: str, x: Tensor, hs: Sequence[Tensor], w: Tensor, r: Tensor, gates: int,
                    biases: Sequence) -> tuple[int, list[Tensor]]:
        hidden = hs[0].shape[-1]
        if x.rank not in (1, 2):
            raise self._error(op, f"x must be [I] or [B, I], got {list(x.shape)}")
        for h in hs:
            if h.shape != (*x.shape[:-1], hidden):
                raise self._error(op, f"state {list(h.shape)} does not match x {list(x.shape)} (expected {[*x.shape[:-1], hidden]})")
        if w.shape != (x.shape[-1], gates * hidden):
            raise self._error(op, f"W is {list(w.shape)}, expected [{x.shape[-1]}, {gates * hidden}]")
        if r.shape != (hidden, gates * hidden):
            raise self._error(op, f"R is {list(r.shape)}, expected [{hidden}, {gates * hidden}]")
        out = []
        for bb in biases:
            bb = self._tensor(bb, op)
            if bb.shape != (gates * hidden,):
                raise self._error(op, f"bias is {list(bb.shape)}, expected [{gates * hidden}]")
            out.append(bb)
        return hidden, out

    def lstm_cell(self, x, h, c, w, r, b) -> tuple[Tensor, Tensor]:
        """One LSTM step, gates (i, f, g, o) = x W + h R + b, W [I, 4H], R [H, 4H], b [4H]:
        c' = sigmoid(f) c + sigmoid(i) tanh(g); h' = sigmoid(o) tanh(c'). Returns (h', c')."""
        x, h, c, w, r = (self._tensor(v, "lstm_cell") for v in (x, h, c, w, r))
        _, (b,) = self._cell_check("lstm_cell", x, [h, c], w, r, 4, [b])
        node = self._node("lstm_cell", [x, h, c, w, r, b], {}, [h.shape, c.shape])
        return node.outputs[0], node.outputs[1]

    def gru_cell(self, x, h, w, r, bw, br) -> Tensor:
        """One GRU step (PyTorch's), gates (r, z, n), W [I, 3H], R [H, 3H], bw, br [3H]:
        r = sigmoid(xW_r + bw_r + hR_r + br_r), z likewise, n = tanh(xW_n + bw_n + r (hR_n + br_n)),
        h' = (1 - z) n + z h."""
        x, h, w, r = (self._tensor(v, "gru_cell") for v in (x, h, w, r))
        _, (bw, br) = self._cell_check("gru_cell", x, [h], w, r, 3, [bw, br])
        return self._node("gru_cell", [x, h, w, r, bw, br], {}, [h.shape]).outputs[0]

    def ssm_step(self, x, dt, a, b, c, d, h) -> tuple[Tensor, Tensor]:
        """One selective state-space step (Mamba2, one group): x [H, P], dt [H] (> 0, after softplus),
        a [H] (negative), b, c [N], d [H], h [H, P, N]:
        h' = exp(dt a) h + (dt x) outer b; y = h' . c + d x. Returns (y [H, P], h')."""
        x, dt, a, b, c, d, h = (self._tensor(v, "ssm_step") for v in (x, dt, a, b, c, d, h))
        if x.rank != 2 or h.rank != 3:
            raise self._error("ssm_step", f"x must be [H, P] and h [H, P, N], got {list(x.shape)} and {list(h.shape)}")
        nh, p = x.shape
        n = h.shape[2]
        want = {"dt": (dt, (nh,)), "a": (a, (nh,)), "d": (d, (nh,)), "b": (b, (n,)), "c": (c, (n,)), "h": (h, (nh, p, n))}
        for what, (t, s) in want.items():
            if t.shape != s:
                raise self._error("ssm_step", f"{what} is {list(t.shape)}, expected {list(s)}")
        node = self._node("ssm_step", [x, dt, a, b, c, d, h], {}, [x.shape, h.shape])
        return node.outputs[0], node.outputs[1]

    def ring_write(self, cache, new, pos) -> Tensor:
        """cache [C, ...] with slot (pos mod C) replaced by ``new`` [...]; pos [1]."""
        cache, new, pos = (self._tensor(v, "ring_write") for v in (cache, new, pos))
        if cache.shape[1:] != new.shape or pos.shape != (1,):
            raise self._error("ring_write", f"cache {list(cache.shape)}, new {list(new.shape)}, pos {list(pos.shape)}: "
                              f"expected new = cache[0] and pos [1]")
        return self._node("ring_write", [cache, new, pos], {}, [cache.shape]).outputs[0]

    def attention(self, q, k, v, pos=None, scale: float | None = None) -> Tensor:
        """One query position over a cache: q [Hq, D], k and v [C, Hkv, D] with Hq a multiple of Hkv
        (grouped-query: query head i reads kv head i // (Hq/Hkv)). softmax over the slots j with
        j <= pos (all when pos is None) of scale * q . k_j (scale 1/sqrt(D) by default), times v."""
        q, k, v = (self._tensor(t, "attention") for t in (q, k, v))
        if q.rank != 2 or k.rank != 3 or v.shape != k.shape or k.shape[2] != q.shape[1]:
            raise self._error("attention", f"expects q [Hq, D], k and v [C, Hkv, D]; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        if q.shape[0] % k.shape[1]:
            raise self._error("attention", f"{q.shape[0]} query heads are not a multiple of {k.shape[1]} kv heads")
        ins = [q, k, v]
        if pos is not None:
            pos = self._tensor(pos, "attention")
            if pos.shape != (1,):
                raise self._error("attention", f"pos must be [1], got {list(pos.shape)}")
            ins.append(pos)
        s = float(1.0 / math.sqrt(q.shape[1]) if scale is None else scale)
        return self._node("attention", ins, {"scale": s, "masked": pos is not None}, [q.shape]).outputs[0]

    # -- whole model -------------------------------------------------------------------------------

    def parameter_count(self) -> int:
        return sum(math.prod(d.shape) for d in self.weights.values())

    def lower(self):
        """The wave IR and weight blob (frontends/builder/lower.py): a graph for wavec.driver.compile_graph."""
        from wavec.frontends.builder.lower import lower_model

        return lower_model(self)

    def compile(self, *, sessions: int, workers: int | None = None, hw: str = "h200", pipeline: str | None = None):
        from wavec.driver import compile_graph

        return compile_graph(self.lower(), sessions=sessions, workers=workers, hw=hw, pipeline=pipeline)
