#!/usr/bin/env bash
# Issue 5's GPU measurements. Run on the GPU machine from the repository root, with profiles and cubins
# prepared here and carried in .device/:
#   python3 scripts/device_profiles.py --sessions 1 64 1024 4096 16384 32768 65536 --barrier-sessions
#   WAVEC_CUBIN_CACHE=$PWD/.device/cubin python3 scripts/prebuild_cubins.py .device/vad-* .device/zoo-* .device/serve-* \
#       --builtin 5 300   (the builtin part's programs)
#   WAVEC_CUBIN_CACHE=$PWD/.device/cubin python3 scripts/prebuild_cubins.py .device/vad-{1,64,1024,16384} --set SWITCH
#   python3 bench/conv.py compile --out .device/conv       (for the conv part)
# The device tool carries at most 64 MiB a call: pack what the parts need (profiles and prebuilt cubins,
# about 1.9 MB each, half that gzipped) as `tar czf .carry/NAME.tgz .device/...` (/.carry/ is ignored), carry
# `.carry`, and run `tar xzf .carry/NAME.tgz && bash scripts/device_issue5.sh PARTS -- $OUT` there.
# Usage: scripts/device_issue5.sh PART... [-- OUTDIR]   (OUTDIR default: $OUT, the device tool's folder)
#   check    Silero against onnxruntime, with its phase timeline (silero.json); the zoo against the interpreter
#            (zoo.json)
#   builtin  the tests' built-in programs (tests/test_cuda.py; the tiled GEMM's at 300 sessions) against the
#            interpreter (builtin.json)
#   big      Silero at 4,096 and 16,384 sessions against onnxruntime (big.json)
#   timeline `wavec run --backend cuda --timeline` on Silero at 1, 64 (30 beats) and 16,384 sessions (6 beats;
#            timeline-N.json), those of them carried
#   dtimeline `wavec run --backend cuda --timeline` on each .device/duplex1b-N carried, 6 beats of random
#            mel frames with one session (re)joining a beat (timeline-duplexN.json; `wavec report PROFILE
#            --timeline FILE` breaks the beat down by phase)
#   ab=NAME=VALUE   Silero at 1, 64 and 1,024 sessions with a kernel switch set (gpu_check --set), against
#            the interpreter (ab.json)
#   peers    Silero against PyTorch eager one at a time (up to 64 sessions), batched and CUDA graph, 1 to
#            16,384 sessions, 1,020 timed beats each (peers.json)
#   density  the largest cohort each system holds at a 32 ms beat (density.json, density.png)
#   conv     Silero's convolutions alone against cuDNN and the floor (conv.json; bench/conv.py)
#   gemm     chained 2048 x 2048 linears: the kernel's MATMUL bodies against cuBLAS eager and CUDA graph and the
#            HBM bandwidth (gemm.json; bench/gemm.py; `python3 bench/gemm.py compile --out .device/gemm` here
#            first); with .device/gemm8k (`--layers 2 --dim 8192`), that too (gemm8k.json)
#   bodies   norms, softmax, LSTM/GRU cells and ring-cache attention alone against PyTorch (bodies.json;
#            bench/bodies.py; `python3 bench/bodies.py compile --out .device/bodies` here first)
#   mma      the tensor cores' mma.sync rate, tf32 and bf16, every SM (mma.json; bench/mma_rate.py)
#   duplex   duplex:1b's density at an 80 ms beat against its batched PyTorch peers (bench/builder_peers.py) on
#            the .device/duplex1b-N profiles (`device_profiles.py --duplex-sessions N...`; duplex.json, .png)
# Every step has its own timeout; `check big timeline conv` fit one 10-minute device call, `peers density`
# another. A step that overruns leaves the others' results, and density.json is rewritten after every row.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do parts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
out=${1:-${OUT:-out}}
usage="usage: $0 check|builtin|big|timeline|dtimeline|ab=NAME=VALUE|peers|density|conv|gemm|bodies|mma|duplex ... [-- OUTDIR]"
[ ${#parts[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
for part in "${parts[@]}"; do  # every part checked before the first one runs
  case $part in
  check | builtin | big | timeline | dtimeline | peers | density | conv | gemm | bodies | mma | duplex | ab=?*=?*) ;;
  *) echo "unknown part $part; $usage" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export WAVEC_CUBIN_CACHE=$PWD/.device/cubin WAVEC_CACHE=$PWD/.device
