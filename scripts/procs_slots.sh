#!/usr/bin/env bash
# One procs run's seeds side by side on a many-core host, each seed in its own slot of consecutive cores
# (taskset), so that co-running load pinned per platform (load.cores) stays inside its own run's cores.
# Each slot is an `edgeml reproduce EXPERIMENT --only RUN --seeds S`; its run directory is packed into
# OUT/RUN-sS.tar.gz (unpack into results/<paper>/ to add it to a reproduction, then `edgeml reproduce <paper>
# --resume --out results/<paper>` renders the report with it).
# Usage: scripts/procs_slots.sh EXPERIMENT RUN SEEDS CORES_PER_SLOT OUT   (SEEDS comma-separated, e.g. 0,1,2,3,4)
# $PYTHON picks the interpreter. Needs SEEDS x CORES_PER_SLOT cores; a slot's cores are its run's platforms'
# (one each at load.cores = 1) and the run's monitor shares them.
set -u
EXP=${1:?usage: scripts/procs_slots.sh EXPERIMENT RUN SEEDS CORES_PER_SLOT OUT}
RUN=${2:?run name}
SEEDS=${3:?seeds}
CORES=${4:?cores per slot}
OUT=${5:?output folder}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
have=$(nproc)
IFS=, read -r -a seeds <<< "$SEEDS"
if (( ${#seeds[@]} * CORES > have )); then
  echo "procs_slots: ${#seeds[@]} seeds x $CORES cores need $(( ${#seeds[@]} * CORES )) cores, this host has $have; use fewer seeds per call" >&2
  exit 2
fi
pids=()
for i in "${!seeds[@]}"; do
  s=${seeds[$i]}
  first=$(( i * CORES )); last=$(( first + CORES - 1 ))
  taskset -c "$first-$last" "$PY" -m edgeml reproduce "$EXP" --only "$RUN" --seeds "$s" --jobs "$CORES" \
    --out "$OUT/slot-$s" > "$OUT/slot-$s.log" 2>&1 &
  pids+=($!)
  echo "seed $s on cores $first-$last (pid $!)"
done
status=0
for i in "${!pids[@]}"; do
  s=${seeds[$i]}
  if wait "${pids[$i]}"; then echo "seed $s: finished"; else echo "seed $s: FAILED, see $OUT/slot-$s.log"; tail -5 "$OUT/slot-$s.log"; status=1; fi
  if [[ -d $OUT/slot-$s/runs ]]; then tar -czf "$OUT/$RUN-s$s.tar.gz" -C "$OUT/slot-$s" runs; fi
done
exit $status
