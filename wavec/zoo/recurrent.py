"""GRU and LSTM stacks: feature frame in, a stack of recurrent cells with explicit per-layer state
(``m.state`` / ``m.state_write``), a linear readout. Input ``x`` [features]; output ``y`` [out]."""

from __future__ import annotations

from wavec.frontends.builder import Model
from wavec.zoo.blocks import dense

PRESETS = {
    "tiny": dict(features=16, hidden=32, layers=2, out=8),
    "small": dict(features=80, hidden=256, layers=3, out=64),
}


def gru_stack(preset: str = "tiny", *, seed: int = 0, dtype: str = "fp32") -> Model:
    p = PRESETS[preset]
    m = Model(f"gru_stack_{preset}", seed=seed)
    x, d_in, hd = m.input("x", [p["features"]]), p["features"], p["hidden"]
    for i in range(p["layers"]):
        h = m.state(f"gru{i}.h", [hd])
        x = m.gru_cell(x, h, m.weight(f"gru{i}.W", [d_in, 3 * hd], dtype), m.weight(f"gru{i}.R", [hd, 3 * hd], dtype),
                       m.weight(f"gru{i}.bw", [3 * hd], dtype, scale=0.1), m.weight(f"gru{i}.br", [3 * hd], dtype, scale=0.1))
        m.state_write(f"gru{i}.h", x)
        d_in = hd
    m.output("y", dense(m, x, "readout", hd, p["out"], dtype, bias=True))
    return m


def lstm_stack(preset: str = "tiny", *, seed: int = 0, dtype: str = "fp32") -> Model:
    p = PRESETS[preset]
    m = Model(f"lstm_stack_{preset}", seed=seed)
    x, d_in, hd = m.input("x", [p["features"]]), p["features"], p["hidden"]
    for i in range(p["layers"]):
        h, c = m.state(f"lstm{i}.h", [hd]), m.state(f"lstm{i}.c", [hd])
        x, c2 = m.lstm_cell(x, h, c, m.weight(f"lstm{i}.W", [d_in, 4 * hd], dtype),
                            m.weight(f"lstm{i}.R", [hd, 4 * hd], dtype), m.weight(f"lstm{i}.b", [4 * hd], dtype, scale=0.1))
        m.state_write(f"lstm{i}.h", x)
        m.state_write(f"lstm{i}.c", c2)
        d_in = hd
    m.output("y", dense(m, x, "readout", hd, p["out"], dtype, bias=True))
    return m
