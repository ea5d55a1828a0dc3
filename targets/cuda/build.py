"""Builds a kernel's cubin with nvcc, cached by content hash.

The cache key is SHA-256 over the source, the flags and nvcc's own version line, so a changed kernel, flag
or toolkit never reuses a stale cubin; a hit costs one file read instead of a multi-second nvcc run
(Mirage users' complaint, ARCHITECTURE.md). The cache lives in ``$WAVEC_CUBIN_CACHE`` or
``~/.cache/wavec/cubin/``; beside each ``<key>.cubin`` sits ``<key>.log`` with ptxas' register, stack
and spill report.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from wavec.errors import RuntimeBackendError

ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
NVCC_FLAGS = (*ARCH_FLAGS, "-O3", "-lineinfo", "-std=c++17", "-Xptxas", "-v")
CUDA_CANDIDATES = ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc")


def find_nvcc() -> str | None:
    """nvcc from ``$WAVEC_NVCC``, ``$PATH``, ``$CUDA_HOME/bin`` or /usr/local/cuda; None when there is none."""
    env = os.environ.get("WAVEC_NVCC")
    if env:
        return env if Path(env).is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for cand in ([f"{home}/bin/nvcc"] if home else []) + list(CUDA_CANDIDATES):
        if Path(cand).is_file():
            return cand
    return None


@functools.lru_cache(maxsize=4)
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as e:
        raise RuntimeBackendError(f"cannot run {nvcc}: {e}") from e
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def cache_dir() -> Path:
    return Path(os.environ.get("WAVEC_CUBIN_CACHE") or Path.home() / ".cache" / "wavec" / "cubin")


def cache_key(source: str, flags: tuple[str, ...], version: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), version):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()[:32]


def compile_source(
    source: str, output: Path, flags: tuple[str, ...] = NVCC_FLAGS, nvcc: str | None = None, kind: str = "-cubin"
) -> str:
    """Runs nvcc on ``source`` into ``output``; returns its stderr (ptxas' report). Raises
    RuntimeBackendError when nvcc is missing or fails, with nvcc's message."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeBackendError(
            "nvcc not found: install the CUDA toolkit, put nvcc on PATH or set WAVEC_NVCC, "
            "or pass cubin=PATH with a prebuilt kernel"
        )
    with tempfile.TemporaryDirectory(prefix="wavec-nvcc-") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(source)
        cmd = [nvcc, kind, *flags, "-o", str(output), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise RuntimeBackendError(f"nvcc failed to run ({' '.join(cmd)}): {e}") from e
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().replace(str(src), "kernel.cu")
            raise RuntimeBackendError(f"nvcc failed (exit {proc.returncode}) on the generated kernel:\n{msg}")
        return proc.stderr


def build_cubin(source: str, flags: tuple[str, ...] = NVCC_FLAGS, use_cache: bool = True) -> Path:
    """The path of the cubin built from ``source`` (from the cache when an identical build exists)."""
    nvcc = find_nvcc()
    if nvcc is None:
        compile_source(source, Path(os.devnull), flags)  # raises the "nvcc not found" error
    key = cache_key(source, tuple(flags), nvcc_version(nvcc))
    root = cache_dir()
    cubin = root / f"{key}.cubin"
    if use_cache and cubin.is_file() and cubin.stat().st_size > 0:
        return cubin
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=".cubin", dir=root)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        report = compile_source(source, tmp, flags, nvcc)
        (root / f"{key}.log").write_text(report)
        (root / f"{key}.cu").write_text(source)
        os.replace(tmp, cubin)  # atomic: a concurrent builder sees the old file or the whole new one
    finally:
        tmp.unlink(missing_ok=True)
    return cubin


def build_report(cubin: Path) -> str:
    """ptxas' report (registers, stack frame, spills) saved beside a cached cubin, or ''."""
    log = cubin.with_suffix(".log")
    return log.read_text() if log.is_file() else ""
