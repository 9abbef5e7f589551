#!/usr/bin/env bash
# Run one libFuzzer target for SECONDS at the lowest priority (nice -n 19):
#   fuzz/run.sh TARGET SECONDS [BUILD_DIR (default build-fuzz)]
# The corpus it grows lives in BUILD_DIR/fuzz-work/TARGET/corpus (outside the repository; the seed
# corpus fuzz/corpus/TARGET and the regression inputs fuzz/crashes/TARGET are read, never written).
# A finding is written to BUILD_DIR/fuzz-work/TARGET/artifacts/. The log ends with libFuzzer's
# final stats (stat::number_of_executed_units ...), which docs/reliability.md records.
set -euo pipefail
target="$1"; seconds="$2"; build="${3:-build-fuzz}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$build/fuzz-work/$target"
mkdir -p "$work/corpus" "$work/artifacts"
dirs=("$work/corpus" "$root/fuzz/corpus/$target")
[ -d "$root/fuzz/crashes/$target" ] && dirs+=("$root/fuzz/crashes/$target")
options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/")
[ -f "$root/fuzz/dicts/$target.dict" ] && options+=(-dict="$root/fuzz/dicts/$target.dict")
echo "$(date -u +%FT%TZ) fuzz_$target for $seconds s" >>"$work/log.txt"
ASAN_OPTIONS=detect_leaks=1 nice -n 19 "$build/fuzz/fuzz_$target" "${options[@]}" "${dirs[@]}" >>"$work/log.txt" 2>&1
