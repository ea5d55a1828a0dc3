#!/usr/bin/env bash
# Issue 5's GPU measurements, in two device calls of under 10 minutes each (every step under its own
# timeout: a step that overruns leaves the others' results). Run on the GPU machine from the repository
# root, with profiles and cubins prepared here and carried in .device/:
#   python3 scripts/device_profiles.py --sessions 1 64 1024 4096 16384 65536 --barrier-sessions
#   python3 scripts/device_profiles.py --sessions 1 64 1024 --min-tile-flops 2048 --only-threads
#   WAVEC_CUBIN_CACHE=$PWD/.device/cubin python3 scripts/prebuild_cubins.py .device/vad-* .device/zoo-* .device/serve-*
# Usage: scripts/device_issue5.sh check|peers [OUTDIR]   (OUTDIR default: $OUT, the device tool's folder)
#   check: Silero against onnxruntime with its phase timeline (silero.json), the zoo against the interpreter
#          (zoo.json), `wavec run --backend cuda --timeline` (timeline.json), and the density benchmark at a
#          32 ms beat (density.json, density.png)
#   peers: Silero against PyTorch eager one at a time, batched and CUDA graph (peers.json, peers-large.json)
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?check or peers}
out=${2:-${OUT:-out}}
mkdir -p "$out"
export WAVEC_CUBIN_CACHE=$PWD/.device/cubin WAVEC_CACHE=$PWD/.device
# the CLI from this checkout, on a machine without xDSL
wavec_cli=(python3 -c "import sys; sys.path.insert(0, 'scripts'); from gpu_check import _import_wavec; _import_wavec()
from wavec.cli import main; sys.exit(main(sys.argv[1:]))")
case $part in
check)
  timeout 110 python3 scripts/silero_gpu.py .device/vad-1 .device/vad-1-f2048 .device/vad-64 .device/vad-1024 \
    --check-beats 20 --beats 500 --warmup 50 --json "$out/silero.json"
  timeout 100 python3 scripts/gpu_check.py .device/zoo-* --beats 200 --warmup 20 --json "$out/zoo.json"
  python3 -c "import sys; sys.path.insert(0, 'scripts'); from gpu_check import _import_wavec; _import_wavec()
import numpy as np; from wavec.audio import cohort_schedule
frames, reset = cohort_schedule(64, 30, seed=3); np.savez('$out/inputs-64.npz', input=frames, reset=reset)"
  timeout 40 "${wavec_cli[@]}" run .device/vad-64 --backend cuda --inputs "$out/inputs-64.npz" -o "$out/vad-64.npz" \
    --timeline "$out/timeline.json"
  rm -f "$out/inputs-64.npz" "$out/vad-64.npz"
  timeout 300 python3 bench/density.py .device/vad-1024 .device/vad-4096 .device/vad-16384 .device/vad-65536 \
    --beat-ms 32 --beats 200 --runs 3 --json "$out/density.json" --png "$out/density.png"
  ;;
peers)
  timeout 200 python3 bench/silero_peers.py .device/vad-1 .device/vad-64 .device/vad-1024 --json "$out/peers.json"
  timeout 330 python3 bench/silero_peers.py .device/vad-4096 .device/vad-16384 .device/vad-65536 --beats 200 \
    --warmup 20 --check-beats 10 --json "$out/peers-large.json"
  ;;
*)
  echo "usage: $0 check|peers [OUTDIR]" >&2
  exit 2
  ;;
esac
