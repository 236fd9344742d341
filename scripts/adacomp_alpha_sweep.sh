#!/usr/bin/env bash
# The step-size sweep behind experiments/adacomp.toml's alphas: each method at 200 workers on the full setting
# (the adacomp-cnn on Fashion-MNIST, batch 10, random waits; c = 0.01 for the compressed methods), 20,000 PS
# updates, seed 1, on the sim backend. About 3 minutes of one core per run.
# Usage: scripts/adacomp_alpha_sweep.sh [OUT_DIR] [SEED]   (default results/adacomp/alpha-sweep, seed 1;
# $PYTHON picks the interpreter). Writes OUT_DIR/runs/METHOD-METHOD.lr=ALPHA (compacted once finished, as
# edgeml reproduce keeps its runs) and OUT_DIR/compare.md.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/results/adacomp/alpha-sweep}"
seed="${2:-1}"
python="${PYTHON:-python}"
mkdir -p "$out/runs"
config="$(mktemp -t edgeml-alpha-XXXXXX.toml)"
trap 'rm -f "$config"' EXIT
cat > "$config" <<TOML
[run]
backend = "sim"
seed = $seed
[data]
dataset = "fashion-mnist"
batch_size = 10
[model]
name = "adacomp-cnn"
[cluster]
workers = 200
base_step_s = 0.01
random_wait_s = 0.01
[stop]
max_steps = 20000
max_time = 100000
[eval]
interval = 0.05
test_samples = 2000
TOML

# method and the alphas tried here; alpha = 1 (ASGD, Comp-ASGD) and 0.1 (AdaComp) are the earlier choices,
# whose full-length runs diverged (see the differences in experiments/adacomp.toml)
for spec in "asgd 0.3 0.1" "comp_asgd 0.3 0.1" "adacomp 0.03 0.01"; do
  set -- $spec
  method=$1; shift
  extra=()
  [ "$method" != asgd ] && extra=(--set "$method.c=0.01")
  for lr in "$@"; do
    name="$method-$method.lr=$lr"
    if [ -f "$out/runs/$name/run.zip" ]; then echo "$name: kept"; continue; fi
    rm -rf "$out/runs/$name"
    "$python" -m edgeml run "$method" -c "$config" --set "$method.lr=$lr" "${extra[@]}" --out "$out/runs" \
      --name "$name" -q
  done
done
# keep what the comparison reads, as edgeml reproduce keeps its runs: one archive, run.zip (read as the folder
# is), without the series no figure or claim reads (edgeml.rundir.compact); a run compacts once
"$python" - "$out"/runs/*/ <<'PY'
import sys
from pathlib import Path

from edgeml.analysis.figures import compact_run

for run in sys.argv[1:]:
    compact_run(Path(run))
PY
"$python" -m edgeml compare "$out/runs" --target-accuracy 0.75 --baseline "asgd[asgd.lr=0.3]" --out "$out" > /dev/null
echo "$out/compare.md"
