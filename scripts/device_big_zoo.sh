#!/usr/bin/env bash
# On the GPU machine: compile the big zoo presets there (it has 16 cores and 128 GB; xDSL comes from wheels
# carried in .device/wheels), check duplex:1b on cuda against the interpreter at a small cohort, and time
# the larger cohorts. Writes logs and JSON rows into $OUT (or ./out).
#   scripts/device_big_zoo.sh [SMALL_SESSIONS] [BIG_SESSIONS...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
SMALL=${1:-2}; shift || true
BIG=("${@:-56}")
python3 -m pip install -q --no-index --find-links .device/wheels xdsl==0.75.0 2>&1 | grep -v WARNING
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
compile() {  # MODEL SESSIONS DIR: per-stage seconds and peak RSS in the log (wavec compile --progress)
  local log="$OUT/compile-$(basename "$3").log"
  timeout "${COMPILE_TIMEOUT:-420}" wavec compile "$1" --sessions "$2" -o "$3" --progress >"$log" 2>&1
  tail -3 "$log"
}
for n in "${BIG[@]}"; do compile duplex:1b "$n" ".device/d1b-$n" & done
compile duplex:1b "$SMALL" ".device/d1b-$SMALL"
python3 scripts/gpu_check.py ".device/d1b-$SMALL" --check-beats 2 --beats 50 --warmup 5 --json "$OUT/d1b-small.json"
wait
for n in "${BIG[@]}"; do
  [ -d ".device/d1b-$n" ] && python3 scripts/gpu_check.py ".device/d1b-$n" --check-beats 0 --beats 100 --warmup 10 \
    --json "$OUT/d1b-$n.json"
done
