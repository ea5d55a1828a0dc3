"""bench/builder_peers.TorchStep, the batched PyTorch peer of builder models, against the float64 numpy
reference (frontends/builder/reference.py) on every zoo model's tiny preset: 3 sessions, 8 beats of fresh
unit-normal frames, random resets. Tolerance: max |peer - reference| <= 2e-6 x (1 + max |reference|) per
output: the peer computes in float32, and the largest error seen was 3.4e-7 (duplex:tiny), while a 1%
change in one gate of the GRU cell shows as 4.8e-6. Needs torch (on the GPU machine; here only when
installed)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from bench_loader import load_bench
from wavec import zoo
from wavec.driver import compile_graph
from wavec.frontends.builder.lower import lower_model
from wavec.frontends.builder.model import Model
from wavec.frontends.builder.reference import Reference

torch = pytest.importorskip("torch")
SESSIONS, BEATS = 3, 8


@pytest.mark.parametrize("name", [n for n in zoo.names() if n.endswith(":tiny")])
def test_the_batched_peer_matches_the_reference(name):
    step_cls = load_bench("builder_peers").TorchStep
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    model = zoo.get(name)
    model.finish()
    frames = {n: rng.standard_normal((BEATS, SESSIONS, *d.shape)).astype(np.float32) for n, d in model.inputs.items()}
    reset = rng.random((BEATS, SESSIONS)) < 0.3
    reset[0] = True
    want = Reference(model).run(frames, reset)
    step = step_cls(model, SESSIONS)
    for b in range(BEATS):
        got = step.beat({n: v[b] for n, v in frames.items()}, reset[b])
        for out, ref in want.items():
            err = float(np.abs(got[out].numpy() - ref[b]).max())
            assert err <= 2e-6 * (1 + float(np.abs(ref[b]).max())), f"{name} beat {b} output {out}: {err:.2e}"


def test_the_peer_serves_on_a_beat_clock_like_wavec():
    """BuilderPeerBackend (eager, on the CPU here) under wavec.serve.Server: the outputs it delivers for the
    beats a schedule serves equal the reference's with the schedule's resets."""
    from wavec.serve import BeatClock, Feed, Server, SessionSchedule

    model = zoo.get("gru_stack:tiny")
    backend = load_bench("builder_peers").BuilderPeerBackend(model, SESSIONS, graph=False, device="cpu")
    rng = np.random.default_rng(5)
    frames = {n: rng.standard_normal((BEATS, SESSIONS, *d.shape)).astype(np.float32) for n, d in model.inputs.items()}
    schedule = SessionSchedule([[(0, None)], [(0, 3), (5, None)], [(2, None)]])
    profile = compile_graph(lower_model(zoo.get("gru_stack:tiny")), sessions=SESSIONS)
    result = Server(profile, BeatClock(1.0), backend).run(Feed(frames), schedule)
    active, admitted, dropped = schedule.masks(BEATS)
    want = Reference(model).run(frames, admitted | dropped)
    for name, got in result.outputs.items():
        assert np.abs(got[active] - want[name][active]).max() <= 2e-6 * (1 + np.abs(want[name]).max())


def _state_swap(m):
    x = m.input("x", (4,))
    a, b = m.state("a", (4,), init="ones"), m.state("b", (4,), init="zeros")
    m.state_write("a", b)
    m.state_write("b", a)
    m.output("y", a + x)


def _beat_output(m):  # an output that is a state's own read (a view of what its write replaces)
    m.output("y", m.input("x", (2,)) * 2.0)
    m.output("pos", m.beat())


def _norms_with_session_gain(m):
    x, g = m.input("x", (5, 4)), m.input("g", (4,))
    m.output("ln", m.layer_norm(x, g, m.weight("b", (4,))))
    m.output("rms", m.rms_norm(m.input("z", (3, 4)), g))


def _rope_of_a_weight(m):
    m.output("y", m.rope(m.weight("q", (2, 8)), m.beat()) + m.input("x", (1,)))


def _reduce_over_no_axes(m):
    m.output("y", m.reduce("sum", m.input("x", (4,)), []))


def _per_session_weights(m):  # conv, transposed conv and cell weights scaled by a per-session input
    s = m.input("s", (1,))
    x = m.input("x", (4, 3))
    m.output("conv", m.conv1d(m.slice(x, 0, 0, 2), m.weight("w", (2, 2, 2)) * m.reshape(s, (1, 1, 1)),
                              m.weight("b", (2,)) * s, name="c"))
    m.output("convt", m.conv_transpose1d(x, m.weight("wt", (4, 5, 5)) * m.reshape(s, (1, 1, 1)), m.weight("bt", (5,)),
                                         name="t", stride=2))
    h, c = m.state("h", (2, 4)), m.state("c", (2, 4))
    h2, c2 = m.lstm_cell(m.input("xc", (2, 3)), h, c, m.weight("W", (3, 16)) * s, m.weight("R", (4, 16)),
                         m.weight("B", (16,)) * s)
    m.state_write("h", h2)
    m.state_write("c", c2)
    m.output("h", h2)
    g = m.state("g", (4,))
    g2 = m.gru_cell(m.input("xg", (3,)), g, m.weight("W1", (3, 12)), m.weight("R1", (4, 12)) * s,
                    m.weight("b1", (12,)), m.weight("b2", (12,)) * s)
    m.state_write("g", g2)
    m.output("g", g2)


@pytest.mark.parametrize("build", [_state_swap, _beat_output, _norms_with_session_gain, _rope_of_a_weight,
                                   _reduce_over_no_axes, _per_session_weights])
def test_hand_built_models_the_presets_do_not_cover(build):
    """Cases a review found wrong or refused in the first port: state aliasing, per-session gains, rope of a
    shared tensor, an empty reduction, per-session conv and cell weights."""
    model = Model(build.__name__)
    build(model)
    model.finish()
    rng = np.random.default_rng(3)
    frames = {n: rng.standard_normal((BEATS, SESSIONS, *d.shape)).astype(np.float32) for n, d in model.inputs.items()}
    reset = np.zeros((BEATS, SESSIONS), bool)
    reset[0] = True
    want = Reference(model).run(frames, reset)
    step = load_bench("builder_peers").TorchStep(model, SESSIONS)
    for b in range(BEATS):
        got = step.beat({n: v[b] for n, v in frames.items()}, reset[b])
        for out, ref in want.items():
            assert got[out].shape == ref[b].shape and np.abs(got[out].numpy() - ref[b]).max() <= 2e-6 * (1 + np.abs(ref[b]).max()), (out, b)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU for torch here"))])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_random_weights_made_by_torch_are_the_specs_bits(monkeypatch, precision, device):
    """The peers draw a RandomWeight with torch (on the GPU there); every bit must be wavec.weights' own,
    across the generator's chunk edges (made small here) and for a seed past 2**31."""
    from wavec.weights import RandomWeight

    peers = load_bench("builder_peers")
    monkeypatch.setattr(peers, "_GENERATE_CHUNK", 1000)
    spec = RandomWeight((37, 101), seed=0xDEADBEEF, scale=0.37, precision=precision)
    got = peers.random_weight(torch, spec, device).cpu().numpy()
    assert got.shape == spec.shape
    np.testing.assert_array_equal(got.view(np.uint32), spec.materialize().view(np.uint32))
