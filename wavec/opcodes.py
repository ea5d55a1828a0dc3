"""The task instruction set: what one task of each opcode computes, and how its parameters are packed.

This module is the contract between the compiler (which writes parameters), the targets (the numpy
interpreter and the CUDA kernel, which execute them) and the verifier (which derives every byte a task
touches from them). It imports numpy alone, so the runtime path stays free of xDSL.

Conventions, shared by every opcode:
- All runtime tensors are float32; element offsets and strides are in elements (4 bytes).
- A task covers the sessions ``[session_begin, session_end)`` and the flat output elements
  ``[elem_begin, elem_end)`` of one session's iteration space (row-major over ``shape``).
- Operand ``k`` of session ``s`` starts at byte ``offset[k] + s * session_stride[k]`` of its arena; a
  view's strides (which may be negative or zero) are relative to that start.
- Inputs occupy operand slots ``0 .. n_inputs-1``; the output is always slot ``OUT`` (4).
- Parameters live in one int64 table (``params.bin``); a payload names its block by word offset.
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass

import numpy as np

MAX_INPUTS = 4
OUT = 4
ELEM_BYTES = 4
# Columns: a weight MATMUL's tiles start and end at multiples of this, so a body may load a weight row
# 16 bytes (one float4) at a time.
GEMM_COLS = 4
# Rows: a MATMUL whose b is per session and k-contiguous (attention's K^T read in place from a ring cache) with
# at most this many rows a matrix of b runs on the kernel's column GEMM, which reads each column once for all
# of them; wave-to-wpk reads a transpose in place for such matmuls only.
COLUMN_GEMM_ROWS = 8
# Matrices: a one-session tile of the column GEMM holds at most this many matrices of b (attention's heads).
COLUMN_GEMM_BLOCKS = 64


class Arena(enum.IntEnum):
    """Fixed device memory regions. INPUT and OUTPUT are double-buffered: beat b uses half b % 2."""

    WEIGHTS = 0  # read-only, shared by the cohort (also state initial values)
    STATE = 1  # one slot per session, persistent across beats
    ACT = 2  # activations, offsets recycled by liveness within a beat
    INPUT = 3  # this beat's frames and reset flags
    OUTPUT = 4  # this beat's outputs


DOUBLE_BUFFERED = (Arena.INPUT, Arena.OUTPUT)


class Opcode(enum.IntEnum):
    EWISE = 1
    MATMUL = 2
    CONV = 3
    REDUCE = 4


# --------------------------------------------------------------------------------------------
# Elementwise expressions: text form (in the IR) <-> bytecode (in params) <-> numpy / CUDA C.

UNARY = {
    "neg": ("np.negative(a)", "-a"),
    "abs": ("np.abs(a)", "fabsf(a)"),
    "relu": ("np.maximum(a, np.float32(0))", "fmaxf(a, 0.0f)"),
    "sigmoid": ("np.float32(1) / (np.float32(1) + np.exp(-a))", "1.0f / (1.0f + expf(-a))"),
    "tanh": ("np.tanh(a)", "tanhf(a)"),
    "exp": ("np.exp(a)", "expf(a)"),
    "log": ("np.log(a)", "logf(a)"),
    "sqrt": ("np.sqrt(a)", "sqrtf(a)"),
    "reciprocal": ("np.float32(1) / a", "1.0f / a"),
    "floor": ("np.floor(a)", "floorf(a)"),
    "ceil": ("np.ceil(a)", "ceilf(a)"),
    "sin": ("np.sin(a)", "sinf(a)"),
    "cos": ("np.cos(a)", "cosf(a)"),
    "softplus": ("np.log1p(np.exp(a))", "log1pf(expf(a))"),
    "sign": ("np.sign(a)", "(float)((a > 0.0f) - (a < 0.0f))"),
    "not": ("(a == 0).astype(np.float32)", "(a == 0.0f ? 1.0f : 0.0f)"),
    "round": ("np.round(a)", "rintf(a)"),
}
BINARY = {
    "add": ("a + b", "__fadd_rn(a, b)"),  # _rn: nvcc never contracts them into an fma where they are inlined
    "sub": ("a - b", "__fsub_rn(a, b)"),  # together (generated epilogues), so the bits are the bytecode's
    "mul": ("a * b", "__fmul_rn(a, b)"),
    "div": ("a / b", "a / b"),
    "pow": ("np.power(a, b)", "powf(a, b)"),
    "max": ("np.maximum(a, b)", "fmaxf(a, b)"),
    "min": ("np.minimum(a, b)", "fminf(a, b)"),
    "eq": ("(a == b).astype(np.float32)", "(a == b ? 1.0f : 0.0f)"),
    "lt": ("(a < b).astype(np.float32)", "(a < b ? 1.0f : 0.0f)"),
    "gt": ("(a > b).astype(np.float32)", "(a > b ? 1.0f : 0.0f)"),
    "le": ("(a <= b).astype(np.float32)", "(a <= b ? 1.0f : 0.0f)"),
    "ge": ("(a >= b).astype(np.float32)", "(a >= b ? 1.0f : 0.0f)"),
    "fmod": ("np.fmod(a, b)", "fmodf(a, b)"),
}
TERNARY = {"select": ("np.where(c != 0, a, b)", "(c != 0.0f ? a : b)")}

UNARY_CODES = {name: i for i, name in enumerate(UNARY)}
BINARY_CODES = {name: i for i, name in enumerate(BINARY)}
TERNARY_CODES = {name: i for i, name in enumerate(TERNARY)}


class Insn(enum.IntEnum):
    INPUT = 1
    CONST = 2
    UNARY = 3
    BINARY = 4
    TERNARY = 5


def _word(kind: Insn, code: int, arg: int) -> int:
    return (int(kind) << 40) | (code << 32) | (arg & 0xFFFFFFFF)


def decode_insn(word: int) -> tuple[Insn, int, int]:
    return Insn(word >> 40), (word >> 32) & 0xFF, word & 0xFFFFFFFF


def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def bits_f32(bits: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", bits), np.float32)[0]


@dataclass(frozen=True)
class Expr:
    """A node of an elementwise expression: an input ``%i``, a float32 constant, or an applied function."""

    kind: str  # "input" | "const" | "call"
    value: object  # input index, float value, or function name
    args: tuple["Expr", ...] = ()

    def __str__(self) -> str:
        if self.kind == "input":
            return f"%{self.value}"
        if self.kind == "const":
            return repr(float(np.float32(self.value)))
        return f"{self.value}({', '.join(str(a) for a in self.args)})"

    def inputs(self) -> set[int]:
        if self.kind == "input":
            return {int(self.value)}  # type: ignore[arg-type]
        return set().union(*(a.inputs() for a in self.args)) if self.args else set()

    def substitute(self, mapping: dict[int, "Expr"]) -> "Expr":
        """Replaces each input ``%i`` by ``mapping[i]``: how fusion composes a producer into its user."""
        if self.kind == "input":
            return mapping[int(self.value)]  # type: ignore[arg-type]
        if self.kind == "const":
            return self
        return Expr("call", self.value, tuple(a.substitute(mapping) for a in self.args))


ARITY = {**{n: 1 for n in UNARY}, **{n: 2 for n in BINARY}, **{n: 3 for n in TERNARY}}
_TOKEN = re.compile(r"\s*(?:(%\d+)|([A-Za-z_]\w*)|([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan))|(.))")


def parse_expr(text: str) -> Expr:
    """Parses ``add(%0, mul(%1, 0.5))``. Raises ValueError naming the position of a malformed token."""
    tokens = [m for m in _TOKEN.finditer(text) if m.group(0).strip()]
    pos = 0

    def expect(ch: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos].group(4) != ch:
            raise ValueError(f"expression {text!r}: expected {ch!r} at token {pos}")
        pos += 1

    def parse() -> Expr:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"expression {text!r} ends early")
        tok = tokens[pos]
        pos += 1
        if tok.group(1):
            return Expr("input", int(tok.group(1)[1:]))
        if tok.group(3):
            return Expr("const", float(np.float32(float(tok.group(3)))))
        name = tok.group(2)
        if name in ("inf", "nan"):
            return Expr("const", float(name))
        if name not in ARITY:
            raise ValueError(f"expression {text!r}: unknown function {name!r}")
        expect("(")
        args = [parse()]
        while pos < len(tokens) and tokens[pos].group(4) == ",":
            pos += 1
            args.append(parse())
        expect(")")
        if len(args) != ARITY[name]:
            raise ValueError(f"expression {text!r}: {name} takes {ARITY[name]} arguments, got {len(args)}")
        return Expr("call", name, tuple(args))

    expr = parse()
    if pos != len(tokens):
        raise ValueError(f"expression {text!r}: trailing text at token {pos}")
    return expr


def compile_expr(expr: Expr) -> list[int]:
    """Postfix bytecode for a stack machine (at most 16 deep in the CUDA body)."""
    if expr.kind == "input":
        return [_word(Insn.INPUT, 0, int(expr.value))]  # type: ignore[arg-type]
    if expr.kind == "const":
        return [_word(Insn.CONST, 0, f32_bits(float(expr.value)))]  # type: ignore[arg-type]
    code: list[int] = []
    for a in expr.args:
        code += compile_expr(a)
    name = str(expr.value)
    if name in UNARY_CODES:
        return code + [_word(Insn.UNARY, UNARY_CODES[name], 0)]
    if name in BINARY_CODES:
        return code + [_word(Insn.BINARY, BINARY_CODES[name], 0)]
    return code + [_word(Insn.TERNARY, TERNARY_CODES[name], 0)]


_UNARY_NP = [eval(f"lambda a: {src}", {"np": np}) for src, _ in UNARY.values()]  # noqa: S307
_BINARY_NP = [eval(f"lambda a, b: {src}", {"np": np}) for src, _ in BINARY.values()]  # noqa: S307
_TERNARY_NP = [eval(f"lambda c, a, b: {src}", {"np": np}) for src, _ in TERNARY.values()]  # noqa: S307


def run_bytecode(code: list[int] | np.ndarray, inputs: list[np.ndarray]) -> np.ndarray:
    """Evaluates bytecode over float32 numpy arrays (broadcasting), as the CUDA body does per element."""
    stack: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for word in code:
            kind, op, arg = decode_insn(int(word))
            if kind == Insn.INPUT:
                stack.append(np.asarray(inputs[arg], np.float32))
            elif kind == Insn.CONST:
                stack.append(np.float32(bits_f32(arg)))
            elif kind == Insn.UNARY:
                stack.append(np.asarray(_UNARY_NP[op](stack.pop()), np.float32))
            elif kind == Insn.BINARY:
                b, a = stack.pop(), stack.pop()
                stack.append(np.asarray(_BINARY_NP[op](a, b), np.float32))
            else:
                b, a, c = stack.pop(), stack.pop(), stack.pop()
                stack.append(np.asarray(_TERNARY_NP[op](c, a, b), np.float32))
    (result,) = stack
    return result


def eval_expr(expr: Expr, inputs: list[np.ndarray]) -> np.ndarray:
    return run_bytecode(compile_expr(expr), inputs)


def kept_input(expr: Expr) -> int:
    """k when ``expr`` is ``select(c, a, %k)``: where c is 0 its value is input k's, so a task whose input k is
    its own output (a state's reset, a ring cache written in place) changes only the elements where c holds.
    -1 for any other expression."""
    if expr.kind == "call" and expr.value == "select" and expr.args[2].kind == "input":
        return int(expr.args[2].value)  # type: ignore[arg-type]
    return -1


def decode_expr(code: list[int] | tuple[int, ...]) -> Expr:
    """The expression of postfix bytecode (compile_expr's inverse). Raises ValueError for a malformed
    program (a stack underflow, leftovers, an unknown instruction or function code)."""
    stack: list[Expr] = []
    names = {Insn.UNARY: list(UNARY), Insn.BINARY: list(BINARY), Insn.TERNARY: list(TERNARY)}
    for word in code:
        try:
            kind, op, arg = decode_insn(int(word))
        except ValueError as e:
            raise ValueError(f"bytecode word {int(word):#x}: unknown instruction") from e
        if kind == Insn.INPUT:
            stack.append(Expr("input", arg))
        elif kind == Insn.CONST:
            stack.append(Expr("const", float(bits_f32(arg))))
        else:
            if op >= len(names[kind]) or len(stack) < ARITY[names[kind][op]]:
                raise ValueError(f"bytecode word {int(word):#x}: unknown function or stack underflow")
            n = ARITY[names[kind][op]]
            args = tuple(stack[len(stack) - n :])
            del stack[len(stack) - n :]
            stack.append(Expr("call", names[kind][op], args))
    if len(stack) != 1:
        raise ValueError(f"bytecode leaves {len(stack)} values, not 1")
    return stack[0]


# --------------------------------------------------------------------------------------------
# Parameter blocks. Each packs to int64 words: [opcode, ...fields]; `unpack` reads one back.


def _read(words: np.ndarray, at: int, n: int) -> tuple[list[int], int]:
    return [int(w) for w in words[at : at + n]], at + n


@dataclass(frozen=True)
class EwiseParams:
    """out[idx] = expr(in_0[idx], ...) over the iteration space ``shape``.

    Words: EWISE, rank, shape[rank], out_strides[rank], n_in, in_strides[n_in][rank], n_code, code[n_code],
    body. Strides of 0 broadcast; negative strides reverse (a reflect pad reads a reversed slice).

    ``body`` is the index of a generated tile body of this (expression, rank, n_in) in the CUDA kernel
    (profile.json ``ewise_bodies``, numbered by wpk-payload), or -1: the kernel's bytecode interpreter runs
    ``code``. The code defines the semantics either way; the interpreter target ignores ``body``.
    """

    shape: tuple[int, ...]
    out_strides: tuple[int, ...]
    in_strides: tuple[tuple[int, ...], ...]
    code: tuple[int, ...]
    body: int = -1

    def pack(self) -> np.ndarray:
        r = len(self.shape)
        words = [int(Opcode.EWISE), r, *self.shape, *self.out_strides, len(self.in_strides)]
        for s in self.in_strides:
            words += list(s)
        return np.array(words + [len(self.code), *self.code, self.body], np.int64)

    @staticmethod
    def unpack(words: np.ndarray, at: int) -> "EwiseParams":
        r = int(words[at + 1])
        shape, p = _read(words, at + 2, r)
        out_strides, p = _read(words, p, r)
        n_in = int(words[p])
        p += 1
        ins = []
        for _ in range(n_in):
            s, p = _read(words, p, r)
            ins.append(tuple(s))
        n_code = int(words[p])
        code, p = _read(words, p + 1, n_code)
        return EwiseParams(tuple(shape), tuple(out_strides), tuple(ins), tuple(code), int(words[p]))

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))



def _pack_extras(strides: tuple[tuple[int, ...], ...], code: tuple[int, ...]) -> list[int]:
    """The tail an epilogue and a prologue share: each extra input's strides, then n_code and the code."""
    return [w for st in strides for w in st] + [len(code), *code]


def _unpack_extras(words: np.ndarray, at: int, n_extra: int, width: int):
    """(strides, code, next word) of a ``_pack_extras`` tail at word ``at``: ``n_extra`` stride rows of
    ``width`` words each."""
    strides = []
    for _ in range(n_extra):
        st, at = _read(words, at, width)
        strides.append(tuple(st))
    code, at = _read(words, at + 1, int(words[at]))
    return tuple(strides), tuple(code), at


def _apply_code(code: tuple[int, ...], first: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
    """An epilogue's or prologue's bytecode over ``%0 = first`` and its extras; no code is the identity."""
    return run_bytecode(list(code), [first, *extras]) if code else first


@dataclass(frozen=True)
class Epilogue:
    """An expression applied to each output element of a MATMUL or CONV before the store: ``%0`` is the
    accumulated value (CONV: bias included), ``%k`` (k >= 1) reads extra input ``k - 1`` through a strided
    view over the iteration space ``shape`` (the output's, one session; flat element e is the same point
    as the task's output element e). Extra inputs occupy the operand slots after the opcode's own.

    Words (appended to the opcode's block): n_extra, rank, shape[rank], strides[n_extra][rank], n_code,
    code[n_code], body. The identity (no epilogue) is n_extra = 0, rank = 0, n_code = 0, body = -1.

    ``body`` is the index of a generated function of this expression and extra count in the CUDA kernel
    (profile.json ``epilogue_bodies``, numbered by wpk-payload), or -1: the kernel's bytecode interpreter runs
    ``code``. The code defines the semantics either way; the interpreter target ignores ``body``.
    """

    shape: tuple[int, ...] = ()
    strides: tuple[tuple[int, ...], ...] = ()
    code: tuple[int, ...] = ()
    body: int = -1

    @property
    def identity(self) -> bool:
        return not self.code and not self.strides

    def pack(self) -> list[int]:
        return [len(self.strides), len(self.shape), *self.shape, *_pack_extras(self.strides, self.code), self.body]

    @staticmethod
    def unpack(words: np.ndarray, at: int) -> tuple["Epilogue", int]:
        n_extra, r = int(words[at]), int(words[at + 1])
        shape, p = _read(words, at + 2, r)
        strides, code, p = _unpack_extras(words, p, n_extra, r)
        return Epilogue(tuple(shape), strides, code, int(words[p])), p + 1

    def apply(self, acc: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
        """The epilogue over float32 ``acc`` and the extra inputs' values (broadcasting)."""
        return _apply_code(self.code, acc, extras)


NO_EPILOGUE = Epilogue()


@dataclass(frozen=True)
class Prologue:
    """An expression a MATMUL applies to each element of ``a`` as it loads it, before the product: ``%0`` is
    the element ``a[idx, k]``, ``%j`` (j >= 1) reads extra input ``j - 1`` at ``sum_d idx[d] * s[d] + k * s[rank]``
    with its strides ``s`` over the output's dims and k (the layout of ``a_strides``; zero where the extra
    does not vary: a per-row extra has a zero k stride, a per-k extra zeros elsewhere). The prologue's extras
    occupy the operand slots right after ``a`` and ``b``; the epilogue's follow them.

    Words (in the MATMUL block, before the epilogue): n_extra, strides[n_extra][rank+1], n_code, code[n_code].
    The identity (no prologue) is n_extra = 0, n_code = 0.
    """

    strides: tuple[tuple[int, ...], ...] = ()
    code: tuple[int, ...] = ()

    @property
    def identity(self) -> bool:
        return not self.code and not self.strides

    def pack(self) -> list[int]:
        return [len(self.strides), *_pack_extras(self.strides, self.code)]

    @staticmethod
    def unpack(words: np.ndarray, at: int, rank: int) -> tuple["Prologue", int]:
        """The prologue at word ``at`` of a MATMUL block of output rank ``rank``, and the word after it."""
        strides, code, p = _unpack_extras(words, at + 1, int(words[at]), rank + 1)
        return Prologue(strides, code), p

    def apply(self, a: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
        """The prologue over float32 ``a`` and the extra inputs' values (broadcasting)."""
        return _apply_code(self.code, a, extras)


NO_PROLOGUE = Prologue()


@dataclass(frozen=True)
class MatmulParams:
    """out[idx] = epilogue(sum_k prologue(a[idx, k]) * b[idx, k]) over ``shape`` (the output's, batch dims first).

    Words: MATMUL, rank, shape[rank], K, b_tf32, out_strides[rank], a_strides[rank+1], b_strides[rank+1],
    prologue (see Prologue), epilogue (see Epilogue). ``a`` has stride 0 along the output's last (n) axis and
    ``b`` along its m axis; the last stride is k's. Inputs: a, b, the prologue's extra inputs, then the
    epilogue's. ``b_tf32`` (0 or 1) promises that every value of b is a TF32 number (its low 13 mantissa
    bits zero: a bf16 weight), so a tensor-core body may use b's bits as they are instead of splitting
    them into two TF32 terms; it changes no result.
    """

    shape: tuple[int, ...]
    k: int
    out_strides: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_strides: tuple[int, ...]
    epilogue: Epilogue = NO_EPILOGUE
    prologue: Prologue = NO_PROLOGUE
    b_tf32: bool = False

    def pack(self) -> np.ndarray:
        r = len(self.shape)
        return np.array(
            [int(Opcode.MATMUL), r, *self.shape, self.k, int(self.b_tf32), *self.out_strides, *self.a_strides,
             *self.b_strides, *self.prologue.pack(), *self.epilogue.pack()],
            np.int64,
        )

    @staticmethod
    def unpack(words: np.ndarray, at: int) -> "MatmulParams":
        r = int(words[at + 1])
        shape, p = _read(words, at + 2, r)
        k, b_tf32 = int(words[p]), int(words[p + 1])
        if b_tf32 not in (0, 1):
            raise ValueError(f"MATMUL b_tf32 word is {b_tf32}, expected 0 or 1")
        out_strides, p = _read(words, p + 2, r)
        a, p = _read(words, p, r + 1)
        b, p = _read(words, p, r + 1)
        pro, p = Prologue.unpack(words, p, r)
        ep, _ = Epilogue.unpack(words, p)
        return MatmulParams(tuple(shape), k, tuple(out_strides), tuple(a), tuple(b), ep, pro, bool(b_tf32))

    @property
    def n_own(self) -> int:
        return 2

    @property
    def epilogue_slot(self) -> int:
        """The first operand slot of the epilogue's extra inputs (after a, b and the prologue's)."""
        return 2 + len(self.prologue.strides)

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class ConvParams:
    """ONNX Conv (NC + spatial, contiguous): out[n, o, y] = bias[o] + sum x[n, g*Cg+c, y*s + k*d - p] w[o, c, k].

    Words: CONV, nsp, batch, c_in, c_out, group, has_bias, in_sp[nsp], out_sp[nsp], kernel[nsp],
    stride[nsp], pad_begin[nsp], dilation[nsp], epilogue (see Epilogue; its iteration space is the output's
    session shape, contiguous like the output). Inputs: x, w, bias (when has_bias), then the epilogue's
    extra inputs. Out of range reads are 0.
    """

    batch: int
    c_in: int
    c_out: int
    group: int
    has_bias: int
    in_sp: tuple[int, ...]
    out_sp: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad_begin: tuple[int, ...]
    dilation: tuple[int, ...]
    epilogue: Epilogue = NO_EPILOGUE

    def pack(self) -> np.ndarray:
        head = [int(Opcode.CONV), len(self.in_sp), self.batch, self.c_in, self.c_out, self.group, self.has_bias]
        tail = [*self.in_sp, *self.out_sp, *self.kernel, *self.stride, *self.pad_begin, *self.dilation]
        return np.array(head + tail + self.epilogue.pack(), np.int64)

    @staticmethod
    def unpack(words: np.ndarray, at: int) -> "ConvParams":
        nsp = int(words[at + 1])
        fixed, p = _read(words, at + 2, 5)
        fields = []
        for _ in range(6):
            f, p = _read(words, p, nsp)
            fields.append(tuple(f))
        ep, _ = Epilogue.unpack(words, p)
        return ConvParams(*fixed, *fields, ep)

    @property
    def n_own(self) -> int:
        return 3 if self.has_bias else 2

    @property
    def epilogue_slot(self) -> int:
        """The first operand slot of the epilogue's extra inputs (after x, w and the bias)."""
        return self.n_own

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.batch, self.c_out, *self.out_sp)

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


REDUCE_KINDS = ("sum", "mean", "max", "min", "prod", "sumsquare", "l1", "l2", "logsumexp")


@dataclass(frozen=True)
class ReduceParams:
    """out[idx] = reduce_j in[idx, j] over the reduced view ``rshape`` / ``rstrides``.

    Words: REDUCE, kind, rank, shape[rank], out_strides[rank], in_strides[rank], rrank, rshape[rrank],
    rstrides[rrank]. ``kind`` indexes REDUCE_KINDS. An empty reduction gives the kind's identity.
    """

    kind: int
    shape: tuple[int, ...]
    out_strides: tuple[int, ...]
    in_strides: tuple[int, ...]
    rshape: tuple[int, ...]
    rstrides: tuple[int, ...]

    def pack(self) -> np.ndarray:
        r, rr = len(self.shape), len(self.rshape)
        return np.array(
            [int(Opcode.REDUCE), self.kind, r, *self.shape, *self.out_strides, *self.in_strides, rr, *self.rshape,
             *self.rstrides],
            np.int64,
        )

    @staticmethod
    def unpack(words: np.ndarray, at: int) -> "ReduceParams":
        kind, r = int(words[at + 1]), int(words[at + 2])
        shape, p = _read(words, at + 3, r)
        out_strides, p = _read(words, p, r)
        in_strides, p = _read(words, p, r)
        rr = int(words[p])
        rshape, p = _read(words, p + 1, rr)
        rstrides, _ = _read(words, p, rr)
        return ReduceParams(kind, tuple(shape), tuple(out_strides), tuple(in_strides), tuple(rshape), tuple(rstrides))

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


Params = EwiseParams | MatmulParams | ConvParams | ReduceParams
_UNPACK = {
    Opcode.EWISE: EwiseParams.unpack,
    Opcode.MATMUL: MatmulParams.unpack,
    Opcode.CONV: ConvParams.unpack,
    Opcode.REDUCE: ReduceParams.unpack,
}


def unpack_params(words: np.ndarray, at: int) -> Params:
    """Reads the parameter block at word ``at``. Raises ValueError for an unknown opcode word."""
    try:
        opcode = Opcode(int(words[at]))
    except (ValueError, IndexError) as e:
        raise ValueError(f"no parameter block at word {at}") from e
    return _UNPACK[opcode](words, at)


# --------------------------------------------------------------------------------------------
# Footprints: exactly which elements of each operand one session of a task touches.


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def view_offsets(shape: tuple[int, ...], strides: tuple[int, ...], begin: int, end: int) -> np.ndarray:
    """Element offsets of the flat iteration points ``[begin, end)`` of a strided view (int64)."""
    flat = np.arange(begin, end, dtype=np.int64)
    if not shape:
        return np.zeros(len(flat), np.int64)
    idx = np.unravel_index(flat, shape)
    return sum((i.astype(np.int64) * s for i, s in zip(idx, strides)), np.zeros(len(flat), np.int64))


def n_task_inputs(params: Params) -> int:
    """How many input operand slots a task of these parameters reads (a prologue's and an epilogue's
    extras included)."""
    if isinstance(params, EwiseParams):
        return len(params.in_strides)
    if isinstance(params, (MatmulParams, ConvParams)):
        return params.epilogue_slot + len(params.epilogue.strides)
    return 1


def footprint(params: Params, operand: int, begin: int, end: int, n_inputs: int) -> np.ndarray:
    """Element offsets (relative to the operand's session start) that output elements ``[begin, end)`` of
    one session touch in ``operand`` (an input slot, or OUT). Exact for every opcode except CONV's
    inputs, where it is a superset: for ``x`` the whole images the tile's batch rows cover, for ``w`` and
    ``bias`` the whole tensor. A pointwise view's offsets come one per output element, unsorted and with
    repeats where the view aliases (callers that need a set dedupe them)."""
    terms = _footprint_terms(params, operand, begin, end)
    if isinstance(terms, range):
        return np.arange(terms.start, terms.stop, dtype=np.int64)
    rows, inner = terms
    return rows if inner is None else _sum_set(_distinct(rows), _distinct(inner))


def footprint_hull(params: Params, operand: int, begin: int, end: int) -> tuple[int, int] | None:
    """The least and greatest element offset of ``footprint(...)`` (None when it is empty), without
    enumerating a matmul's rows x k: what a bounds check needs of a read-only operand (a weight's tile of
    duplex:11b spans millions of elements)."""
    terms = _footprint_terms(params, operand, begin, end)
    if isinstance(terms, range):
        return (terms.start, terms.stop - 1) if len(terms) else None
    rows, inner = terms
    if len(rows) == 0 or (inner is not None and len(inner) == 0):
        return None
    lo, hi = int(rows.min()), int(rows.max())
    return (lo, hi) if inner is None else (lo + int(inner.min()), hi + int(inner.max()))


def _footprint_terms(params: Params, operand: int, begin: int, end: int):
    """`footprint` as the sums of two offset sets, (rows, inner), ``inner`` None for a pointwise view (one
    offset per output element), or a CONV operand's contiguous ``range``."""
    if operand == OUT:
        strides = params.out_strides if not isinstance(params, ConvParams) else contiguous_strides(params.shape)
        return view_offsets(params.shape, strides, begin, end), None
    if isinstance(params, EwiseParams):
        return view_offsets(params.shape, params.in_strides[operand], begin, end), None
    if isinstance(params, (MatmulParams, ConvParams)) and operand >= params.epilogue_slot:  # an epilogue's extra
        ep = params.epilogue
        return view_offsets(ep.shape, ep.strides[operand - params.epilogue_slot], begin, end), None
    if isinstance(params, MatmulParams):  # a, b, or a prologue's extra input (read like a: per output and k)
        strides = (params.a_strides, params.b_strides, *params.prologue.strides)[operand]
        rows = view_offsets(params.shape, strides[:-1], begin, end)  # outputs of one row share it
        return rows, np.arange(params.k, dtype=np.int64) * abs(strides[-1]) + min(0, (params.k - 1) * strides[-1])
    if isinstance(params, ReduceParams):
        rows = view_offsets(params.shape, params.in_strides, begin, end)
        return rows, view_offsets(params.rshape, params.rstrides, 0, int(np.prod(params.rshape, dtype=np.int64)))
    return range(*_conv_operand_range(params, operand, begin, end))


def _distinct(offsets: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``offsets``; no sort when they already increase (most views do)."""
    if len(offsets) < 2 or (offsets[1:] > offsets[:-1]).all():
        return offsets
    ordered = np.sort(offsets)  # numpy's hashing np.unique is slower on these (10^5 to 10^7 int64)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]


def _conv_operand_range(params: "ConvParams", operand: int, begin: int, end: int) -> tuple[int, int]:
    """The element range ``[start, stop)`` output elements ``[begin, end)`` touch in a conv's x (the images
    of the tile's batch rows), w or bias (whole)."""
    if operand == 0:
        per_out = params.n_elems // params.batch
        per_in = params.c_in * int(np.prod(params.in_sp, dtype=np.int64))
        return begin // per_out * per_in, ((end - 1) // per_out + 1) * per_in
    if operand == 1:
        return 0, params.c_out * (params.c_in // params.group) * int(np.prod(params.kernel, dtype=np.int64))
    return 0, params.c_out


def _sum_set(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct sums a + b of two sorted distinct sets; no sort when the sums cannot alias
    (the coarser set's points are spaced wider than the finer one spans)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(0, np.int64)
    if _sums_are_distinct(a, b):
        return (a[:, None] + b[None, :]).ravel()
    if _sums_are_distinct(b, a):
        return (b[:, None] + a[None, :]).ravel()
    return _distinct((a[:, None] + b[None, :]).ravel())


def footprint_view(params: Params, operand: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The elements every output of one session touches in ``operand`` together (``footprint`` over the
    whole iteration space), as a strided view (shape, strides) whose offsets are that set."""
    if operand == OUT:
        strides = params.out_strides if not isinstance(params, ConvParams) else contiguous_strides(params.shape)
        return tuple(params.shape), tuple(strides)
    if isinstance(params, EwiseParams):
        return tuple(params.shape), tuple(params.in_strides[operand])
    if isinstance(params, (MatmulParams, ConvParams)) and operand >= params.epilogue_slot:
        ep = params.epilogue
        return tuple(ep.shape), tuple(ep.strides[operand - params.epilogue_slot])
    if isinstance(params, MatmulParams):
        strides = (params.a_strides, params.b_strides, *params.prologue.strides)[operand]
        return (*params.shape, params.k), tuple(strides)
    if isinstance(params, ReduceParams):
        return (*params.shape, *params.rshape), (*params.in_strides, *params.rstrides)
    if operand == 0:
        return (params.batch * params.c_in * int(np.prod(params.in_sp, dtype=np.int64)),), (1,)
    if operand == 1:
        return (params.c_out * (params.c_in // params.group) * int(np.prod(params.kernel, dtype=np.int64)),), (1,)
    return (params.c_out,), (1,)


def distinct_offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """How many distinct element offsets a strided view covers. Closed form (the product of the extents
    of its non-broadcast axes) when no two index points alias: sorted by |stride|, each axis steps past
    everything the smaller ones span. Otherwise (sliding windows) it enumerates them."""
    if any(d == 0 for d in shape):
        return 0
    kept = [(d, st) for d, st in zip(shape, strides) if st != 0]  # broadcast axes repeat offsets, adding none
    if _injective(tuple(d for d, _ in kept), tuple(st for _, st in kept)):
        return int(np.prod([d for d, _ in kept], dtype=np.int64))
    return len(np.unique(view_offsets(tuple(shape), tuple(strides), 0, int(np.prod(shape, dtype=np.int64)))))


def footprint_size(params: Params, operand: int, begin: int, end: int, n_inputs: int) -> int:
    """How many distinct elements ``footprint(...)`` holds, without enumerating a matmul or reduce
    operand's row x k sum set when no two of its points alias (one set's points spaced wider than the
    other spans): schedulers need the count of every operand, the set only of the operands they track."""
    outer = None
    if isinstance(params, MatmulParams) and operand < params.epilogue_slot:
        strides = (params.a_strides, params.b_strides, *params.prologue.strides)[operand]
        rows = np.unique(view_offsets(tuple(params.shape), tuple(strides[:-1]), begin, end))
        return _progressions_union_size(rows, strides[-1], params.k)
    if isinstance(params, ReduceParams) and operand != OUT:
        outer = (params.shape, params.in_strides, params.rshape, params.rstrides)
    if isinstance(params, ConvParams) and operand < params.epilogue_slot and operand != OUT:
        start, stop = _conv_operand_range(params, operand, begin, end)
        return stop - start
    if outer is None:
        pointwise = operand == OUT or isinstance(params, EwiseParams) or (
            isinstance(params, (MatmulParams, ConvParams)) and operand >= params.epilogue_slot)
        if pointwise and _injective(*footprint_view(params, operand)):  # one element per iteration point
            return end - begin
        return len(np.unique(footprint(params, operand, begin, end, n_inputs)))
    shape, row_strides, inner_shape, inner_strides = outer
    rows = np.unique(view_offsets(tuple(shape), tuple(row_strides), begin, end))
    inner = view_offsets(tuple(inner_shape), tuple(inner_strides), 0, int(np.prod(inner_shape, dtype=np.int64)))
    inner = np.unique(inner)
    if _sums_are_distinct(rows, inner) or _sums_are_distinct(inner, rows):
        return len(rows) * len(inner)
    return len(footprint(params, operand, begin, end, n_inputs))


def _progressions_union_size(starts: np.ndarray, step: int, count: int) -> int:
    """|{s + step * j : s in starts, 0 <= j < count}| for sorted distinct ``starts``, in O(len(starts))
    sorting instead of enumerating len(starts) x count points: the progressions of one residue modulo
    |step| are intervals of ``count`` steps, and the union of sorted intervals of one length L is the sum
    of min(gap, L) between neighbours plus L (a matmul row's k-long dot product over a 131,072-wide k)."""
    if len(starts) == 0 or count <= 0:
        return 0
    if step == 0:
        return len(starts)
    residue, index = np.divmod(starts, abs(step))[::-1]
    order = np.lexsort((index, residue))
    residue, index = residue[order], index[order]
    same = residue[1:] == residue[:-1]
    return int(np.where(same, np.minimum(np.diff(index), count), count).sum() + count)


def _injective(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided view maps distinct index points to distinct offsets: no broadcast axis, and each
    axis (by |stride|) steps past everything the smaller ones span."""
    span = 0
    for stride, extent in sorted((abs(st), d) for d, st in zip(shape, strides) if d > 1):
        if stride <= span:
            return False
        span += (extent - 1) * stride
    return True


def _sums_are_distinct(coarse: np.ndarray, fine: np.ndarray) -> bool:
    """Whether every a + b (a in ``coarse``, b in ``fine``, both sorted and distinct) is distinct: the
    coarse points are spaced wider than the fine set spans."""
    if len(coarse) < 2 or len(fine) < 2:
        return True
    return int(np.diff(coarse).min()) > int(fine[-1] - fine[0])
