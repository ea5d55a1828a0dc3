"""`wavec-opt`: run wavec passes on .mlir files, as mlir-opt / xdsl-opt do.

    wavec-opt model.mlir -p 'wave-fuse,wave-cohort{sessions=64}'
    wavec-opt --list-passes
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from xdsl.xdsl_opt_main import xDSLOptMain

from wavec.registry import get_all_dialects, get_all_passes


class WavecOptMain(xDSLOptMain):
    version_format = "wavec-opt (xdsl {xdsl_version})"

    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="wavec modular optimizer driver", args=args)

    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)


def describe_passes() -> str:
    """Each wavec pass with its summary and options (defaults and help), for --list-passes."""
    import dataclasses
    import inspect

    lines = []
    for name, factory in get_all_passes().items():
        cls = factory()
        doc = inspect.getdoc(cls) or ""
        lines.append(f"{name}: {doc.splitlines()[0] if doc else ''}")
        for f in dataclasses.fields(cls):
            help_text = f.metadata.get("help", "")
            lines.append(f"    {f.name.replace('_', '-')}={f.default!r}  {help_text}")
    return "\n".join(lines)


def main(args: Sequence[str] | None = None) -> None:
    warnings.filterwarnings("default", category=DeprecationWarning)
    argv = list(sys.argv[1:] if args is None else args)
    if "--list-passes" in argv:
        print(describe_passes())
        return
    WavecOptMain(args=argv).run()


if __name__ == "__main__":
    main()
