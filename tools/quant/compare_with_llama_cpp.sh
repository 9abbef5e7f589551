#!/usr/bin/env bash
# Quantizes llama.cpp's f32 GGUF files in the shared data set with `journey quantize` exactly as
# llama-quantize made the shared quantized files (kq-*: --pure for single types; t105-* and the _M
# mixes: default rules) and compares whole files by sha256. Prints one line per file.
#   tools/quant/compare_with_llama_cpp.sh [JOURNEY_BINARY] [SHARED_QUANTIZED_DIR]
set -euo pipefail
journey=${1:-build/src/cli/journey}
shared=${2:-../shared/data/models/quantized}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
same=0 differ=0
check() {  # MODEL TYPE [--pure]
  "$journey" quantize "$shared/$1-f32.gguf" --type "$2" ${3:-} --out "$out/$1-$2.gguf" > /dev/null
  local ours theirs
  ours=$(sha256sum < "$out/$1-$2.gguf" | cut -d' ' -f1)
  theirs=$(sha256sum < "$shared/$1-$2.gguf" | cut -d' ' -f1)
  if [[ $ours == "$theirs" ]]; then same=$((same + 1)); echo "identical  $1-$2.gguf  ${ours:0:16}";
  else differ=$((differ + 1)); echo "DIFFERENT  $1-$2.gguf  journey ${ours:0:16}  llama.cpp ${theirs:0:16}"; fi
}
for t in q8_0 q4_0 q4_1 q5_0 q5_1; do check t105 "$t"; done
for t in q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k; do check kq "$t" --pure; done
for t in q3_k_m q4_k_m q5_k_m; do check kq "$t"; done
echo "$same identical, $differ different"
[[ $differ == 0 ]]
