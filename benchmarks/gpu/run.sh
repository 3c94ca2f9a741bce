#!/usr/bin/env bash
# The whole GPU benchmark in one call on the device machine (CUDA; Python 3.12 with torch, no Ray): installs the
# carried wheels (`benchmarks/gpu/prepare_carry.sh` prepares `.whl/` here, Ray's cluster daemons included), runs the
# CUDA tests, the step profile, the benchmark matrix and a short real sweep, and writes every figure under $OUT (or
# ./gpu_results). The call takes the tracked tree and the carry, 64 MiB together: first move aside what it does not
# need (`bash benchmarks/gpu/aside.sh out`, and `back` after the call). From the device tool:
#   run(command="bash benchmarks/gpu/run.sh", carry=[".whl"])
# Set PARTS to run a subset, in this order: PARTS="sweep tests profile population bench precision grid sharing" (the
# default is all of them but profile and precision; the sweep first, as the one part never yet run on a GPU; grid and sharing write $OUT/figures.json, which
# `tune --dry-run --gpu-figures` reads); BENCH_SIZES=512x512 and BENCH_PRECISIONS=high measure the matrix at one hidden
# width x batch size and precision, GRID_STEPS and GRID_REPETITIONS shorten the projection, GRID_COMPILE=1 projects with every learner
# compiled (torch_compile_learner; minutes of compiling).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
PARTS=${PARTS:-"sweep tests population bench grid sharing"}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
tar -xJf .whl/ray-native.tar.xz -C /tmp/site || exit 1  # Ray's daemons and _raylet.so, stripped (prepare_carry.sh)
export PYTHONPATH=$PWD/benchmarks/gpu/shim:$PWD:/tmp/site PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0 DSRL_SUPPRESS_IMPORT_ERROR=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/machine.txt"
python3 -c "import torch, ray; print('torch', torch.__version__, 'ray', ray.__version__, 'cuda', torch.version.cuda)" \
    | tee -a "$OUT/machine.txt"
status=0
part() { [[ " $PARTS " == *" $1 "* ]]; }
if part sweep; then  # a real Ray Tune sweep on the GPU: 2 tasks x 3 seeds x 2 algorithms, packed, evaluated, reported
    rm -rf /tmp/sweep && python3 benchmarks/gpu/sweep_data.py /tmp/sweep/data 2>&1 | tee "$OUT/sweep.txt"
    start=$SECONDS
    timeout ${SWEEP_TIMEOUT:-300} python3 -m rllib_caps.tune --config benchmarks/gpu/sweep.yaml --quiet \
        --task-file benchmarks/gpu/sweep_tasks.yaml --data-root /tmp/sweep/data --storage /tmp/sweep/results \
        --name gpu-sweep --num-gpus ${SWEEP_GPUS:-1} 2>&1 | grep -v WARNING | tee -a "$OUT/sweep.txt" || status=1
    echo "sweep: $((SECONDS - start)) s" | tee -a "$OUT/sweep.txt"
    cp -r /tmp/sweep/results/gpu-sweep/report "$OUT/sweep_report" || status=1
fi
if part tests; then
    timeout 420 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_captured_step.py tests/test_population.py \
        2>&1 | tee "$OUT/tests.txt" | tail -15 || status=1
fi
if part profile; then
    python3 benchmarks/gpu/profile_step.py --json "$OUT/profile_h512.json" 2>&1 | grep -v WARNING \
        | tee "$OUT/profile.txt"
    python3 benchmarks/gpu/profile_step.py --precision high --json "$OUT/profile_h512_tf32.json" 2>&1 \
        | grep -v WARNING | tee -a "$OUT/profile.txt"
    python3 benchmarks/gpu/profile_step.py --precision high --population 32 --steps 32 \
        --json "$OUT/profile_population32_tf32.json" 2>&1 | grep -v WARNING | tee -a "$OUT/profile.txt"
fi
if part population; then  # fused critics, losses compiled (the fastest in the profile), TF32 and bf16
    timeout 240 python3 -m rllib_caps.bench --device cuda --hidden 512 --batch 512 --heads 2 --precision high \
        --fused-critics --compile --population 1 8 32 128 --steps 32 --repetitions 3 2>&1 | grep -v WARNING \
        | tee -a "$OUT/population.txt"
    timeout 90 python3 -m rllib_caps.bench --device cuda --hidden 512 --batch 512 --heads 2 --precision high \
        --fused-critics --population 32 --steps 32 --repetitions 3 2>&1 | grep -v WARNING \
        | tee -a "$OUT/population.txt"  # the same machine's reference: the losses eager
    timeout 120 python3 -m rllib_caps.bench --device cuda --hidden 512 --batch 512 --heads 2 --precision bf16 \
        --fused-critics --compile --population 32 --steps 32 --repetitions 3 2>&1 | grep -v WARNING \
        | tee -a "$OUT/population.txt"
fi
if part bench; then  # plain eager, RLlib eager, captured, and captured with forward pass and losses compiled
    for size in ${BENCH_SIZES:-512x512}; do  # hidden x batch
        timeout 300 python3 -m rllib_caps.bench --device cuda --hidden "${size%x*}" --batch "${size#*x}" --heads 2 \
            --precision ${BENCH_PRECISIONS:-highest high} --compile --steps 64 --repetitions 3 --warmup 16 2>&1 \
            | grep -v WARNING | tee -a "$OUT/bench.txt"
    done
fi
if part precision; then  # short CAPS runs in fp32, TF32 and bf16 from one start; evaluate them where the simulator is
    timeout 120 python3 benchmarks/gpu/precision_runs.py train --steps 10000 --out "$OUT" 2>&1 | grep -v WARNING \
        | tee "$OUT/precision.txt"
fi
if part grid; then
    grid_timeout=480; [[ -n ${GRID_COMPILE:-} ]] && grid_timeout=590
    timeout $grid_timeout python3 -m rllib_caps.bench --device cuda --project-grid --grid-config tune_configs/paper.yaml \
        --precision ${GRID_PRECISION:-high} ${GRID_COMPILE:+--compile} \
        --eval-costs benchmarks/eval_rollouts.json --steps ${GRID_STEPS:-256} --repetitions ${GRID_REPETITIONS:-3} \
        --figures "$OUT/figures.json" 2>&1 | grep -v WARNING | tee "$OUT/grid.txt"
fi
if part sharing; then  # N trials (CAPS populations of 3) sharing the GPU against one population of all: the dry run's figures
    timeout 150 python3 benchmarks/bench_gpu_concurrency.py --concurrency 1 3 9 --members 3 --steps ${SHARING_STEPS:-128} \
        --figures "$OUT/figures.json" 2>&1 | grep -v WARNING | tee "$OUT/sharing.txt"
    # CDT (61 steps/s alone on the H200): its trials sharing the GPU against one population of theirs (CDT forms
    # populations since its dropout masks come with the minibatch)
    timeout 240 python3 benchmarks/bench_gpu_concurrency.py --algo cdt --concurrency 1 2 4 --steps 32 2>&1 \
        | grep -v WARNING | tee -a "$OUT/sharing.txt"
fi
exit $status
