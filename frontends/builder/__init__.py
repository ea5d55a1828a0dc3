"""The Python builder frontend: write a streaming model as a program, get the `wave` dialect.

    from wavec.frontends.builder import Model
    m = Model("tiny_gru", seed=0)
    x = m.input("x", [16])
    h = m.state("h", [32])
    h2 = m.gru_cell(x, h, m.weight("W", [16, 96]), m.weight("R", [32, 96]),
                    m.weight("bw", [96]), m.weight("br", [96]))
    m.state_write("h", h2)
    m.output("y", m.linear(h2, m.weight("Wo", [32, 8])))
    profile = m.compile(sessions=4)

model.py records the graph (checking shapes and dtypes at the user's line), lower.py emits wave IR
(the rest of the pipeline is shared with ONNX), reference.py evaluates the record in float64 numpy.
"""

from wavec.frontends.builder.init import from_npz, from_onnx, from_safetensors
from wavec.frontends.builder.model import Carry, KVRing, Model, Tensor

__all__ = ["Carry", "KVRing", "Model", "Tensor", "from_npz", "from_onnx", "from_safetensors"]
