#!/usr/bin/env bash
# Issue 5's GPU measurements in one device call, each step under its own timeout (about 9.5 minutes in
# all, under the device tool's 10 per call; a step that overruns leaves the others' results). Run on the
# GPU machine from the repository root, with profiles and cubins prepared here and carried in .device/:
#   python3 scripts/device_profiles.py --sessions 1 64 1024 4096 16384 65536 --barrier-sessions
#   WAVEC_CUBIN_CACHE=$PWD/.device/cubin python3 scripts/prebuild_cubins.py .device/vad-* .device/zoo-*
# Writes under OUTDIR (default $OUT, the device tool's folder):
#   check.json    every profile against the interpreter, beat p50/p99 (scripts/gpu_check.py)
#   peers.json    Silero against PyTorch eager one at a time, batched and CUDA graph (bench/silero_peers.py)
#   density.json, density.png   the largest cohort each holds at a 32 ms beat (bench/density.py)
# Each step was run by hand on the H200; this script strings them together for one call.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-out}}
mkdir -p "$out"
export WAVEC_CUBIN_CACHE=$PWD/.device/cubin WAVEC_CACHE=$PWD/.device
timeout 120 python3 scripts/gpu_check.py .device/vad-1 .device/vad-64 .device/vad-1024 .device/zoo-* \
  --beats 500 --warmup 50 --check-beats 3 --json "$out/check.json"
timeout 150 python3 bench/silero_peers.py .device/vad-1 .device/vad-64 .device/vad-1024 --json "$out/peers.json"
timeout 300 python3 bench/density.py .device/vad-1024 .device/vad-4096 .device/vad-16384 .device/vad-65536 \
  --beat-ms 32 --beats 200 --runs 3 --json "$out/density.json" --png "$out/density.png"
