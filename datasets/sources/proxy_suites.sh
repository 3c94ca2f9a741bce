#!/usr/bin/env bash
# Rebuild the collected proxy datasets of datasets/sources/proxy_suites.md (issue 43) under OUT_DIR: for each, the
# DSRL-format HDF5 (data_conversion.collect), its Parquet directory for training (data_conversion.dsrl_to_parquet),
# its card (NAME.png) and its figures against DSRL's ranges (data_conversion.frontier, NAME.summary.json).
#
#   bash datasets/sources/proxy_suites.sh OUT_DIR [NAME ...]
#   RETRAIN=1 bash datasets/sources/proxy_suites.sh OUT_DIR [NAME ...]
#
# NAME: CarCircle1-v5, CarCircle1-v4 and CarCircle1-v3 (Safety-Gymnasium; v5 adds PPO-Lagrangians at target
# costs), SwimmerVelocity (velocity), easysparse, easysparse-x6, easysparse-idm and easysparse-brake (MetaDrive; x6
# rolls out easysparse's behaviour policies again, 40 episodes each; idm rolls them out 20 times each beside
# MetaDrive's IDM driving at ten target speeds, as DSRL collected its MetaDrive data; brake is idm plus four IDM
# drivers that slow down once per episode), and CarCircle (Bullet, the fourth Bullet dataset of docs/paper.md's rule,
# recipe in datasets/sources/README.md); without a NAME, the four the proxy table uses beside the Bullet ones:
# CarCircle1-v4, SwimmerVelocity, easysparse, easysparse-x6.
#
# Where a dataset's behaviour policies are committed (datasets/sources/snapshots/NAME: weights and JSON, loaded
# without running code), they are rolled out again with the recorded seed: minutes, and the recorded file wherever
# the simulator steps the same. Otherwise, or with RETRAIN=1, PPO trains them first with the recorded recipe (hours
# on two CPU cores; proxy_suites.md gives each collection's wall time), saving them under OUT_DIR/NAME-snapshots.
# PPO training is seeded but not guaranteed bit-identical across machines, so the sha256 printed at the end may then
# differ from the one recorded in proxy_suites.md. A step whose output exists is skipped, so a second run, or one
# after an interruption, goes on where the first stopped. PYTHON (default the repository's .venv/bin/python) runs
# every step at the lowest priority with one thread.
set -euo pipefail

usage="usage: [RETRAIN=1] bash datasets/sources/proxy_suites.sh OUT_DIR [CarCircle1-v5|CarCircle1-v4|CarCircle1-v3|SwimmerVelocity|easysparse|easysparse-x6|easysparse-idm|easysparse-brake|CarCircle ...]"
[[ $# -ge 1 && $1 != -* ]] || { echo "$usage" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(CarCircle1-v4 SwimmerVelocity easysparse easysparse-x6)
python=${PYTHON:-$repo/.venv/bin/python}
committed=$repo/datasets/sources/snapshots

# How each dataset's behaviour policies are trained: the task, then the collector's training flags, as
# proxy_suites.md records them. easysparse-x6, -idm and -brake train none of their own: they roll out easysparse's.
training() {
  case $1 in
    CarCircle1-v5) echo "CarCircle1 --penalties 0,0.2,0.5 --target-costs 10,20,40 --warm-start --warm-start-steps 250000
      --train-steps 400000 --snapshots 5" ;;
    CarCircle1-v4) echo "CarCircle1 --penalties 0,0.1,0.2,0.3,0.5 --warm-start --warm-start-steps 250000
      --train-steps 400000 --snapshots 5" ;;
    CarCircle1-v3) echo "CarCircle1 --penalties 0,0.05,0.1,0.2,0.5 --warm-start --warm-start-steps 150000
      --train-steps 500000 --snapshots 5" ;;
    SwimmerVelocity) echo "SwimmerVelocity --penalties 0 --target-costs 20,40,80 --train-steps 160000 --snapshots 4" ;;
    easysparse | easysparse-x6 | easysparse-idm | easysparse-brake) echo "easysparse --penalties 0 --target-costs 10,40 --train-steps 80000 --snapshots 3" ;;
    CarCircle) echo "CarCircle" ;;
    *) echo "unknown dataset '$1'; $usage" >&2; return 2 ;;
  esac
}

# How they are rolled out into the dataset (the same flags whether they were trained now or committed).
rollout() {
  case $1 in
    CarCircle1-v5 | CarCircle1-v4 | CarCircle1-v3) echo "--episodes-per-snapshot 20 --max-episodes 500 --seed 0" ;;
    SwimmerVelocity) echo "--episodes-per-snapshot 12 --max-episodes 400 --seed 0" ;;
    easysparse) echo "--episodes-per-snapshot 6 --max-episodes 400 --seed 0" ;;
    easysparse-x6) echo "--episodes-per-snapshot 40 --max-episodes 400 --seed 0" ;;
    easysparse-idm) echo "--idm-speeds 6,8,10,11,12,13,14,16,20,30 --episodes-per-snapshot 20 --max-episodes 400 --seed 0" ;;
    easysparse-brake) echo "--idm-speeds 6,8,10,11,12,13,14,16,20,30 --idm-slowdowns 16:8,20:10,30:10,30:12 --episodes-per-snapshot 20 --max-episodes 480 --seed 0" ;;
    CarCircle) echo "--episodes-per-snapshot 25 --max-episodes 500 --seed 0" ;;
  esac
}

policies_of() { [[ $1 == easysparse-* ]] && echo easysparse || echo "$1"; }

for name in "${names[@]}"; do training "$name" > /dev/null; done  # refuse a bad name before hours of work

cd "$repo"
run() { OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 19 "$python" "$@"; }
for name in "${names[@]}"; do
  read -r -a train <<< "$(training "$name" | tr '\n' ' ')"
  read -r -a roll <<< "$(rollout "$name")"
  task=${train[0]}
  policies=$(policies_of "$name")
  if [[ ! -f $out/$name.hdf5 ]]; then
    if [[ ${RETRAIN:-0} != 1 && -d $committed/$policies ]]; then
      echo "== $name: rolling out the committed behaviour policies of $policies (log: $out/$name.collect.log)"
      source=(--from-snapshots "$committed/$policies")
    elif [[ -f $out/$policies-snapshots.complete ]]; then
      echo "== $name: rolling out the behaviour policies trained here for $policies (log: $out/$name.collect.log)"
      source=(--from-snapshots "$out/$policies-snapshots")
    else
      echo "== $name: training its behaviour policies with PPO, then collecting (log: $out/$name.collect.log)"
      rm -rf "$out/$policies-snapshots"  # a training cut short left only some of them
      source=("${train[@]:1}" --snapshot-dir "$out/$policies-snapshots")
    fi
    run -m data_conversion.collect --task "$task" "${source[@]}" "${roll[@]}" --out "$out/$name.hdf5" --force \
      > "$out/$name.collect.log" 2>&1
    [[ ${source[0]} == --from-snapshots ]] || touch "$out/$policies-snapshots.complete"
  fi
  if [[ ! -d $out/$name ]]; then
    echo "== $name: converting to Parquet"
    run -m data_conversion.dsrl_to_parquet --task "$task" --h5 "$out/$name.hdf5" --out "$out/$name"
  fi
  echo "== $name: frontier card"
  run -m data_conversion.frontier --task "$task" --h5 "$out/$name.hdf5" --json "$out/$name.summary.json" --force
  sha256sum "$out/$name.hdf5"
done
