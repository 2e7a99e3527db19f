#!/usr/bin/env bash
# Re-record tests/data/tf/<group>.json from real TensorFlow.
# Every scenario runs in its own Python process (MirroredStrategy collectives
# clash across strategy objects in one process).
#
#   tools/tf_record/run_all.sh                  # all groups
#   tools/tf_record/run_all.sh variables        # some groups
#
# Environment: TF_PYTHON (default /work/tfvenv/bin/python), JOBS (parallel
# processes, default 2), OUTDIR (default <repo>/tests/data/tf),
# SCENARIO_TIMEOUT (seconds per scenario, default 600).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${TF_PYTHON:-/work/tfvenv/bin/python}
OUTDIR=${OUTDIR:-$REPO/tests/data/tf}
JOBS=${JOBS:-2}
SCENARIO_TIMEOUT=${SCENARIO_TIMEOUT:-600}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if [ $# -gt 0 ]; then SELECTED="$*"; else SELECTED="strategy_seed variables input_split checkpoints multi_step multi_worker_input retracing semantics padding losses_metrics loss_scale dataset_shard parameter_server gaps ragged_shapes gradients dataset_ops keras_tutorial trust"; fi

"$PY" -c 'import tensorflow as tf; print("TensorFlow", tf.__version__)' 2>/dev/null
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUTDIR"
for g in $SELECTED; do
  script="$HERE/record_$g.py"
  dir="$TMP/$g"
  mkdir -p "$dir"
  "$PY" "$script" --list > "$dir/_names.txt"
  echo "== $g: $(wc -l < "$dir/_names.txt") scenarios"
  # one process per scenario, JOBS at a time
  xargs -P "$JOBS" -I{} sh -c \
    'timeout "$4" "$0" "$1" --scenario "$2" --out "$3/$2.json" > "$3/$2.log" 2>&1 || echo "   FAILED: $2"' \
    "$PY" "$script" {} "$dir" "$SCENARIO_TIMEOUT" < "$dir/_names.txt"
  "$PY" "$HERE/_common.py" merge --group "$g" --dir "$dir" --names "$dir/_names.txt" \
    --out "$OUTDIR/$g.json"
done
