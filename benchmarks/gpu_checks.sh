#!/usr/bin/env bash
# The GPU figures of docs/performance.md in one run (about 8 minutes on one H200): issue 36's
# first call at the GPU size, the 20-step program against the hand-written scan, the step and
# dispatch against hand-written JAX, the input pipeline, the buckets' compile time, the bf16 xl
# step; then the suite under the machine's JAX on its CPU (the Ray files left out: Ray is not
# installed there). Each output goes to $OUT/<name>.txt (or /tmp/gpu_checks).
# Run from the repository root: bash benchmarks/gpu_checks.sh [names...] (default: all).
# Keras travels as wheels in .whl/ when present (see docs/performance.md, "On a GPU").
set -uo pipefail
out=${OUT:-/tmp/gpu_checks}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
wanted=" ${*:-fcs_xl multi_step multi_prefilled step_vs_jax input_pipeline bucket bf16_xl suite} "
bench() {  # name, seconds, script and arguments
  local name=$1 limit=$2; shift 2
  [[ $wanted == *" $name "* ]] || return 0
  echo "=== $name: python3 benchmarks/$* ($(date +%T))"
  (cd benchmarks && timeout "$limit" python3 "$@" 2>&1 | tee "$out/$name.txt")
}
bench fcs_xl 200 first_call_scaling.py --device gpu --size xl --layers 8 --rounds 2 --modes cold
bench multi_step 80 multi_step.py --device gpu --rounds 6
bench multi_prefilled 80 multi_step.py --device gpu --rounds 6 --prefilled
bench step_vs_jax 80 step_vs_jax.py --device gpu --rounds 12
bench input_pipeline 60 input_pipeline.py --device gpu --rounds 11
bench bucket 120 bucket_size.py --device gpu --layers 8 --rounds 3 --only "one buffer" "per tensor" default
bench bf16_xl 120 transformer_bf16.py --device gpu --model xl --rounds 4 --steps 5
if [[ $wanted == *" suite "* ]]; then
  echo "=== suite ($(date +%T))"
  ray_files=$(ls tests/test_ray_train.py tests/test_ps_*.py tests/test_schedule.py | sed 's/^/--ignore=/')
  # shellcheck disable=SC2086
  JAX_PLATFORMS=cpu KERAS_BACKEND=jax timeout 240 python3 -m pytest -q -n 14 -p no:cacheprovider $ray_files \
    2>&1 | tee "$out/suite.txt" | tail -40
fi
echo "=== done ($(date +%T))"
