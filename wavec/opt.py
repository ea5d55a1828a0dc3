"""`wavec-opt`: run wavec passes on .mlir files, as mlir-opt / xdsl-opt do.

    wavec-opt model.mlir -p 'wave-fuse,wave-cohort{sessions=64}'
    wavec-opt model.mlir -p wavec/pipelines/default.yaml --pipeline-var sessions=64 --print-ir-after wave-cohort
    wavec-opt --list-passes
"""

from __future__ import annotations

import io
import os
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.utils.frontend import Frontend
from xdsl.xdsl_opt_main import xDSLOptMain

from wavec.errors import WavecError
from wavec.registry import check_pass_options, get_all_dialects, get_all_passes


@dataclass(frozen=True)
class OnnxInput(Frontend):
    """The frontend of an .onnx input: it refuses the file, naming `wavec import`, which writes a model's wave IR
    (wavec-opt's input) with the bindings and session state an import needs. Raises WavecError."""

    name = "onnx"

    def parse(self, ctx: Context, input: IO[bytes], input_name: str = "input") -> ModuleOp:
        raise WavecError(f"{input_name}: wavec-opt reads wave IR (.mlir), not an ONNX model: write its IR with "
                         "`wavec import MODEL.onnx -o MODEL.mlir` first")


class WavecOptMain(xDSLOptMain):
    """xdsl-opt with wavec's dialects and passes. Errors (a parse error, an unknown pass, a bad pass
    option, a pass failure, a missing input file) print ``wavec-opt: error: <message>`` and exit 1;
    ``--verify-diagnostics`` and ``--parsing-diagnostics`` keep xDSL's behaviour (print, exit 0)."""

    version_format = "wavec-opt (xdsl {xdsl_version})"

    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="wavec modular optimizer driver", args=args)

    def register_all_dialects(self):
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_frontends(self):
        super().register_all_frontends()
        self.available_frontends[OnnxInput.name] = lambda: OnnxInput

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_arguments(self, arg_parser):
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--list-passes", action="store_true", default=False,
            help="print each wavec pass with its summary and options, then exit",
        )
        arg_parser.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
        arg_parser.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                                help="print the IR after this pass (stderr); repeatable")
        arg_parser.add_argument("--pipeline-var", action="append", default=[], metavar="NAME=VALUE",
                                help="value of ${NAME} in a YAML pipeline given to -p")

    def setup_pipeline(self):
        if getattr(self.args, "list_passes", False):
            return  # nothing runs: a -p given alongside is not parsed
        from wavec.pipeline import is_pipeline_file, pipeline_spec

        variables = _pipeline_variables(self.args.pipeline_var, self.args.passes,
                                        is_pipeline_file(self.args.passes))
        self.args.passes = pipeline_spec(self.args.passes, variables)
        check_pass_options(self.args.passes)
        super().setup_pipeline()
        dumps = {"*"} if self.args.print_ir_after_all else set(self.args.print_ir_after)
        unknown = dumps - {"*"} - {p.name for p in self.pipeline.passes}
        if unknown:
            raise WavecError(f"--print-ir-after {', '.join(sorted(unknown))}: not a pass of this pipeline "
                             f"({', '.join(p.name for p in self.pipeline.passes)})")
        if dumps:
            from xdsl.passes import PassPipeline

            from wavec.driver import ir_dump_callback

            verify_and_time = self.pipeline.callback
            dump = ir_dump_callback(dumps)

            def callback(previous, module, following):
                if verify_and_time is not None:
                    verify_and_time(previous, module, following)
                dump(previous, module, following)

            self.pipeline = PassPipeline(self.pipeline.passes, callback)

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        """An input (or a --split-input-file chunk) of nothing but blanks and // comments is an empty module,
        as in mlir-opt: the chunk before the first `// -----// IR Dump After` banner of --print-ir-after
        output is one. Anything else goes to xDSL's parser."""
        data = chunk.read()  # bytes: xDSL opens the input, and splits it, in binary
        if all(not line.strip() or line.lstrip().startswith(b"//") for line in data.splitlines()):
            from xdsl.dialects.builtin import ModuleOp

            return ModuleOp([])
        return super().parse_chunk(io.BytesIO(data), file_extension, start_offset)

    def prepare_output(self):
        """-o FILE: the output is kept in memory and written (atomically) only when the run succeeds,
        so a failure leaves no half-written file."""
        if self.args.output_file is None:
            return sys.stdout
        return _Buffer()

    def run(self):
        if self.args.list_passes:
            print(describe_passes())
            return
        if self.args.output_file is not None and not self.args.output_file.strip():
            raise ValueError("-o: empty output path; name the file to write")
        _Buffer.last = None
        if self.args.input_file == "-":  # stdin, as mlir-opt reads it (xDSL reads stdin when no file is given)
            self.args.input_file = None
        try:
            super().run()
        except VerifyException as e:
            where = self._failing_op(e)
            if not where:
                raise
            raise VerifyException(f"{where}{e}") from e
        if self.args.output_file is not None and _Buffer.last is not None:
            from pathlib import Path

            from wavec.cli import write_atomically
            from wavec.errors import WavecError

            text = _Buffer.last
            try:
                write_atomically(Path(self.args.output_file), lambda f: f.write(text), binary=False)
            except WavecError as e:
                raise ValueError(str(e)) from e

    def _failing_op(self, error: VerifyException) -> str:
        """``FILE:LINE: %name = `` of the op whose verifier raised ``error``: xDSL's message names only the op's
        kind, its note prints the module with the op marked (a ``^^^`` line under it). Empty when the note has
        no mark or the op defines no result; the line only when one line of the input (comments aside)
        defines that result."""
        note = "\n".join(getattr(error, "__notes__", []))
        lines = note.splitlines()
        marked = next((lines[i - 1] for i in range(1, len(lines)) if re.match(r"\s*\^+", lines[i])), "")
        m = re.match(r"\s*(%[\w$.-]+)(?::\d+)? = ", marked)
        if m is None:
            return ""
        name, where = m.group(1), ""
        source = self.args.input_file
        if source and os.path.isfile(source):
            with open(source, encoding="utf-8", errors="replace") as f:
                found = [i for i, ln in enumerate(f, 1)
                         if not ln.lstrip().startswith("//") and re.search(rf"{re.escape(name)}\s*=", ln)]
            where = f"{source}:{found[0]}: " if len(found) == 1 else f"{source}: "
        return f"{where}{name} = "


