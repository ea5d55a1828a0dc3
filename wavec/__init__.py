"""wavec: compile a stateful streaming model into one persistent GPU kernel serving a cohort of sessions.

    import wavec
    profile = wavec.compile("model.onnx", sessions=64, bindings={"sr": 16000}, frames={"input": 576},
                            states=[("state", "stateN")])
    outputs = profile.run({"input": frames}, backend="interp", reset=reset)
    profile.save("vad.profile"); again = wavec.load("vad.profile")

Only `compile` needs xDSL; loading and running a saved profile needs numpy (and cuda-bindings for cuda).
"""

from wavec.errors import WavecError
from wavec.profile import Profile, load

__all__ = ["Profile", "WavecError", "compile", "load"]


def compile(model, **options):  # noqa: A001 - mirrors the CLI verb
    """See wavec.driver.compile."""
    from wavec.driver import compile as _compile

    return _compile(model, **options)
