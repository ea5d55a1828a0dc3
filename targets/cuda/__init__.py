"""cuda: the persistent-kernel target (kernel generator, nvcc build with a content-hash cache, and a host
runtime over the CUDA driver API). Importing it needs numpy alone; cuda-bindings and nvcc are looked up
only when a session starts or a kernel is built."""

from .build import build_cubin, find_nvcc
from .codegen import generate_kernel, total_counters
from .runtime import CudaSession, gpu_available, kernel_source, run_beats

__all__ = [
    "CudaSession",
    "build_cubin",
    "find_nvcc",
    "generate_kernel",
    "gpu_available",
    "kernel_source",
    "run_beats",
    "total_counters",
]
