#!/usr/bin/env bash
# ctest driver (tests/reliability): run fuzz target TARGET from BIN_DIR over its seed corpus and
# every past crash input, then RUNS mutations; fails on any crash, leak, timeout or finding.
#   fuzz/smoke.sh BIN_DIR TARGET RUNS
set -euo pipefail
bin="$1"; target="$2"; runs="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -x "$bin/fuzz_$target" ] || { echo "fuzz_$target was not built in $bin"; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
dirs=("$scratch" "$root/fuzz/corpus/$target")
[ -d "$root/fuzz/crashes/$target" ] && dirs+=("$root/fuzz/crashes/$target")
options=(-runs="$runs" -seed=1 -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$scratch/")
[ -f "$root/fuzz/dicts/$target.dict" ] && options+=(-dict="$root/fuzz/dicts/$target.dict")
"$bin/fuzz_$target" "${options[@]}" "${dirs[@]}" 2>&1 | tail -n 25
