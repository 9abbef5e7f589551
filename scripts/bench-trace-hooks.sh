#!/usr/bin/env bash
# Measures what the trace hooks cost when no sink is attached: `journey bench` decode tok/s of the
# normal build (hooks compiled in, no sink) against the `no-trace` preset (JOURNEY_TRACE_HOOKS=OFF,
# hooks compiled to nothing), alternating the two binaries ROUNDS times so that machine noise hits
# both alike. Prints each pair and the ratio of the medians. Usage:
#   scripts/bench-trace-hooks.sh [MODEL_DIR] [ROUNDS] [GEN_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-data/stories260K}
rounds=${2:-7}
gen=${3:-256}
cmake --preset release >/dev/null && cmake --build build -j"$(nproc)" --target journey >/dev/null
cmake --preset no-trace >/dev/null && cmake --build build-notrace -j"$(nproc)" --target journey >/dev/null
decode() {  # binary -> decode tok/s (median of its own runs)
  "$1" bench --model "$model" --prompt-tokens 32 --gen-tokens "$gen" --runs 3 --threads 1 --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"]["median"])'
}
on=(); off=()
for ((i = 0; i < rounds; ++i)); do
  a=$(decode build/src/cli/journey); b=$(decode build-notrace/src/cli/journey)
  on+=("$a"); off+=("$b")
  echo "round $i: hooks on $a tok/s, hooks off $b tok/s"
done
/usr/bin/python3 - "${on[*]}" "${off[*]}" <<'PY'
import statistics, sys
on = [float(x) for x in sys.argv[1].split()]; off = [float(x) for x in sys.argv[2].split()]
m_on, m_off = statistics.median(on), statistics.median(off)
print(f"median decode: hooks on {m_on:.1f} tok/s, hooks off {m_off:.1f} tok/s, "
      f"difference {100 * (m_off - m_on) / m_off:+.2f}% (positive = hooks cost)")
PY
