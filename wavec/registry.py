"""The one table of wavec's dialects and passes, as lazy factories: a CLI run imports only what its
pipeline uses (xDSL's own registry does the same)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def _lazy(module: str, attr: str) -> Callable[[], type]:
    return lambda: getattr(import_module(module), attr)


def get_all_dialects() -> dict[str, Callable]:
    return {
        "wave": _lazy("wavec.dialects.wave", "Wave"),
        "wpk": _lazy("wavec.dialects.wpk", "Wpk"),
    }


PASSES = {
    "wave-expand-pow": ("wavec.passes.wave_expand_pow", "WaveExpandPow"),
    "wave-fuse": ("wavec.passes.wave_fuse", "WaveFuse"),
    "wave-cohort": ("wavec.passes.wave_cohort", "WaveCohort"),
    "wave-to-wpk": ("wavec.passes.wave_to_wpk", "WaveToWpk"),
    "wpk-schedule": ("wavec.passes.wpk_schedule", "WpkSchedule"),
    "wpk-arena": ("wavec.passes.wpk_arena", "WpkArena"),
    "wpk-payload": ("wavec.passes.wpk_payload", "WpkPayload"),
    "wpk-verify": ("wavec.passes.wpk_verify", "WpkVerify"),
}


def get_all_passes() -> dict[str, Callable]:
    return {name: _lazy(module, attr) for name, (module, attr) in PASSES.items()}


def make_context():
    """A Context with builtin, func and both wavec dialects loaded."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    for factory in get_all_dialects().values():
        ctx.load_dialect(factory())
    return ctx
