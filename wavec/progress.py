"""Compile progress: per-stage wall time and peak memory, shown on stderr when asked, recorded always.

    with progress.using(Progress(sys.stderr)):     # `wavec compile --progress`, or stderr is a terminal
        profile = compile_graph(...)

The driver wraps each pass (and emit, report, save) in ``current().stage(name)``; a long loop inside a
pass iterates through ``current().iterate(items, unit="tasks")``, which draws a bar over the items on a
terminal. Without `using` the current Progress is silent: tests and pipes see nothing. Every stage's
seconds and the process's peak RSS after it are kept in ``timings`` (bench/compile_speed.py reads them).
Stdlib only.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def peak_rss_mb() -> float:
    """The process's peak resident set so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class StageTiming:
    name: str
    seconds: float
    peak_rss_mb: float  # the process's peak after the stage


@dataclass
class Progress:
    """``stream``: where to draw (None: silent). Bars redraw at most every ``interval`` seconds."""

    stream: TextIO | None = None
    interval: float = 0.25
    timings: list[StageTiming] = field(default_factory=list)
    _stage: str | None = None
    _t0: float = 0.0
    _drawn: float = 0.0

    @property
    def shown(self) -> bool:
        return self.stream is not None

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        outer, outer_t0 = self._stage, self._t0
        self._stage, self._t0 = name, time.perf_counter()
        if self.shown:
            self._write(f"{name} ...")
        try:
            yield
        finally:
            seconds = time.perf_counter() - self._t0
            self.timings.append(StageTiming(name, seconds, peak_rss_mb()))
            if self.shown:
                self._write(f"{name}: {seconds:.2f} s (peak RSS {peak_rss_mb():,.0f} MiB)", end="\n")
            self._stage, self._t0 = outer, outer_t0

    def iterate(self, items: Iterable[T], total: int | None = None, unit: str = "items") -> Iterator[T]:
        """Yields ``items``, drawing a bar over them (on a terminal) inside the current stage."""
        if not self.shown or not _is_tty(self.stream):
            yield from items
            return
        if total is None:
            total = len(items)  # type: ignore[arg-type]
        for i, item in enumerate(items):
            now = time.perf_counter()
            if now - self._drawn >= self.interval:
                self._drawn = now
                done = 20 * i // max(total, 1)
                self._write(f"{self._stage or ''} [{'#' * done}{'.' * (20 - done)}] {i:,}/{total:,} {unit} "
                            f"{now - self._t0:.1f} s")
            yield item

    def _write(self, text: str, end: str = "") -> None:
        assert self.stream is not None
        if _is_tty(self.stream):
            self.stream.write("\r\033[K" + text + end)
        elif end:
            self.stream.write(text + end)
        self.stream.flush()


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_current = Progress()


def current() -> Progress:
    """The Progress the compiler reports to (silent unless a caller installed one with `using`)."""
    return _current


@contextlib.contextmanager
def using(progress: Progress) -> Iterator[Progress]:
    global _current
    outer, _current = _current, progress
    try:
        yield progress
    finally:
        _current = outer


def for_cli(enabled: bool) -> Progress:
    """`wavec compile`: shown with --progress or when stderr is a terminal, else silent."""
    return Progress(sys.stderr if enabled or _is_tty(sys.stderr) else None)
