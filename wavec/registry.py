"""The one table of wavec's dialects and passes, as lazy factories: a CLI run imports only what its
pipeline uses (xDSL's own registry does the same)."""

from __future__ import annotations

import re
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
    "wave-stack-matmuls": ("wavec.passes.wave_stack_matmuls", "WaveStackMatmuls"),
    "wave-hoist": ("wavec.passes.wave_hoist", "WaveHoist"),
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


_EXAMPLES = {"int": "4", "float": "0.5", "str": "tile", "bool": "true"}


def check_pass_options(spec: str) -> None:
    """Checks each pass's options in a pipeline spec against the pass's fields before xDSL builds it, so
    a mistake reads as the pass, the option (as `--list-passes` spells it) and what it takes, not as
    xDSL's "Incompatible types: given (-5,)". Raises ValueError; leaves syntax errors and unknown passes
    to xDSL's parser (which reports them with a caret)."""
    import dataclasses

    from xdsl.passes import parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError:  # a BaseException: xDSL's parser reports it again, with a caret
        return
    _refuse_repeated_options(spec)
    for pass_spec in specs:
        if pass_spec.name not in PASSES:
            continue
        fields = {f.name: f for f in dataclasses.fields(get_all_passes()[pass_spec.name]()) if f.init}
        for option, values in pass_spec.parameters.items():
            field = fields.get(option.replace("-", "_"))
            if field is None:
                known = ", ".join(name.replace("_", "-") for name in fields) or "none"
                raise ValueError(f"{pass_spec.name}: no option {option!r}; its options: {known}")
            kind = field.type if isinstance(field.type, str) else field.type.__name__
            value = values[0] if len(values) == 1 else values
            ok = {"int": lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "float": lambda v: isinstance(v, float), "str": lambda v: isinstance(v, str),
                  "bool": lambda v: isinstance(v, bool)}.get(kind, lambda v: True)
            if len(values) != 1 or not ok(value):
                hint = f" (write {_float_text(value)})" if kind == "float" and _float_text(value) else ""
                raise ValueError(f"{pass_spec.name}: option {option.replace('_', '-')} takes one {kind} "
                                 f"(e.g. {_EXAMPLES.get(kind, '...')}), got {value!r}{hint}")
            if kind == "int" and not -(1 << 63) <= value < 1 << 63:  # the passes store them as i64 attributes
                raise ValueError(f"{pass_spec.name}: option {option.replace('_', '-')} is {value}, beyond a 64-bit integer")


def _float_text(value) -> str:
    """How to write ``value`` (an int, or text like 5e12 that the spec parser keeps as a string) as a
    float option (4.0, 5.0e12), or '' when it is no number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}.0"
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    mantissa, e, exponent = value.lower().partition("e")
    return (mantissa if "." in mantissa else mantissa + ".0") + e + exponent


def _refuse_repeated_options(spec: str) -> None:
    """An option given twice in one pass's braces (in either spelling: min_tile_elems, min-tile-elems) is
    an error; xDSL's parser keeps the last silently. Read from the text, where the repeat still is."""
    for name, body in re.findall(r"([\w-]+)\{([^}]*)\}", spec):
        spelled = [option.replace("_", "-") for option in re.findall(r"([\w-]+)\s*=", body)]
        twice = sorted({o for o in spelled if spelled.count(o) > 1})
        if twice:
            raise ValueError(f"{name}: option {twice[0]} given twice; give it once")
