#!/usr/bin/env bash
# Rebuild the collected proxy datasets of datasets/sources/proxy_suites.md (issue 43) under OUT_DIR: for each, the
# DSRL-format HDF5 (data_conversion.collect), its Parquet directory for training (data_conversion.dsrl_to_parquet),
# its card (NAME.png) and its figures against DSRL's ranges (data_conversion.frontier, NAME.summary.json).
#
#   bash datasets/sources/proxy_suites.sh OUT_DIR [NAME ...]
#
# NAME: CarCircle1-v4 and CarCircle1-v3 (Safety-Gymnasium), SwimmerVelocity (velocity), easysparse and easysparse-x6
# (MetaDrive; x6 rolls out easysparse's snapshots again, so it builds easysparse first), and CarCircle (Bullet, the
# fourth Bullet dataset of docs/paper.md's rule, recipe in datasets/sources/README.md); without a NAME, the four the
# proxy table uses beside the Bullet ones: CarCircle1-v4, SwimmerVelocity, easysparse, easysparse-x6. A step whose output
# exists is skipped, so a second run, or one after an interruption, goes on where the first stopped. PYTHON (default
# the repository's .venv/bin/python) runs every step at the lowest priority with one thread: hours on two CPU cores
# (proxy_suites.md gives each collection's wall time). PPO training is seeded but not guaranteed bit-identical
# across machines, so the sha256 printed at the end may differ from the one recorded in proxy_suites.md.
set -euo pipefail

usage="usage: bash datasets/sources/proxy_suites.sh OUT_DIR [CarCircle1-v4|CarCircle1-v3|SwimmerVelocity|easysparse|easysparse-x6|CarCircle ...]"
[[ $# -ge 1 && $1 != -* ]] || { echo "$usage" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(CarCircle1-v4 SwimmerVelocity easysparse easysparse-x6)
python=${PYTHON:-$repo/.venv/bin/python}

# The task and the collector's flags of each dataset (besides --out and --plot), as proxy_suites.md records them.
recipe() {
  case $1 in
    CarCircle1-v4) echo "CarCircle1 --snapshot-dir $out/CarCircle1-v4-snapshots --penalties 0,0.1,0.2,0.3,0.5
      --warm-start --warm-start-steps 250000 --train-steps 400000 --snapshots 5 --episodes-per-snapshot 20
      --max-episodes 500 --seed 0" ;;
    CarCircle1-v3) echo "CarCircle1 --snapshot-dir $out/CarCircle1-v3-snapshots --penalties 0,0.05,0.1,0.2,0.5
      --warm-start --warm-start-steps 150000 --train-steps 500000 --snapshots 5 --episodes-per-snapshot 20
      --max-episodes 500 --seed 0" ;;
    SwimmerVelocity) echo "SwimmerVelocity --snapshot-dir $out/SwimmerVelocity-snapshots --penalties 0
      --target-costs 20,40,80 --train-steps 160000 --snapshots 4 --episodes-per-snapshot 12 --max-episodes 400
      --seed 0" ;;
    easysparse) echo "easysparse --snapshot-dir $out/easysparse-snapshots --penalties 0 --target-costs 10,40
      --train-steps 80000 --snapshots 3 --episodes-per-snapshot 6 --max-episodes 400 --seed 0" ;;
    easysparse-x6) echo "easysparse --from-snapshots $out/easysparse-snapshots --episodes-per-snapshot 40
      --max-episodes 400 --seed 0" ;;
    CarCircle) echo "CarCircle --episodes-per-snapshot 25 --max-episodes 500 --seed 0" ;;
    *) echo "unknown dataset '$1'; $usage" >&2; return 2 ;;
  esac
}

for name in "${names[@]}"; do recipe "$name" > /dev/null; done  # refuse a bad name before hours of work
if [[ " ${names[*]} " == *" easysparse-x6 "* && " ${names[*]} " != *" easysparse "* ]]; then
  names=(easysparse "${names[@]}")
fi

cd "$repo"
run() { OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 19 "$python" "$@"; }
for name in "${names[@]}"; do
  read -r -a flags <<< "$(recipe "$name" | tr '\n' ' ')"
  task=${flags[0]}
  if [[ ! -f $out/$name.hdf5 ]]; then
    echo "== $name: collecting (log: $out/$name.collect.log)"
    run -m data_conversion.collect --task "${flags[@]}" --out "$out/$name.hdf5" --force \
      > "$out/$name.collect.log" 2>&1
  fi
  if [[ ! -d $out/$name ]]; then
    echo "== $name: converting to Parquet"
    run -m data_conversion.dsrl_to_parquet --task "$task" --h5 "$out/$name.hdf5" --out "$out/$name"
  fi
  echo "== $name: frontier card"
  run -m data_conversion.frontier --task "$task" --h5 "$out/$name.hdf5" --json "$out/$name.summary.json" --force
  sha256sum "$out/$name.hdf5"
done
