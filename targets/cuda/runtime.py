"""Host runtime of the persistent kernel over the CUDA driver API (cuda-bindings, imported lazily).

A `CudaSession` loads a profile once: it builds (or takes) the cubin, allocates the arenas, uploads the
weights, parameters, payloads and worker table, writes every state slot's initial value, puts the host
flags in mapped pinned memory and launches the kernel ONCE, cooperatively (grid = workers, one block per SM),
on a non-blocking stream. Each `beat()` then copies the frames and reset flags into input half b % 2 on a
second stream, publishes the input epoch, spins until the kernel publishes the output epoch, and copies the
outputs of half b % 2 back. `close()` asks the kernel to return and waits for it.

`beat()` is `publish()`, `wait()`, `collect()`. A server may split them to overlap the host with the kernel:
`publish()` may run one beat ahead of `collect()` (beat b+1's frames go into the other half while beat b
runs; the kernel starts b+1 once b is done everywhere), and `ready()` asks without blocking whether the
oldest uncollected beat is done. Two beats ahead is refused: beat b+2 would overwrite the halves of b.

The host/kernel protocol (flag words, error record) is described in codegen.py. While the kernel runs,
nothing here may call a driver function that synchronizes the device (cuMemAlloc/cuMemFree, module loads):
the kernel never returns on its own, so such a call would wait forever.
"""

from __future__ import annotations

import ctypes
import math
import time
from pathlib import Path

import numpy as np

from wavec.errors import RuntimeBackendError
from wavec.opcodes import Arena
from wavec.payload import PAYLOAD_BYTES, PAYLOAD_DTYPE
from wavec.weights import read_arena, stored_spans

from . import codegen
from .build import build_cubin

_cu = None


def driver():
    """The cuda.bindings.driver module, imported on first use (a clear error without cuda-bindings)."""
    global _cu
    if _cu is None:
        try:
            from cuda.bindings import driver as cu  # type: ignore[import-not-found]
        except ImportError as e:
            raise RuntimeBackendError(
                "the cuda backend needs cuda-bindings: pip install 'wavec[cuda]' (or cuda-bindings>=12.6)"
            ) from e
        _cu = cu
    return _cu


def check(result, what: str):
    """Unpacks a cuda-bindings result tuple; raises RuntimeBackendError naming the CUresult on failure."""
    cu = driver()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != cu.CUresult.CUDA_SUCCESS:
        try:
            name = cu.cuGetErrorName(err)[1].decode()
        except Exception:  # noqa: BLE001 - the name is a nicety
            name = str(err)
        raise RuntimeBackendError(f"{what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def gpu_available() -> bool:
    """True when cuda-bindings imports, the driver initializes and at least one device exists."""
    try:
        cu = driver()
        if cu.cuInit(0)[0] != cu.CUresult.CUDA_SUCCESS:
            return False
        err, n = cu.cuDeviceGetCount()
        return err == cu.CUresult.CUDA_SUCCESS and n > 0
    except Exception:  # noqa: BLE001 - no library, no driver, no device: all mean "no"
        return False


def kernel_source(profile) -> str:
    """The profile's kernel.cu when it speaks this runtime's protocol, else one generated from its meta."""
    src = getattr(profile, "kernel_source", "") or ""
    if codegen.PROTOCOL_MARKER in src:
        return src
    return codegen.generate_kernel(profile.meta)


def _session_view(buf: np.ndarray, offset: int, stride: int, shape, sessions: int, what: str) -> np.ndarray:
    """float32 view ``[sessions, *shape]`` of a per-session binding inside a staging buffer."""
    n = math.prod(int(d) for d in shape)
    try:
        flat = np.ndarray((sessions, n), np.float32, buffer=buf, offset=int(offset), strides=(int(stride), 4))
    except (TypeError, ValueError) as e:
        raise RuntimeBackendError(
            f"{what}: offset {offset} / session_stride {stride} x {sessions} sessions of {n} floats lie "
            f"outside its {buf.nbytes}-byte arena half ({e})"
        ) from e
    return flat.reshape((sessions, *[int(d) for d in shape]))


class _Pinned:
    """A page-locked host buffer (optionally mapped into the device's address space) viewed as uint8."""

    def __init__(self, nbytes: int, mapped: bool):
        cu = driver()
        self.nbytes = max(int(nbytes), 64)
        flags = (cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE) if mapped else 0
        self.ptr = int(check(cu.cuMemHostAlloc(self.nbytes, flags), "cuMemHostAlloc"))
        self.array = np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.ptr))
        self.array[:] = 0
        self.dptr = int(check(cu.cuMemHostGetDevicePointer(self.ptr, 0), "cuMemHostGetDevicePointer")) if mapped else 0

    def free(self) -> None:
        if self.ptr:
            self.array = None
            driver().cuMemFreeHost(self.ptr)
            self.ptr = 0


