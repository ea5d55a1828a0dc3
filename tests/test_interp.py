"""targets/interp: each opcode against a float64 numpy reference, the beat loop (double-buffered io, state
across beats with reset), the dependency-respecting random order, and the errors it raises."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from profile_builder import ProfileBuilder, conv_params
from wavec.errors import RuntimeBackendError
from wavec.opcodes import (
    REDUCE_KINDS,
    Arena,
    EwiseParams,
    MatmulParams,
    ReduceParams,
    compile_expr,
    contiguous_strides,
    parse_expr,
)
from wavec.profile import load
from wavec.targets.interp import Interpreter, run_beats


def code(text: str) -> tuple[int, ...]:
    return tuple(compile_expr(parse_expr(text)))


def copy_params(shape) -> EwiseParams:
    st = contiguous_strides(tuple(shape))
    return EwiseParams(tuple(shape), st, (st,), code("%0"))


def tiles(pb: ProfileBuilder, n_elems: int, session_cuts, elem_cuts):
    """(worker, sessions, elems) of a tiling of [0, sessions) x [0, n_elems), round-robin over workers."""
    s_edges = [0, *session_cuts, pb.sessions]
    e_edges = [0, *elem_cuts, n_elems]
    pairs = itertools.product(zip(s_edges, s_edges[1:]), zip(e_edges, e_edges[1:]))
    return [(i % pb.workers, s, e) for i, (s, e) in enumerate(pairs)]


def frames_for(profile, rng, beats=1):
    return {
        spec["name"]: rng.normal(size=(beats, profile.sessions, *spec["shape"])).astype(np.float32)
        for spec in profile.meta["inputs"]
    }


def run(profile, frames, reset=None, seed=0):
    return profile.run(frames, backend="interp", reset=reset, seed=seed)


def close_by_norm(got, ref, rel=1e-4):
    assert np.linalg.norm(got.astype(np.float64) - ref) <= rel * np.linalg.norm(ref), (got, ref)


# ---------------------------------------------------------------------------------------------
# Opcodes


def test_ewise_strided_broadcast_reversed_tiles():
    rng = np.random.default_rng(1)
    pb = ProfileBuilder(sessions=5, workers=2)
    x = pb.input("x", (3, 5))
    yt = pb.input("yt", (5, 3))  # read transposed
    z = pb.input("z", (3, 5))  # read with its last axis reversed
    bias_data = rng.normal(size=5).astype(np.float32)
    bias = pb.weight("bias", bias_data)  # broadcast over rows
    out = pb.output("out", (5, 3))  # written transposed
    params = EwiseParams(
        shape=(3, 5),
        out_strides=(1, 3),
        in_strides=((5, 1), (1, 3), (0, 1), (5, -1)),
        code=code("add(select(gt(%0, 0.0), mul(%1, sigmoid(%2)), sub(%3, tanh(%1))), 0.5)"),
    )
    for w, s, e in tiles(pb, 15, [2], [7]):
        pb.task(params, [x, yt, bias, z.at(4)], out, worker=w, sessions=s, elems=e)
    profile = pb.build()
    f = frames_for(profile, rng)
    got = run(profile, f)["out"][0]

    x64, y64, z64 = (f[n][0].astype(np.float64) for n in ("x", "yt", "z"))
    y = y64.transpose(0, 2, 1)
    zr = z64[:, :, ::-1]
    sig = 1 / (1 + np.exp(-bias_data.astype(np.float64)))
    ref = np.where(x64 > 0, y * sig, zr - np.tanh(y)) + 0.5  # [S, 3, 5]
    np.testing.assert_allclose(got, ref.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b_layout", ["shared_kn", "per_session_nk"])
def test_matmul_batched_tiles_then_dependent_epilogue(b_layout):
    rng = np.random.default_rng(2)
    B, M, K, N = 2, 3, 7, 5
    pb = ProfileBuilder(sessions=4, workers=3)
    a = pb.input("a", (B, M, K))
    if b_layout == "shared_kn":
        b_data = rng.normal(size=(K, N)).astype(np.float32)
        b = pb.weight("b", b_data)
        b_strides = (0, 0, 1, N)
    else:
        b = pb.input("b", (B, N, K))
        b_strides = (N * K, 0, K, 1)
    mm = pb.act("mm", (B, M, N))
    out = pb.output("out", (B, M, N))
    params = MatmulParams((B, M, N), K, (M * N, N, 1), (M * K, K, 0, 1), b_strides)
    done = pb.counter()
    mm_tiles = tiles(pb, B * M * N, [1, 3], [13])  # 13 splits a row
    for w, s, e in mm_tiles:
        pb.task(params, [a, b], mm, worker=w, sessions=s, elems=e, signal=done)
    relu = EwiseParams((B * M * N,), (1,), ((1,),), code("relu(%0)"))
    for w, s, e in tiles(pb, B * M * N, [2], [11]):
        pb.task(relu, [mm], out, worker=w, sessions=s, elems=e, waits=[(done, len(mm_tiles))])
    profile = pb.build()
    f = frames_for(profile, rng)
    got = run(profile, f, seed=3)["out"][0]

    a64 = f["a"][0].astype(np.float64)
    if b_layout == "shared_kn":
        ref = a64 @ b_data.astype(np.float64)
    else:
        ref = a64 @ f["b"][0].astype(np.float64).transpose(0, 1, 3, 2)
    close_by_norm(got, np.maximum(ref, 0))


def conv_ref(x, w, bias, stride, pads, dilation, group):
    """ONNX Conv in float64: x [n, c, *sp], w [o, c/group, *k], pads (begins, ends)."""
    nsp = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nsp + i]) for i in range(nsp)])
    kernel = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nsp)]
    cg, og = x.shape[1] // group, w.shape[0] // group
    out = np.zeros((x.shape[0], w.shape[0], *out_sp))
    for k in np.ndindex(*kernel):
        sl = tuple(
            slice(k[i] * dilation[i], k[i] * dilation[i] + (out_sp[i] - 1) * stride[i] + 1, stride[i])
            for i in range(nsp)
        )
        patch = xp[(slice(None), slice(None), *sl)]
        for g in range(group):
            wk = w[(slice(g * og, (g + 1) * og), slice(None), *k)]
            out[:, g * og : (g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg : (g + 1) * cg], wk)
    if bias is not None:
        out += bias.reshape(1, -1, *[1] * nsp)
    return out


CONV_CASES = {
    "1d_group_stride_dilation_pad_bias": dict(
        x=(2, 4, 11), w=(6, 2, 3), stride=(2,), pads=(1, 2), dilation=(2,), group=2, bias=True
    ),
    "2d_asym_pad_stride": dict(
        x=(2, 3, 7, 6), w=(4, 3, 3, 2), stride=(1, 2), pads=(1, 0, 1, 1), dilation=(1, 1), group=1, bias=False
    ),
    "1d_depthwise": dict(x=(1, 4, 9), w=(4, 1, 5), stride=(1,), pads=(2, 2), dilation=(1,), group=4, bias=True),
    "2d_dilated_group": dict(
        x=(1, 4, 6, 6), w=(2, 2, 2, 2), stride=(1, 1), pads=(1, 1, 0, 0), dilation=(2, 1), group=2, bias=True
    ),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_onnx_semantics(case):
    c = CONV_CASES[case]
    rng = np.random.default_rng(3)
    pb = ProfileBuilder(sessions=3, workers=2)
    params = conv_params(c["x"], c["w"], stride=c["stride"], pads=c["pads"], dilation=c["dilation"],
                         group=c["group"], has_bias=c["bias"])
    x = pb.input("x", c["x"])
    w_data = rng.normal(size=c["w"]).astype(np.float32)
    b_data = rng.normal(size=c["w"][0]).astype(np.float32)
    operands = [x, pb.weight("w", w_data)] + ([pb.weight("b", b_data)] if c["bias"] else [])
    out = pb.output("y", params.shape)
    n = params.n_elems
    for wk, s, e in tiles(pb, n, [1], [n // 3, 2 * n // 3 + 1]):
        pb.task(params, operands, out, worker=wk, sessions=s, elems=e)
    profile = pb.build()
    f = frames_for(profile, rng)
    got = run(profile, f)["y"][0]
    for s in range(pb.sessions):
        ref = conv_ref(f["x"][0, s].astype(np.float64), w_data.astype(np.float64),
                       b_data.astype(np.float64) if c["bias"] else None,
                       c["stride"], c["pads"], c["dilation"], c["group"])
        assert got[s].shape == ref.shape
        close_by_norm(got[s], ref)


def reduce_ref(kind: str, v: np.ndarray, axis) -> np.ndarray:
    if kind == "sum":
        return v.sum(axis)
    if kind == "mean":
        return v.mean(axis)
    if kind == "max":
        return v.max(axis)
    if kind == "min":
        return v.min(axis)
    if kind == "prod":
        return v.prod(axis)
    if kind == "sumsquare":
        return (v**2).sum(axis)
    if kind == "l1":
        return np.abs(v).sum(axis)
    if kind == "l2":
        return np.sqrt((v**2).sum(axis))
    return np.log(np.exp(v).sum(axis))


@pytest.mark.parametrize("kind", REDUCE_KINDS)
def test_reduce_kinds_over_strided_axes(kind):
    rng = np.random.default_rng(4)
    pb = ProfileBuilder(sessions=4, workers=2)
    x = pb.input("x", (4, 6, 5))
    out = pb.output("y", (6,))
    # y[j] = reduce over (i, k) of x[i, j, k], with k read backwards (the value is order-free).
    params = ReduceParams(REDUCE_KINDS.index(kind), (6,), (1,), (5,), (4, 5), (30, -1))
    for w, s, e in tiles(pb, 6, [1, 3], [4]):
        pb.task(params, [x.at(4)], out, worker=w, sessions=s, elems=e)
    profile = pb.build()
    f = frames_for(profile, rng)
    got = run(profile, f)["y"][0]
    ref = reduce_ref(kind, f["x"][0].astype(np.float64), (1, 3))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", REDUCE_KINDS)
def test_reduce_empty_gives_identity(kind):
    identity = {"max": -np.inf, "min": np.inf, "prod": 1.0, "logsumexp": -np.inf}.get(kind, 0.0)
    pb = ProfileBuilder(sessions=2)
    x = pb.input("x", (3,))
    out = pb.output("y", (3,))
    pb.task(ReduceParams(REDUCE_KINDS.index(kind), (3,), (1,), (1,), (0,), (1,)), [x], out)
    profile = pb.build()
    got = run(profile, frames_for(profile, np.random.default_rng(5)))["y"]
    assert np.array_equal(got, np.full(got.shape, identity, np.float32))


# ---------------------------------------------------------------------------------------------
# Beats: double-buffered io, state across beats with reset


def accumulator_profile(sessions=3):
    """acc = select(reset, init, acc) + x; y = acc; the state slot is written back from y."""
    pb = ProfileBuilder(sessions=sessions, workers=2)
    rng = np.random.default_rng(6)
    x = pb.input("x", (4,))
    reset = pb.reset_flags()
    init_data = rng.normal(size=4).astype(np.float32)
    acc, init = pb.state("acc", init_data, output="y")
    y = pb.output("y", (4,))
    step = EwiseParams((4,), (1,), ((0,), (1,), (1,), (1,)), code("add(select(%0, %1, %2), %3)"))
    done = pb.counter()
    pb.task(step, [reset, init, acc, x], y, worker=0, sessions=(0, 1), signal=done)
    pb.task(step, [reset, init, acc, x], y, worker=1, sessions=(1, sessions), signal=done)
    pb.task(copy_params((4,)), [y], acc, worker=1, waits=[(done, 2)])
    return pb.build(), init_data


def test_state_accumulates_across_beats_and_resets():
    profile, init = accumulator_profile()
    beats, sessions = 5, profile.sessions
    f = frames_for(profile, np.random.default_rng(7), beats)
    reset = np.zeros((beats, sessions), bool)
    reset[2, 1] = True
    reset[3, [0, 2]] = True
    got = run(profile, f, reset)["y"]
    acc = np.tile(init.astype(np.float64), (sessions, 1))
    for b in range(beats):
        acc[reset[b]] = init
        acc = acc + f["x"][b]
        np.testing.assert_allclose(got[b], acc, rtol=1e-5, atol=1e-5)


def test_io_is_double_buffered_by_beat_parity():
    profile, init = accumulator_profile()
    f = frames_for(profile, np.random.default_rng(8), 2)
    machine = Interpreter(profile)
    x_off, y_off = profile.meta["inputs"][0]["offset"], profile.meta["outputs"][0]["offset"]
    ys = []
    for b in range(2):
        machine.write_inputs({"x": f["x"][b]}, np.zeros(profile.sessions, bool))
        machine.run_beat()
        ys.append(machine.read_outputs()["y"])
    for b in range(2):  # each beat's frame and output stay in their own half
        x_half = machine.memory(b)[Arena.INPUT][x_off // 4 :]
        y_half = machine.memory(b)[Arena.OUTPUT][y_off // 4 :]
        assert np.array_equal(x_half[:4], f["x"][b, 0])
        assert np.array_equal(y_half[:4], ys[b][0])
    np.testing.assert_allclose(ys[1], init + f["x"][0] + f["x"][1], rtol=1e-5, atol=1e-5)
    assert machine.counters[0] == 2 * profile.meta["workers"]  # each worker once per beat


def test_save_load_round_trip_runs_the_same(tmp_path):
    profile, _ = accumulator_profile()
    f = frames_for(profile, np.random.default_rng(9), 3)
    again = load(profile.save(tmp_path / "acc"))
    assert np.array_equal(run(profile, f)["y"], run(again, f)["y"])
    # A profile shows as one line (its profile.json can run to megabytes).
    assert repr(again) == "Profile(model='test', hw='test', sessions=3, workers=2, tasks=3, phases=0)"


# ---------------------------------------------------------------------------------------------
# Scheduling: random order within the declared dependencies, deadlocks


def producer_consumer(with_wait: bool):
    pb = ProfileBuilder(sessions=2, workers=2)
    x = pb.input("x", (8,))
    t = pb.act("t", (8,))
    y = pb.output("y", (8,))
    done = pb.task(EwiseParams((8,), (1,), ((1,),), code("mul(%0, 2.0)")), [x], t, worker=0)
    pb.task(copy_params((8,)), [t], y, worker=1, waits=[(done, 1)] if with_wait else [])
    pb.workers = 3  # a worker with no tasks still ends its beat
    return pb.build()


def test_declared_wait_gives_right_result_for_every_seed():
    profile = producer_consumer(with_wait=True)
    f = frames_for(profile, np.random.default_rng(10), 2)
    for seed in range(20):
        np.testing.assert_array_equal(run(profile, f, seed=seed)["y"], 2 * f["x"])


def test_missing_wait_is_exposed_by_some_seed():
    profile = producer_consumer(with_wait=False)
    f = frames_for(profile, np.random.default_rng(11), 1)
    wrong = [seed for seed in range(20) if not np.array_equal(run(profile, f, seed=seed)["y"], 2 * f["x"])]
    assert wrong, "the interpreter never ran the consumer before its producer"


def two_counter_profile(phase_wait: bool):
    """Producer tiles signal their session's group counter and a phase-wide counter (signal_phase); one
    consumer per session waits on its group only, a last task on the whole phase."""
    pb = ProfileBuilder(sessions=3, workers=3)
    x = pb.input("x", (8,))
    t = pb.act("t", (8,))
    y = pb.output("y", (8,))
    z = pb.output("z", (8,))
    phase = pb.counter()
    groups = [pb.counter() for _ in range(3)]
    double = EwiseParams((8,), (1,), ((1,),), code("mul(%0, 2.0)"))
    for s in range(3):
        for e, w in (((0, 4), s), ((4, 8), (s + 1) % 3)):
            pb.task(double, [x], t, worker=w, sessions=(s, s + 1), elems=e, signal=groups[s], signal_phase=phase)
    copies = pb.counter()  # the consumers' phase (nobody waits on it: it names their phase)
    for s in range(3):
        pb.task(copy_params((8,)), [t], y, worker=(s + 2) % 3, sessions=(s, s + 1), waits=[(groups[s], 2)],
                signal_phase=copies)
    pb.task(copy_params((8,)), [t], z, worker=0, waits=[(phase, 6)] if phase_wait else [(groups[0], 2)])
    return pb.build()


def test_group_and_phase_counters_order_their_consumers():
    from wavec.verify import verify_profile

    profile = two_counter_profile(phase_wait=True)
    verify_profile(profile)
    f = frames_for(profile, np.random.default_rng(12), 2)
    for seed in range(10):
        got = run(profile, f, seed=seed)
        np.testing.assert_array_equal(got["y"], 2 * f["x"])
        np.testing.assert_array_equal(got["z"], 2 * f["x"])


def test_a_group_wait_does_not_order_other_groups():
    from wavec.errors import VerificationError
    from wavec.verify import verify_profile

    with pytest.raises(VerificationError, match="race"):
        verify_profile(two_counter_profile(phase_wait=False))


def test_same_seed_same_order():
    profile = producer_consumer(with_wait=False)
    orders = []
    for _ in range(2):
        m = Interpreter(profile, seed=5)
        m.write_inputs({"x": np.ones((2, 8), np.float32)}, np.zeros(2, bool))
        m.run_beat()
        orders.append(list(m.order))
    assert orders[0] == orders[1]


def test_wait_on_unsignalled_counter_is_a_deadlock():
    pb = ProfileBuilder(sessions=1, workers=2)
    x = pb.input("x", (4,))
    y = pb.output("y", (4,))
    never = pb.counter()
    pb.task(copy_params((4,)), [x], y, worker=1, waits=[(never, 1)])
    profile = pb.build()
    with pytest.raises(RuntimeBackendError, match=rf"deadlock in beat 0.*task 0 .*counter {never} = 0 \(needs 1\)"):
        run(profile, frames_for(profile, np.random.default_rng(12)))


def test_cross_worker_wait_cycle_is_a_deadlock():
    pb = ProfileBuilder(sessions=1, workers=2)
    x = pb.input("x", (4,))
    y = pb.output("y", (4,))
    ca, cb = pb.counter(), pb.counter()
    pb.task(copy_params((4,)), [x], y, worker=0, waits=[(cb, 1)], signal=ca)
    pb.task(copy_params((4,)), [x], y, worker=1, waits=[(ca, 1)], signal=cb)
    profile = pb.build()
    with pytest.raises(RuntimeBackendError, match=r"deadlock.*2 tasks remain.*task 0.*task 1"):
        run(profile, frames_for(profile, np.random.default_rng(13)))


# ---------------------------------------------------------------------------------------------
# Malformed payloads


def test_out_of_arena_write_is_reported():
    pb = ProfileBuilder(sessions=2)
    x = pb.input("x", (4,))
    y = pb.output("y", (4,))
    pb.task(copy_params((4,)), [x], y.at(6))  # session 1's slot runs past the arena's end
    profile = pb.build()
    with pytest.raises(RuntimeBackendError, match=r"task 0 .*output touches bytes .* output arena"):
        run(profile, frames_for(profile, np.random.default_rng(14)))


def test_write_into_weights_is_reported():
    pb = ProfileBuilder(sessions=1)
    x = pb.input("x", (4,))
    w = pb.weight("w", np.ones(4, np.float32))
    pb.output("y", (4,))
    pb.task(copy_params((4,)), [x], w)
    profile = pb.build()
    with pytest.raises(RuntimeBackendError, match="read-only weights arena"):
        run(profile, frames_for(profile, np.random.default_rng(15)))


def test_run_beats_is_the_interp_backend():
    profile, _ = accumulator_profile()
    f = frames_for(profile, np.random.default_rng(16), 2)
    reset = np.zeros((2, profile.sessions), bool)
    assert np.array_equal(run_beats(profile, f, reset, seed=1)["y"], run(profile, f, reset, seed=1)["y"])


# ---------------------------------------------------------------------------------------------
# The prepared (cached-index) task runners and the heap scheduler against their references


def opcode_profiles():
    """Small profiles covering every opcode and tiling the opcode tests above use."""
    rng = np.random.default_rng(20)
    out = []
    pb = ProfileBuilder(sessions=5, workers=2)
    x, yt, z = pb.input("x", (3, 5)), pb.input("yt", (5, 3)), pb.input("z", (3, 5))
    bias = pb.weight("bias", rng.normal(size=5).astype(np.float32))
    y = pb.output("out", (5, 3))
    params = EwiseParams((3, 5), (1, 3), ((5, 1), (1, 3), (0, 1), (5, -1)),
                         code("add(select(gt(%0, 0.0), mul(%1, sigmoid(%2)), sub(%3, tanh(%1))), 0.5)"))
    for w, s, e in tiles(pb, 15, [2], [7]):
        pb.task(params, [x, yt, bias, z.at(4)], y, worker=w, sessions=s, elems=e)
    out.append(pb.build())
    for b_layout in ("shared_kn", "per_session_nk"):
        B, M, K, N = 2, 3, 7, 5
        pb = ProfileBuilder(sessions=4, workers=3)
        a = pb.input("a", (B, M, K))
        if b_layout == "shared_kn":
            b, b_strides = pb.weight("b", rng.normal(size=(K, N)).astype(np.float32)), (0, 0, 1, N)
        else:
            b, b_strides = pb.input("b", (B, N, K)), (N * K, 0, K, 1)
        y = pb.output("out", (B, M, N))
        params = MatmulParams((B, M, N), K, (M * N, N, 1), (M * K, K, 0, 1), b_strides)
        for w, s, e in tiles(pb, B * M * N, [1, 3], [4, 13, 17]):
            pb.task(params, [a, b], y, worker=w, sessions=s, elems=e)
        out.append(pb.build())
    for c in CONV_CASES.values():
        pb = ProfileBuilder(sessions=3, workers=2)
        params = conv_params(c["x"], c["w"], stride=c["stride"], pads=c["pads"], dilation=c["dilation"],
                             group=c["group"], has_bias=c["bias"])
        x = pb.input("x", c["x"])
        operands = [x, pb.weight("w", rng.normal(size=c["w"]).astype(np.float32))]
        if c["bias"]:
            operands.append(pb.weight("b", rng.normal(size=c["w"][0]).astype(np.float32)))
        y = pb.output("y", params.shape)
        n = params.n_elems
        for wk, s, e in tiles(pb, n, [1], [n // 3, 2 * n // 3 + 1]):
            pb.task(params, operands, y, worker=wk, sessions=s, elems=e)
        out.append(pb.build())
    for kind in ("sum", "max", "logsumexp"):
        pb = ProfileBuilder(sessions=4, workers=2)
        x, y = pb.input("x", (4, 6, 5)), pb.output("y", (6,))
        params = ReduceParams(REDUCE_KINDS.index(kind), (6,), (1,), (5,), (4, 5), (30, -1))
        for w, s, e in tiles(pb, 6, [1, 3], [4]):
            pb.task(params, [x.at(4)], y, worker=w, sessions=s, elems=e)
        pb.task(ReduceParams(REDUCE_KINDS.index(kind), (3,), (1,), (1,), (0,), (1,)), [x], pb.act("e", (3,)))
        out.append(pb.build())
    return out


@pytest.mark.parametrize("mode", ["default", "gathers", "reference"])
def test_prepared_tasks_are_bit_identical_to_the_reference_bodies(monkeypatch, mode):
    """Each task's prepared runner (rectangles, cached gathers, or the reference body when over budget)
    leaves exactly the arena bytes bodies.run_task does, replayed in the same order."""
    from wavec.targets.interp import prepare
    from wavec.targets.interp.bodies import run_task

    if mode == "gathers":
        monkeypatch.setattr(prepare, "MAX_RECTS", 0)
    if mode == "reference":
        monkeypatch.setattr(prepare, "TASK_CACHE_ELEMS", 0)
    rng = np.random.default_rng(21)
    for profile in opcode_profiles():
        fast, ref = Interpreter(profile, seed=4), Interpreter(profile)
        for _ in range(2):
            f = frames_for(profile, rng)
            flags = rng.random(profile.sessions) < 0.5
            for m in (fast, ref):
                m.write_inputs({k: v[0] for k, v in f.items()}, flags)
            fast.run_beat()
            mem = ref.memory(ref.beat)
            for row in fast.order:
                run_task(ref.plans[row], mem)
            ref.beat += 1
            for a in Arena:
                bufs = [m.arenas[a] if isinstance(m.arenas[a], tuple) else (m.arenas[a],) for m in (fast, ref)]
                assert all(np.array_equal(u, v) for u, v in zip(*bufs)), (mode, a)


def rescan_order(machine: Interpreter) -> list[int]:
    """The order a scheduler that reconsiders every waiter of a counter on each signal gives (the
    interpreter's original loop), without running the tasks; advances a copy of the counters."""
    counters = list(machine.counters)
    rng = np.random.default_rng()
    rng.bit_generator.state = machine.rng.bit_generator.state  # the draws the machine is about to make
    head = [b for b, _ in machine.worker_rows]
    ready, waiting, order = [], {}, []
    need = machine.beat + 1

    def consider(w):
        if head[w] == machine.worker_rows[w][1]:
            counters[0] += 1
            wake(0)
            return
        for c, n in machine.plans[head[w]].waits:
            if counters[c] < n * need:
                waiting.setdefault(c, []).append(w)
                return
        ready.append(w)

    def wake(c):
        for w in waiting.pop(c, []):
            consider(w)

    for w in range(len(machine.worker_rows)):
        consider(w)
    while ready:
        i = int(rng.integers(len(ready)))
        ready[i], ready[-1] = ready[-1], ready[i]
        w = ready.pop()
        plan = machine.plans[head[w]]
        order.append(plan.row)
        head[w] += 1
        counters[plan.signal] += 1
        wake(plan.signal)
        consider(w)
    assert not waiting
    return order


@pytest.mark.parametrize("seed", range(6))
def test_heap_scheduler_orders_like_a_rescan(seed):
    """Random DAGs over 6 workers, with counters shared by several signallers and waits on one counter at
    two levels: the interpreter's wake-at-target scheduler picks the same order as rescanning waiters."""
    rng = np.random.default_rng(100 + seed)
    pb = ProfileBuilder(sessions=1, workers=6)
    x, y = pb.input("x", (4,)), pb.output("y", (4,))
    shared = [pb.counter() for _ in range(3)]
    signalled: list[tuple[int, int]] = []  # (counter, signals so far) after each task
    counts = {c: 0 for c in shared}
    for t in range(60):
        waits = []
        if signalled:
            for c, n in {signalled[int(i)] for i in rng.integers(len(signalled), size=int(rng.integers(0, 3)))}:
                waits.append((c, n))
        if waits and rng.random() < 0.3:  # the same counter twice, at a lower level first
            c, n = waits[0]
            waits = [(c, max(1, n - 1)), *waits][:3]
        sig = shared[int(rng.integers(3))] if rng.random() < 0.4 else pb.counter()
        counts[sig] = counts.get(sig, 0) + 1
        pb.task(copy_params((4,)), [x], y, worker=int(rng.integers(6)), waits=waits, signal=sig)
        signalled.append((sig, counts[sig]))
    # waits name the count reached after the signalling task; a later signaller of a shared counter
    # only raises it, so each wait is met by tasks created before the waiter (no deadlock).
    profile = pb.build()
    machine = Interpreter(profile, seed=seed)
    for _ in range(3):
        machine.write_inputs({"x": np.ones((1, 4), np.float32)}, np.zeros(1, bool))
        want = rescan_order(machine)
        machine.run_beat()
        assert machine.order == want


def test_the_reference_keeps_a_rank_0_state_rank_0_beat_after_beat():
    """wave_eval's elementwise, slice and transpose results keep their rank: a rank-0 state read back the next
    beat has the IR's shape (numpy's ascontiguousarray made it [1], which the next beat refused)."""
    from xdsl.parser import Parser

    from wavec.analysis import wave_eval
    from wavec.registry import make_context

    module = Parser(make_context(), """
    func.func @scalar_state() {
      %x = wave.input "x" : tensor<f32>
      %s = wave.state "s" : tensor<f32>
      %n = wave.ewise "add(mul(%0, 0.5), %1)"(%s, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      wave.state_write "s", %n : tensor<f32>
      wave.output "y", %n : tensor<f32>
      func.return
    }""").parse_module()
    rng = np.random.default_rng(3)
    xs = rng.standard_normal(4)
    state = {"s": np.float32(rng.standard_normal())}
    want = float(state["s"])  # float64 reference of s' = s / 2 + x
    for x in xs:
        out, state = wave_eval.evaluate(module, {"x": np.float32(x)}, state, {})
        want = want * 0.5 + float(np.float32(x))
        assert out["y"].shape == () and state["s"].shape == ()
        assert abs(float(out["y"]) - want) <= 1e-6 * max(1.0, abs(want))
