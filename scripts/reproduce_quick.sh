#!/usr/bin/env bash
# Quick reproduction of every paper that has an experiment file; CI runs it so the claims stay honest.
# Usage: scripts/reproduce_quick.sh [OUT_DIR]   (default: a fresh temporary folder; $PYTHON picks the interpreter)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$(mktemp -d -t edgeml-quick-XXXXXX)}"
python="${PYTHON:-python}"
shopt -s nullglob
experiments=("$root"/experiments/*.toml)
if [ ${#experiments[@]} -eq 0 ]; then
  echo "no experiment files in $root/experiments" >&2
  exit 1
fi

cd "$root"
for file in "${experiments[@]}"; do
  paper="$(basename "$file" .toml)"
  if "$python" -c 'import sys; from edgeml.config import tomllib; sys.exit(0 if tomllib.load(open(sys.argv[1], "rb")).get("experiment", {}).get("ci", True) else 1)' "$file"; then :; else
    echo "== $paper: skipped (ci = false in its [experiment])"
    continue
  fi
  echo "== $paper (quick) -> $out/$paper"
  "$python" -m edgeml reproduce "$paper" --quick --out "$out/$paper"
done
echo "quick reproductions written to $out"