TRACE_WORDS = 3  # matches kTraceWords in the generated kernel


class CudaSession:
    """One loaded profile with its persistent kernel running; feed it beat after beat.

    Options: ``cubin`` (path of a prebuilt cubin; default: build the profile's kernel with nvcc, cached),
    ``device`` (ordinal, default 0), ``timeout_s`` (how long one beat may take before it is an error,
    default 30). ``latencies_us`` holds, per beat, the time from publishing the input epoch (or, for a beat
    published ahead, from seeing the previous beat's output epoch) to seeing its output epoch.
    """

    def __init__(self, profile, cubin: str | Path | None = None, device: int = 0, timeout_s: float = 30.0,
                 trace: bool = False):
        self.profile = profile
        self.trace = bool(trace)
        self.meta = profile.meta
        self.timeout_s = float(timeout_s)
        self.sessions = int(self.meta["sessions"])
        self.workers = int(self.meta["workers"])
        self.latencies_us: list[float] = []
        self.beat_index = 0  # the oldest beat not yet collected
        self.published = 0  # beats published so far (beat_index or beat_index + 1 while one runs ahead)
        self._published_ns: dict[int, int] = {}  # beat -> when its input epoch was published
        self._seen = 0  # beats whose output epoch the host has seen
        self._seen_ns = 0  # when the host saw the last of them
        self._dev: dict[str, int] = {}
        self._pinned: list[_Pinned] = []
        self._launched = False
        self._closed = False
        self._ctx = None
        self._module = None
        self._streams: list = []
        cu = driver()
        try:
            check(cu.cuInit(0), "cuInit")
        except RuntimeBackendError:
            raise
        except Exception as e:  # noqa: BLE001 - cuda-bindings raises its own types when libcuda is absent
            raise RuntimeBackendError(f"no CUDA driver on this machine: {e}") from e
        try:
            self._open(cubin, device)
        except BaseException:
            self._release()
            raise

    # ---- setup ----------------------------------------------------------------------------------------
    def _open(self, cubin, device: int) -> None:
        cu = driver()
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if count <= device:
            raise RuntimeBackendError(f"CUDA device {device} requested; this machine has {count}")
        self._device = check(cu.cuDeviceGet(device), "cuDeviceGet")
        attr = cu.CUdevice_attribute
        major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self._device), "cuDeviceGetAttribute")
        minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self._device), "cuDeviceGetAttribute")
        sms = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self._device), "cuDeviceGetAttribute")
        coop = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, self._device), "cuDeviceGetAttribute")
        if cubin is None and (major, minor) != (9, 0):
            raise RuntimeBackendError(
                f"the cuda backend builds for sm_90a (H100/H200); device {device} is sm_{major}{minor}"
            )
        if not coop:
            raise RuntimeBackendError(f"device {device} does not support cooperative launches")
        self._ctx = check(cu.cuDevicePrimaryCtxRetain(self._device), "cuDevicePrimaryCtxRetain")
        check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

        path = Path(cubin) if cubin is not None else build_cubin(kernel_source(self.profile))
        if not path.is_file():
            raise RuntimeBackendError(f"cubin {path} does not exist")
        image = path.read_bytes()
        self._module = check(cu.cuModuleLoadData(image), f"cuModuleLoadData({path})")
        self._func = check(cu.cuModuleGetFunction(self._module, codegen.KERNEL_NAME.encode()), "cuModuleGetFunction")
        # __launch_bounds__(kBlockThreads, 1) makes the function's limit the block size it was built for.
        self._block_threads = check(
            cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self._func),
            "cuFuncGetAttribute",
        )
        # The GEMM bodies' buffer is dynamic shared memory, past the 48 KB a launch may take unasked: as many
        # bytes as the module itself says it needs (a cubin built elsewhere may have other stages).
        symbol, _ = check(cu.cuModuleGetGlobal(self._module, codegen.GEMM_SMEM_SYMBOL.encode()),
                          f"cuModuleGetGlobal({codegen.GEMM_SMEM_SYMBOL})")
        word = np.zeros(1, np.uint32)
        check(cu.cuMemcpyDtoH(word.ctypes.data, symbol, word.nbytes), f"read {codegen.GEMM_SMEM_SYMBOL}")
        self._smem_bytes = int(word[0])
        check(cu.cuFuncSetAttribute(self._func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    self._smem_bytes), f"cuFuncSetAttribute({self._smem_bytes} bytes of dynamic shared memory)")
        per_sm = check(
            cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self._func, self._block_threads, self._smem_bytes),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
        if self.workers > per_sm * sms:
            raise RuntimeBackendError(
                f"the profile has {self.workers} workers; device {device} holds {per_sm} block(s) on each of "
                f"{sms} SMs at once: recompile for this GPU (fewer workers)"
            )

        meta = self.meta
        ab = {a.name.lower(): int(meta["arena_bytes"].get(a.name.lower(), 0)) for a in Arena}
        self.input_half = ab["input"]
        self.output_half = ab["output"]
        weights = np.ascontiguousarray(self.profile.weights, np.uint8)
        wt = np.asarray(meta["worker_tasks"], np.int32).reshape(-1, 2)
        if wt.shape[0] != self.workers:
            raise RuntimeBackendError(f"worker_tasks has {wt.shape[0]} rows; the profile has {self.workers} workers")
        payloads = np.ascontiguousarray(self.profile.payloads, PAYLOAD_DTYPE)
        if len(payloads) and int(wt.max(initial=0)) > len(payloads):
            raise RuntimeBackendError(f"worker_tasks reaches row {int(wt.max())}; payloads.bin has {len(payloads)}")
        params = np.ascontiguousarray(self.profile.params, "<i8")
        self.n_counters = codegen.total_counters(meta)

        def alloc(name: str, nbytes: int, data: np.ndarray | None = None) -> int:
            nbytes = max(int(nbytes), 16)
            ptr = int(check(cu.cuMemAlloc(nbytes), f"cuMemAlloc({name}, {nbytes} bytes)"))
            self._dev[name] = ptr
            check(cu.cuMemsetD8(ptr, 0, nbytes), f"cuMemsetD8({name})")
            if data is not None and data.nbytes:
                check(cu.cuMemcpyHtoD(ptr, data.ctypes.data, data.nbytes), f"upload {name}")
            return ptr

        alloc("payloads", len(payloads) * PAYLOAD_BYTES, payloads.view(np.uint8))
        alloc("worker_tasks", wt.nbytes, np.ascontiguousarray(wt))
        alloc("params", params.nbytes, params)
        alloc("weights", ab["weights"])
        self._load_weights(weights)
        alloc("state", ab["state"], self._initial_state(ab["state"], weights))
        alloc("act", ab["act"])
        alloc("input", 2 * self.input_half)
        alloc("output", 2 * self.output_half)
        alloc("counters", 4 * self.n_counters)
        if self.trace:
            alloc("trace", 8 * TRACE_WORDS * len(payloads))

        # Host flags and the output epoch: mapped pinned memory, separate 128-byte lines.
        self._flags_mem = _Pinned(256, mapped=True)
        self._pinned.append(self._flags_mem)
        self.host_flags = self._flags_mem.array[:16].view(np.uint32)
        self.out_epoch = self._flags_mem.array[128 : 128 + 4 * codegen.OUT_EPOCH_WORDS].view(np.uint32)
        self._in_stage = _Pinned(self.input_half, mapped=False)
        self._out_stage = _Pinned(self.output_half, mapped=False)
        self._pinned += [self._in_stage, self._out_stage]
        self._input_views = {
            spec["name"]: _session_view(self._in_stage.array[: self.input_half], spec["offset"], spec["session_stride"],
                                        spec["shape"], self.sessions, f"input {spec['name']!r}")
            for spec in meta["inputs"]
        }
        reset = meta.get("reset")
        self._reset_view = (
            _session_view(self._in_stage.array[: self.input_half], reset["offset"], reset["session_stride"], (),
                          self.sessions, "reset flags")
            if reset else None
        )
        self._output_views = {
            spec["name"]: _session_view(self._out_stage.array[: self.output_half], spec["offset"], spec["session_stride"],
                                        spec["shape"], self.sessions, f"output {spec['name']!r}")
            for spec in meta["outputs"]
        }
        self._output_bytes = {  # each output's [begin, end) in the output half: what `collect` copies back
            spec["name"]: (spec["offset"], spec["offset"] + (self.sessions - 1) * spec["session_stride"]
                           + 4 * math.prod(spec["shape"]))
            for spec in meta["outputs"]
        }

        flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        self._kernel_stream = check(cu.cuStreamCreate(flags), "cuStreamCreate")
        self._copy_stream = check(cu.cuStreamCreate(flags), "cuStreamCreate")
        self._streams = [self._kernel_stream, self._copy_stream]
        check(cu.cuCtxSynchronize(), "cuCtxSynchronize (uploads)")
        self._launch()

    def _load_weights(self, stored: np.ndarray) -> None:
        """Uploads weights.bin (``stored``) to its ranges of the weights arena and generates the rest on
        the device (codegen.FILL_KERNEL_NAME), so a model's random weights never cross PCIe."""
        cu = driver()
        base = self._dev["weights"]
        generated = self.profile.generated_weights
        for begin, end, at in stored_spans(self.profile.arena_bytes("weights"), generated):
            check(cu.cuMemcpyHtoD(base + begin, stored.ctypes.data + at, end - begin), "upload weights")
        if not generated:
            return
        fill = check(cu.cuModuleGetFunction(self._module, codegen.FILL_KERNEL_NAME.encode()), "cuModuleGetFunction(fill)")
        for spec in generated:
            args = [
                ctypes.c_uint64(base + int(spec["offset"])),
                ctypes.c_uint64(int(spec["elems"])),
                ctypes.c_int(codegen.FILL_KINDS[spec["kind"]]),
                ctypes.c_uint32(int(spec.get("seed", 0))),
                ctypes.c_float(float(spec.get("scale", 0.0))),
                ctypes.c_int(int(spec.get("precision") == "bf16")),
                ctypes.c_float(float(spec.get("value", 0.0))),
            ]
            ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
            blocks = max(1, min(4096, -(-int(spec["elems"]) // codegen.BLOCK_THREADS)))
            check(cu.cuLaunchKernel(fill, blocks, 1, 1, codegen.BLOCK_THREADS, 1, 1, 0, 0, ptrs, 0),
                  f"generate weight {spec.get('name', '?')!r}")
        check(cu.cuCtxSynchronize(), "cuCtxSynchronize (generated weights)")

    def _initial_state(self, nbytes: int, weights: np.ndarray) -> np.ndarray:
        """The state arena image with every session's slot at its initial value."""
        image = np.zeros(max(nbytes, 0), np.uint8)
        for st in self.meta.get("states", []):
            size = 4 * math.prod(int(d) for d in st["shape"])
            init = read_arena(weights, self.profile.arena_bytes("weights"), self.profile.generated_weights,
                              int(st["init_offset"]), size)
            if init.nbytes != size:
                raise RuntimeBackendError(f"state {st['name']!r}: initial value at {st['init_offset']} lies outside weights.bin")
            slots = np.ndarray((self.sessions, size), np.uint8, buffer=image, offset=int(st["offset"]),
                               strides=(int(st["session_stride"]), 1))
            slots[:] = init[None, :]
        return image

    def _launch(self) -> None:
        cu = driver()
        d = self._dev
        values = [
            ctypes.c_uint64(d["payloads"]),
            ctypes.c_uint64(d["worker_tasks"]),
            ctypes.c_uint64(d["params"]),
            ctypes.c_uint64(d["weights"]),
            ctypes.c_uint64(d["state"]),
            ctypes.c_uint64(d["act"]),
            ctypes.c_uint64(d["input"]),
            ctypes.c_uint64(d["output"]),
            ctypes.c_uint64(d["counters"]),
            ctypes.c_uint64(self._flags_mem.dptr),
            ctypes.c_uint64(self._flags_mem.dptr + 128),
            ctypes.c_uint64(self.input_half),
            ctypes.c_uint64(self.output_half),
            ctypes.c_uint64(d.get("trace", 0)),
        ]
        self._arg_values = values  # keep alive while the driver reads them
        self._arg_ptrs = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        check(
            cu.cuLaunchCooperativeKernel(
                self._func, self.workers, 1, 1, self._block_threads, 1, 1, self._smem_bytes, self._kernel_stream,
                ctypes.addressof(self._arg_ptrs),
            ),
            "cuLaunchCooperativeKernel",
        )
        self._launched = True

    def read_trace(self) -> np.ndarray:
        """The last finished beat's timeline, uint64 [payload rows, 3]: when each task began waiting, began
        its body and ended it (GPU %globaltimer, ns). Needs ``trace=True``; read between beats."""
        if not self.trace:
            raise RuntimeBackendError("this CUDA session was opened without trace=True")
        cu = driver()
        out = np.zeros((len(self.profile.payloads), TRACE_WORDS), np.uint64)
        check(cu.cuMemcpyDtoH(out.ctypes.data, self._dev["trace"], out.nbytes), "read trace")
        return out

    def read_weights(self, offset: int = 0, nbytes: int | None = None) -> np.ndarray:
        """Bytes ``[offset, offset + nbytes)`` of the device's weights arena (uint8; default: all of it),
        generated weights included: what the kernel reads."""
        cu = driver()
        total = int(self.meta["arena_bytes"]["weights"])
        nbytes = total - offset if nbytes is None else nbytes
        if not (0 <= offset and 0 <= nbytes and offset + nbytes <= total):
            raise RuntimeBackendError(f"read_weights: [{offset}, {offset + nbytes}) is outside the {total}-byte weights arena")
        out = np.zeros(nbytes, np.uint8)
        check(cu.cuMemcpyDtoH(out.ctypes.data, self._dev["weights"] + offset, out.nbytes), "read weights")
        return out

    # ---- beats ----------------------------------------------------------------------------------------
    def beat(self, frames: dict[str, np.ndarray], reset: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Runs one beat. ``frames[name]`` is float32 ``[sessions, *shape]``; ``reset`` bool ``[sessions]``.
        Returns each output as a new float32 array ``[sessions, *shape]``."""
        self.publish(frames, reset)
        self.wait()
        return self.collect()

    def publish(self, frames: dict[str, np.ndarray], reset: np.ndarray | None = None) -> None:
        """Copies the next beat's inputs (beat ``published``) into half ``published % 2`` and publishes its input
        epoch. May be called while the previous beat still runs (one beat ahead of `collect`), not further.
        ``reset`` flags the slots whose state returns to its initial value first; beat 0's are moot (every slot
        starts there) and not passed on."""
        if self._closed:
            raise RuntimeBackendError("the CUDA session is closed")
        cu = driver()
        b = self.published
        if b - self.beat_index >= 2:
            raise RuntimeBackendError(
                f"beat {b} cannot be published before beat {self.beat_index} is collected: it would overwrite "
                "that beat's input and output halves"
            )
        for name, view in self._input_views.items():
            if name not in frames:
                raise RuntimeBackendError(f"input {name!r} is missing for beat {b}")
            if frames[name] is not view:  # frames written into `input_views` are already staged
                view[...] = frames[name]
        if self._reset_view is not None:
            # Beat 0 resets nothing: every slot holds its initial state, uploaded at load (_initial_state), and a
            # cohort admitted at once (duplex:1b's 96 sessions) would rewrite 3.9 GB of it with the same bytes.
            flags = np.zeros(self.sessions, bool) if reset is None or b == 0 else np.asarray(reset, bool)
            self._reset_view[...] = flags.astype(np.float32)  # the program's reset tasks read these
        half = b % 2
        if self.input_half:
            check(
                cu.cuMemcpyHtoDAsync(self._dev["input"] + half * self.input_half, self._in_stage.ptr, self.input_half,
                                     self._copy_stream),
                "cuMemcpyHtoDAsync (inputs)",
            )
            check(cu.cuStreamSynchronize(self._copy_stream), "cuStreamSynchronize (inputs)")
        self.host_flags[codegen.HOST_INPUT_EPOCH] = (b + 1) & 0xFFFFFFFF
        self._published_ns[b] = time.perf_counter_ns()
        self.published = b + 1

    def _done(self, b: int) -> bool:
        """True once the kernel has published beat b's output epoch; on the first sight records its latency:
        from when the beat could start (its publication, or the host seeing beat b-1 done when it was
        published ahead) to now."""
        if self._seen > b:
            return True
        target = (b + 1) & 0xFFFFFFFF
        if ((int(self.out_epoch[codegen.OUT_EPOCH]) - target) & 0xFFFFFFFF) >= 0x80000000:
            return False
        now = time.perf_counter_ns()
        start = max(self._published_ns[b], self._seen_ns if b else 0)
        self.latencies_us.append((now - start) / 1e3)
        self._seen, self._seen_ns = b + 1, now
        return True

    def _check_waiting(self) -> int:
        b = self.beat_index
        if b >= self.published:
            raise RuntimeBackendError(f"beat {b} was not published; call publish() first")
        return b

    @property
    def input_views(self) -> dict[str, np.ndarray]:
        """Per input, float32 ``[sessions, *shape]`` views of the pinned staging buffer that `publish` copies to
        the device. A caller that writes the next beat's frames here and passes these same arrays to
        `publish` saves a host copy (a 16,384-session Silero beat is 38 MB). Free to write again once
        `publish` returns."""
        return dict(self._input_views)

    def ready(self) -> bool:
        """Without blocking: True once the oldest uncollected beat is done (then `collect` returns at once).
        Raises RuntimeBackendError when the kernel recorded an error."""
        b = self._check_waiting()
        if self._done(b):
            self._raise_if_failed()
            return True
        self._raise_if_failed()
        return False

    def wait(self) -> None:
        """Spins until the kernel publishes the output epoch of the oldest uncollected beat."""
        cu = driver()
        b = self._check_waiting()
        deadline = self._published_ns[b] + int(self.timeout_s * 1e9)
        polls = 0
        while not self._done(b):
            polls += 1
            if polls % 1024 == 0:
                self._raise_if_failed()
                if time.perf_counter_ns() > deadline:
                    raise RuntimeBackendError(
                        f"beat {b} did not finish within {self.timeout_s} s (output epoch {int(self.out_epoch[0])}); "
                        "the schedule may deadlock: run wavec verify on the profile"
                    )
                if cu.cuStreamQuery(self._kernel_stream)[0] != cu.CUresult.CUDA_ERROR_NOT_READY:
                    self._raise_if_failed()
                    err = cu.cuStreamQuery(self._kernel_stream)[0]
                    raise RuntimeBackendError(f"the persistent kernel ended during beat {b} ({err.name})")
        self._raise_if_failed()

    def collect(self, names=None, copy: bool = True) -> dict[str, np.ndarray]:
        """Copies the outputs of the oldest uncollected beat back (waiting for it first if need be);
        advances to the next beat. ``names``: the outputs to copy (default all); only the bytes that span
        them cross the bus (a state's update output can be most of a beat's: Silero's is 1 KB a session
        against 4 bytes of speech probability). Returns new arrays, or with ``copy=False`` views of the pinned
        staging buffer the bytes came back to, valid until the next `collect`: a caller that stores them
        anyway saves a host copy of every output (duplex:1b's are 25.7 MB a beat at 96 sessions). Raises
        RuntimeBackendError for a name the profile lacks."""
        cu = driver()
        names = list(self._output_views) if names is None else list(names)
        unknown = sorted(set(names) - set(self._output_views))
        if unknown:
            raise RuntimeBackendError(f"no output {', '.join(map(repr, unknown))}; the profile's outputs are "
                                      f"{', '.join(map(repr, self._output_views))}")
        b = self._check_waiting()
        if not self._done(b):
            self.wait()
        half = b % 2
        spans = [self._output_bytes[name] for name in names]
        begin, end = min((b for b, _ in spans), default=0), max((e for _, e in spans), default=0)
        if end > begin:
            check(
                cu.cuMemcpyDtoHAsync(self._out_stage.ptr + begin, self._dev["output"] + half * self.output_half + begin,
                                     end - begin, self._copy_stream),
                "cuMemcpyDtoHAsync (outputs)",
            )
            check(cu.cuStreamSynchronize(self._copy_stream), "cuStreamSynchronize (outputs)")
        self._published_ns.pop(b, None)
        self.beat_index += 1
        return {name: np.array(self._output_views[name], np.float32) if copy else self._output_views[name]
                for name in names}

    def error(self) -> str | None:
        """The kernel's first recorded error as a sentence, or None."""
        e = self.out_epoch
        code = int(e[codegen.OUT_ERROR])
        if not code:
            return None
        what = codegen.ERRORS.get(code, f"error code {code}")
        return (
            f"the kernel stopped: {what} (task {int(e[codegen.OUT_ERROR_TASK]) & 0xFFFFFFFF}, counter "
            f"{int(e[codegen.OUT_ERROR_COUNTER])}, seen {int(e[codegen.OUT_ERROR_SEEN])}, target "
            f"{int(e[codegen.OUT_ERROR_TARGET])}, beat {int(e[codegen.OUT_ERROR_BEAT])}, worker "
            f"{int(e[codegen.OUT_ERROR_WORKER])})"
        )

    def _raise_if_failed(self) -> None:
        msg = self.error()
        if msg:
            raise RuntimeBackendError(msg)

    # ---- teardown -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Asks the kernel to return, waits for it (up to timeout_s) and frees everything."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def _release(self) -> None:
        cu = driver()
        hung = False
        if self._launched:
            self.host_flags[codegen.HOST_STOP] = 1
            deadline = time.monotonic() + self.timeout_s
            while cu.cuStreamQuery(self._kernel_stream)[0] == cu.CUresult.CUDA_ERROR_NOT_READY:
                if time.monotonic() > deadline:
                    hung = True
                    break
                time.sleep(1e-4)
            self._launched = False
        if hung:
            # Freeing memory a running kernel uses would block forever; leak it and say so.
            raise RuntimeBackendError(f"the persistent kernel did not stop within {self.timeout_s} s of the stop flag")
        for s in self._streams:
            cu.cuStreamDestroy(s)
        self._streams = []
        for ptr in self._dev.values():
            cu.cuMemFree(ptr)
        self._dev = {}
        for p in self._pinned:
            p.free()
        self._pinned = []
        if self._module is not None:
            cu.cuModuleUnload(self._module)
            self._module = None
        if self._ctx is not None:
            cu.cuDevicePrimaryCtxRelease(self._device)
            self._ctx = None

    def __enter__(self) -> "CudaSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_beats(profile, frames: dict[str, np.ndarray], reset: np.ndarray, **options) -> dict[str, np.ndarray]:
    """Runs ``beats`` beats on the GPU: ``frames[name]`` float32 ``[beats, sessions, *shape]``, ``reset`` bool
    ``[beats, sessions]``; returns each output ``[beats, sessions, *shape]`` (the interpreter's contract).
    Options: those of `CudaSession`, ``latencies`` (a list that receives each beat's latency in us) and
    ``timeline`` (a `timeline.Timeline` that receives each beat's trace; the kernel then runs traced)."""
    sink = options.pop("latencies", None)
    timeline = options.pop("timeline", None)
    if timeline is not None:
        options["trace"] = True
    beats = int(np.asarray(reset).shape[0])
    results: dict[str, list[np.ndarray]] = {spec["name"]: [] for spec in profile.meta["outputs"]}
    with CudaSession(profile, **options) as session:
        for b in range(beats):
            out = session.beat({name: arr[b] for name, arr in frames.items()}, np.asarray(reset)[b])
            if timeline is not None:
                timeline.add(profile, session.read_trace())
            for name, value in out.items():
                results[name].append(value)
        if sink is not None:
            sink.extend(session.latencies_us)
    return {
        name: np.stack(vals) if vals else np.zeros((0, profile.sessions, *spec["shape"]), np.float32)
        for (name, vals), spec in zip(results.items(), profile.meta["outputs"])
    }