prelude="import sys; sys.path.insert(0, 'scripts'); from gpu_check import _import_wavec; _import_wavec()"
for part in "${parts[@]}"; do
  case $part in
  check)
    timeout 90 python3 scripts/silero_gpu.py .device/vad-1 .device/vad-64 .device/vad-1024 \
      --check-beats 20 --beats 300 --warmup 30 --json "$out/silero.json"
    timeout 60 python3 scripts/gpu_check.py .device/zoo-* --beats 100 --warmup 10 --json "$out/zoo.json"
    ;;
  builtin)
    timeout 120 python3 scripts/gpu_check.py --builtin 5 300 --check-beats 3 --beats 50 --warmup 5 \
      --json "$out/builtin.json"
    ;;
  big)
    timeout 90 python3 scripts/silero_gpu.py .device/vad-4096 .device/vad-16384 --check-beats 5 --beats 100 \
      --warmup 10 --json "$out/big.json"
    ;;
  timeline)
    for n in 1 64 16384; do
      [ -d .device/vad-$n ] || continue
      python3 -c "$prelude
import numpy as np; from wavec.audio import cohort_schedule
frames, reset = cohort_schedule($n, 30 if $n <= 1024 else 6, seed=3); np.savez('/tmp/inputs-$n.npz', input=frames, reset=reset)"
      timeout 40 python3 -c "$prelude
from wavec.cli import main; sys.exit(main(sys.argv[1:]))" run .device/vad-$n --backend cuda \
        --inputs /tmp/inputs-$n.npz -o /tmp/vad-$n.npz --timeline "$out/timeline-$n.json"
    done
    ;;
  dtimeline)
    for dir in .device/duplex1b-*; do
      [ -d "$dir" ] || continue
      n=${dir##*-}
      python3 -c "import numpy as np; rng = np.random.default_rng(5)
np.savez('/tmp/duplex-$n.npz', mel=rng.normal(size=(6, $n, 80, 8)).astype(np.float32), reset=np.eye(6, $n, dtype=bool))"
      timeout 90 python3 -c "$prelude
from wavec.cli import main; sys.exit(main(sys.argv[1:]))" run "$dir" --backend cuda \
        --inputs /tmp/duplex-$n.npz -o /tmp/duplex-$n-out.npz --timeline "$out/timeline-duplex$n.json"
    done
    ;;
  ab=*)
    timeout 70 python3 scripts/gpu_check.py .device/vad-1 .device/vad-64 .device/vad-1024 \
      --set "${part#ab=}" --check-beats 2 --beats 200 --warmup 20 --json "$out/ab.json"
    ;;
  peers)
    timeout 250 python3 bench/silero_peers.py .device/vad-1 .device/vad-64 .device/vad-1024 .device/vad-4096 \
      .device/vad-16384 --beats 340 --warmup 30 --solo-max-sessions 64 --json "$out/peers.json"
    ;;
  conv)
    timeout 240 python3 bench/conv.py run --out .device/conv --beats 200 --warmup 20 --json "$out/conv.json"
    ;;
  gemm)
    timeout 200 python3 bench/gemm.py run --out .device/gemm --beats 200 --warmup 20 --json "$out/gemm.json"
    [ -d .device/gemm8k ] && timeout 150 python3 bench/gemm.py run --out .device/gemm8k --beats 100 --warmup 10 \
      --json "$out/gemm8k.json"
    ;;
  bodies)
    timeout 300 python3 bench/bodies.py run --out .device/bodies --beats 200 --warmup 20 --json "$out/bodies.json"
    ;;
  mma)
    timeout 60 python3 bench/mma_rate.py --json "$out/mma.json"
    ;;
  duplex)
    timeout 500 python3 bench/density.py .device/duplex1b-* --beat-ms 80 --beats 100 --runs 3 \
      --json "$out/duplex.json" --png "$out/duplex.png"
    ;;
  density)
    timeout 230 python3 bench/density.py .device/vad-16384 .device/vad-32768 .device/vad-65536 \
      --beat-ms 32 --beats 100 --runs 3 --json "$out/density.json" --png "$out/density.png"
    ;;
  esac
done