class _Buffer(io.StringIO):
    """An output stream that remembers its text when xDSL closes it."""

    last: str | None = None

    def close(self):
        _Buffer.last = self.getvalue()
        super().close()


ERRORS = (DiagnosticException, ParseError, ValueError, ArgSpecParseError, OSError, WavecError)


def format_error(e: BaseException) -> str:
    """``wavec-opt: error: <message>``: the first line carries the message (a parse error's location
    first); a parse error's source excerpt follows, as mlir-opt prints it."""
    if isinstance(e, OSError):
        return f"wavec-opt: error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}"
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return f"wavec-opt: error: {type(e).__name__}"
    if isinstance(e, ParseError) and len(lines) >= 3:
        where, excerpt, message = lines[0], lines[1:-1], lines[-1].strip()
        return "\n".join([f"wavec-opt: error: {where}: {message}", *excerpt])
    if isinstance(e, ArgSpecParseError) and len(lines) >= 2:
        message = lines[-1].strip()
        where = next((ln.removeprefix("pass-pipeline:") for ln in lines if ln.startswith("pass-pipeline:")), "")
        return f"wavec-opt: error: pass pipeline: {message}" + (f" (at {where})" if where else "")
    return f"wavec-opt: error: {lines[0].strip()}"


def _pipeline_variables(pairs: list[str], source: str, from_file: bool) -> dict[str, str]:
    """--pipeline-var NAME=VALUE pairs, each a variable the YAML pipeline ``source`` uses. Raises WavecError."""
    if pairs and not from_file:
        raise WavecError(f"--pipeline-var applies to a YAML pipeline (-p FILE.yaml), not to -p {source!r}")
    text = ""
    if pairs:
        from wavec.pipeline import pipeline_text

        text, _ = pipeline_text(source)
    variables = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise WavecError(f"--pipeline-var {pair}: expected NAME=VALUE, e.g. sessions=64")
        if text and "${" + name + "}" not in text:
            raise WavecError(f"--pipeline-var {name}: {source} has no variable ${{{name}}}")
        variables[name] = value
    return variables


def describe_passes() -> str:
    """Each wavec pass with its summary and options (defaults and help), for --list-passes."""
    import dataclasses
    import inspect

    lines = []
    for name, factory in get_all_passes().items():
        cls = factory()
        doc = inspect.getdoc(cls) or ""
        summary = doc.split("\n\n")[0]  # the first paragraph, joined onto one line
        lines.append(f"{name}: {' '.join(summary.split())}")
        for f in dataclasses.fields(cls):
            help_text = f.metadata.get("help", "")
            lines.append(f"    {f.name.replace('_', '-')}={f.default!r}  {help_text}")
    return "\n".join(lines)


def main(args: Sequence[str] | None = None) -> int:
    """The console script; returns the exit status (0, or 1 after printing the error)."""
    warnings.filterwarnings("default", category=DeprecationWarning)
    argv = list(sys.argv[1:] if args is None else args)
    try:
        WavecOptMain(args=argv).run()
        sys.stdout.flush()
    except BrokenPipeError:  # `wavec-opt ... | head`: the reader left; stop quietly, as mlir-opt does
        from wavec.cli import quiet_broken_pipe

        quiet_broken_pipe()
        return 0
    except ERRORS as e:  # after BrokenPipeError, an OSError too
        print(format_error(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
