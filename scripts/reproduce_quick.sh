#!/usr/bin/env bash
# Quick reproduction of every paper that has an experiment file, each claim's verdict checked against the
# committed results/<paper>/quick/verdicts.csv (--check); CI runs it so the claims stay honest.
# Usage: scripts/reproduce_quick.sh [OUT_DIR]   (default: a fresh temporary folder; $PYTHON picks the interpreter)
# Every experiment runs even when one fails (a failed run or reproduction is reported and ends the script
# with exit code 1 after the others); each prints its wall time, so CI's budget stays visible.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$(mktemp -d -t edgeml-quick-XXXXXX)}"
python="${PYTHON:-}"  # default: the repository's virtual environment, else python3 (with edgeml installed)
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
if ! "$python" -c 'import edgeml' 2>/dev/null; then
  echo "$python cannot import edgeml: install it (python3 -m venv .venv && .venv/bin/pip install -e .) or set PYTHON" >&2
  exit 2
fi
shopt -s nullglob
experiments=("$root"/experiments/*/experiment.toml)
if [ ${#experiments[@]} -eq 0 ]; then
  echo "no experiment folders in $root/experiments" >&2
  exit 1
fi

cd "$root"
failed=()
for file in "${experiments[@]}"; do
  paper="$(basename "$(dirname "$file")")"
  if "$python" -c 'import sys; from edgeml.config import tomllib; sys.exit(0 if tomllib.load(open(sys.argv[1], "rb")).get("experiment", {}).get("ci", True) else 1)' "$file"; then :; else
    echo "== $paper: skipped (ci = false in its [experiment])"
    continue
  fi
  # each verdict is checked against the committed quick report (exit 1 on a change); a paper without one runs unchecked
  check=()
  if [ -f "$root/results/$paper/quick/verdicts.csv" ]; then check=(--check); else echo "== $paper: no committed results/$paper/quick/verdicts.csv, verdicts unchecked"; fi
  echo "== $paper (quick) -> $out/$paper"
  start=$SECONDS
  "$python" -m edgeml reproduce "$paper" --quick --out "$out/$paper" "${check[@]}" || failed+=("$paper")
  echo "== $paper: $((SECONDS - start)) s"
done
echo "quick reproductions written to $out"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
