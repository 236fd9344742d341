#!/usr/bin/env bash
# What only a CUDA machine can check: the procs backend with --device cuda, a CPU/GPU worker mix (ESync's testbed
# of 4 GPU and 2 CPU devices), and the tests that need CUDA. Writes one run folder per run and gpu_runs.csv.
# Usage: scripts/gpu_check.sh OUT_DIR [SECONDS]   ($PYTHON picks the interpreter; SECONDS per run, default 30;
# $ONLY, a bash regex, keeps the runs whose label matches, e.g. ONLY=testbed)
# Needs Fashion-MNIST's IDX files where edgeml finds them ($EDGEML_DATA, or the dataset-fashion-mnist package).
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR [SECONDS]}
SECS=${2:-30}
PY=${PYTHON:-python3}
mkdir -p "$OUT/runs"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 1
status=0
run() {  # label, then edgeml run arguments
  local label=$1; shift
  [[ -n ${ONLY:-} && ! $label =~ $ONLY ]] && return
  local t0=$SECONDS
  if "$PY" -m edgeml run "$@" --dataset fashion-mnist --max-time "$SECS" --out "$OUT/runs/$label" > "$OUT/runs/$label.log" 2>&1
  then echo "$label: ok in $((SECONDS - t0)) s: $(tail -2 "$OUT/runs/$label.log" | head -1)"
  else echo "$label: FAILED (exit $?), see $OUT/runs/$label.log"; tail -5 "$OUT/runs/$label.log"; status=1
  fi
}
# Raw speed of one device kind: no throttling, so steps/s is what the device gives under 4 co-running workers.
run bsp-cpu bsp --workers 4 --device cpu --set cluster.throttle=false
run bsp-cuda bsp --workers 4 --device cuda --set cluster.throttle=false
run asp-cpu asp --workers 4 --device cpu --set cluster.throttle=false
run asp-cuda asp --workers 4 --device cuda --set cluster.throttle=false
# A mix: two CPU and two CUDA workers, each kind calibrated on its own device, step times scaled.
run asp-mix asp --workers 4 --set "cluster.devices={cpu='0-1', cuda='2-3'}" --set cluster.throttle_mode=scale
# ESync's testbed (ESync Sec. 5): 4 GPU devices and 2 CPU devices, no emulated factors: the devices differ.
run esync-testbed esync --workers 6 --set "cluster.devices={cuda='0-3', cpu='4-5'}" --set cluster.throttle=false
run ssgd-testbed ssgd --workers 6 --set "cluster.devices={cuda='0-3', cpu='4-5'}" --set cluster.throttle=false
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
import pandas as pd
rows = []
for summary in sorted(Path(sys.argv[1], "runs").glob("*/*/summary.json")):
    s, m = json.loads(summary.read_text()), json.loads((summary.parent / "meta.json").read_text())
    nodes = pd.read_csv(summary.parent / "nodes.csv")
    workers = nodes[nodes.role == "worker"].copy()
    workers["device"] = [m["nodes"][str(r)]["device"] for r in workers["rank"]]
    per_kind = workers.groupby("device").steps.sum() / s["duration_s"]
    rows.append({"run": summary.parent.parent.name, "status": s["status"], "duration_s": round(s["duration_s"], 1),
                 "steps": s["total_steps"], "steps_per_s": round(s["total_steps"] / s["duration_s"], 1),
                 **{f"steps_per_s_{k}": round(v, 1) for k, v in per_kind.items()},
                 **{f"step_ms_{k}": round(1000 * v, 3) for k, v in m["calibration"].get("measured_by_device", {}).items()},
                 "final_accuracy": round(s["final_accuracy"], 4), "compute_fraction": round(s["compute_fraction"], 3)})
table = pd.DataFrame(rows)
table.to_csv(Path(sys.argv[1], "gpu_runs.csv"), index=False)
print(table.to_string(index=False))
EOF
exit $status
