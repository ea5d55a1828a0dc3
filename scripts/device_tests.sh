#!/usr/bin/env bash
# Run on the GPU machine (numpy, onnxruntime, cuda-bindings, nvcc; no xDSL, no registry): the GPU-marked
# pytest cases that need no compiler (tests/test_cuda.py), then the Silero check on profiles compiled
# elsewhere and carried in: scripts/device_tests.sh PROFILE_DIR...
#   wavec compile silero_vad_16k_op15.onnx --sessions N --bind sr=16000 --frame input=576 \
#         --state state=stateN -o .device/vad-N         (on a machine with xDSL)
#   WAVEC_CUBIN_CACHE=$PWD/.device/cubin python3 scripts/prebuild_cubins.py .device/* --builtin 5 72 300
#         (there too: the kernels, so this machine's time goes to running them)
set -euo pipefail
cd "$(dirname "$0")/.."
# The GPU machine reaches no registry: the Silero model comes from .device/ when carried there.
[ -z "${WAVEC_CACHE:-}" ] && [ -f .device/silero_vad_16k_op15.onnx ] && export WAVEC_CACHE=$PWD/.device
python3 scripts/gpu_check.py --builtin 5 72 300 --beats 200 --warmup 20  # 72: the tall tiled-GEMM block
# The tiled CONV's shapes (scripts/device_profiles.py CONV_CASES), when carried in .device/
compgen -G ".device/conv-*" > /dev/null && python3 scripts/gpu_check.py .device/conv-* --beats 10 --warmup 3
python3 scripts/silero_gpu.py "$@"
