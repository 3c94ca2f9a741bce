#!/usr/bin/env bash
# Moves the tracked files the GPU call does not need out of the working tree, and back: the device tool copies the
# tracked tree and the carry (`.whl/`, ~29 MiB), 64 MiB together, and the tree with these is ~44 MB.
#   bash benchmarks/gpu/aside.sh out    # before run(command="bash benchmarks/gpu/run.sh", carry=[".whl"])
#   bash benchmarks/gpu/aside.sh back   # after it (git status is clean again)
# DroneRun's dataset (22 MB): the GPU script trains on BallCircle and declared tasks; the precision runs' .pt (9 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
ASIDE=${ASIDE:-/tmp/rllib-caps-aside}
PATHS=(datasets/DroneRun benchmarks/gpu/results/2026-11-26-h200-precision_runs.pt)
case "${1:-}" in
    out) for path in "${PATHS[@]}"; do
             [[ -e $path ]] && mkdir -p "$ASIDE/$(dirname "$path")" && mv "$path" "$ASIDE/$path"
         done ;;
    back) for path in "${PATHS[@]}"; do
              [[ -e $ASIDE/$path ]] && mkdir -p "$(dirname "$path")" && mv "$ASIDE/$path" "$path"
          done ;;
    *) echo "usage: bash benchmarks/gpu/aside.sh out|back" >&2; exit 2 ;;
esac
{ git ls-files -z | xargs -0 stat -c %s 2>/dev/null || true; } \
    | awk '{n += $1} END {printf "tracked tree here now %.1f MiB\n", n / 1048576}'
