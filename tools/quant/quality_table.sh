#!/usr/bin/env bash
# Regenerates the quality tables of docs/quantization.md: for every weight type, perplexity over the
# shipped text (data/texts/tinystories-original.txt), the mean and 99th-percentile KL divergence from the
# F32 model, top-1 agreement, file size and bits per weight — on the real trained model
# tinystories-tok105 (llama.cpp's GGUF files of it and journey's), on the shipped stories260K, and on kq,
# the random-weight model whose 256-wide rows take the K types.
#
#   tools/quant/quality_table.sh JOURNEY SHARED_MODELS OUT_DIR > table.md
#   e.g. tools/quant/quality_table.sh build/src/cli/journey ../shared/data/models /tmp/quality
#
# Every measurement is `journey perplexity --device reference` (the literal f32 path: each file's weights
# exactly as stored, widened to f32) against the F32 model's log-probabilities saved once with
# --save-logprobs. Missing types are made with `journey quantize`; AWQ checkpoints with `journey trace`
# (calibration: data/texts/calibration-original.txt, other stories than the evaluation text) and
# `journey quantize --type awq`. The JSON of every run is kept in OUT_DIR.
set -euo pipefail
J=$(realpath "$1")
S=$(realpath "$2")
OUT=$(realpath -m "$3")
TEXT=data/texts/tinystories-original.txt
CALIBRATION=data/texts/calibration-original.txt
PY=/usr/bin/python3
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."

# the calibration text in pieces of at most $1 characters, cut after sentences (one per line)
calibration_pieces() {
  $PY - "$1" "$CALIBRATION" <<'EOF'
import re, sys
limit, text = int(sys.argv[1]), open(sys.argv[2]).read().replace("\n", " ")
pieces, cur = [], ""
for s in (m.strip() for m in re.findall(r'[^.!?]+[.!?]+"?', text)):
    if cur and len(cur) + 1 + len(s) > limit:
        pieces.append(cur)
        cur = s
    else:
        cur = (cur + " " + s).strip()
print("\n".join(pieces + [cur]))
EOF
}

# record_calibration MODEL_DIR OUT_PREFIX PIECE_CHARS: one trace per piece; prints the dump directories
record_calibration() {
  local i=0
  while IFS= read -r piece; do
    "$J" trace --model "$1" "$piece" --out "$2-$i" --max-tokens 1 --temperature 0 --device reference \
      --stages attn_norm,attn_context,ffn_norm,act > /dev/null 2>&1
    echo "$2-$i"
    i=$((i + 1))
  done < <(calibration_pieces "$3")
}

# measure NAME MODEL BASE_LOGPROBS CTX: one JSON line with the perplexity run and the file's facts
measure() {
  local json="$OUT/$1.json"
  "$J" perplexity --model "$2" --file "$TEXT" --ctx "$4" --kl-base "$3" --device reference --json 2> "$OUT/$1.log" > "$json"
  $PY - "$json" "$($PY tools/quant/model_facts.py "$2")" "$1" <<'EOF'
import json, sys
r, f = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
r.update(f, name=sys.argv[3])
json.dump(r, open(sys.argv[1], "w"), indent=1)
EOF
}

# table BASE_NAME NAMES...: the markdown table of measured rows
table() {
  local base=$1
  shift
  $PY - "$OUT" "$base" "$@" <<'EOF'
import json, sys
out, base_name, names = sys.argv[1], sys.argv[2], sys.argv[3:]
base = json.load(open(f"{out}/{base_name}.json"))
print(f"| type | what the file holds | size (KiB) | bits/weight | PPL | ΔPPL | mean KL | 99% KL | top-1 |")
print("|---|---|---|---|---|---|---|---|---|")
for name in names:
    r = json.load(open(f"{out}/{name}.json"))
    dppl = r["ppl"] - base["ppl"]
    print(f"| {name.split('-', 1)[1]} | {r['holds']} | {r['file_bytes'] / 1024:.0f} | {r['bits_per_weight']:.2f} | "
          f"{r['ppl']:.4f} | {dppl:+.4f} | {r['mean_kl']:.5f} | {r['kl_p99']:.4f} | {100 * r['top1_agreement']:.2f} % |")
r = base
print(f"\n{r['tokens']} tokens, context {r['context']}: {r['windows']} windows, {r['tokens_scored']} tokens scored; "
      f"F32 PPL {r['ppl']:.4f} ± {r['ppl_error']:.4f}.")
EOF
}

# ---- tinystories-tok105 -------------------------------------------------------------------------------
T105=$S/quantized/t105-f32.gguf
CTX=128  # the context its GGUF conversion declares (llama-convert-llama2c-to-ggml's default)
"$J" perplexity --model "$T105" --file "$TEXT" --ctx $CTX --device reference --save-logprobs "$OUT/t105-f32.logprobs" > /dev/null 2>&1
names=()
measure t105-F32 "$T105" "$OUT/t105-f32.logprobs" $CTX; names+=(t105-F32)
for type in bf16 f16; do
  [ -f "$OUT/t105-$type.gguf" ] || "$J" quantize "$T105" --type $type --out "$OUT/t105-$type.gguf" > /dev/null
  measure "t105-${type^^}" "$OUT/t105-$type.gguf" "$OUT/t105-f32.logprobs" $CTX; names+=("t105-${type^^}")
done
for type in q8_0 q4_0 q4_1 q5_0 q5_1; do  # llama.cpp's own files (journey writes them byte for byte)
  measure "t105-${type^^}" "$S/quantized/t105-$type.gguf" "$OUT/t105-f32.logprobs" $CTX; names+=("t105-${type^^}")
done
for type in q2_k q3_k_m q4_k_m q5_k_m q6_k; do  # rows of 128: every K tensor falls back (docs/quantization.md)
  [ -f "$OUT/t105-$type.gguf" ] || "$J" quantize "$T105" --type $type --out "$OUT/t105-$type.gguf" > "$OUT/t105-$type.quantize.txt"
  measure "t105-${type^^}" "$OUT/t105-$type.gguf" "$OUT/t105-f32.logprobs" $CTX; names+=("t105-${type^^}")
done
# AWQ starts from the Hugging Face form of the same checkpoint (model5000.bin)
if [ ! -d "$OUT/t105-hf" ]; then
  "$J" convert llama2c "$S/tinystories-tok105/model5000.bin" --tokenizer "$S/tinystories-tok105/tok105.model" --out "$OUT/t105-hf" > /dev/null
fi
rm -rf "$OUT"/t105-calib-*
mapfile -t calib < <(record_calibration "$OUT/t105-hf" "$OUT/t105-calib" 200)
for group in 128 32; do
  for mode in AWQ RTN; do
    dir="$OUT/t105-$mode-INT4-g$group"
    rm -rf "$dir"
    "$J" quantize "$OUT/t105-hf" --type awq --group-size $group --calibration "${calib[@]}" --out "$dir" \
      $([ $mode = RTN ] && echo --rtn) > "$dir.quantize.txt"
    measure "t105-$mode-INT4-g$group" "$dir" "$OUT/t105-f32.logprobs" $CTX; names+=("t105-$mode-INT4-g$group")
  done
done
echo "### tinystories-tok105"
echo
table t105-F32 "${names[@]}"
echo

# ---- stories260K --------------------------------------------------------------------------------------
S260=data/stories260K
CTX=512
"$J" perplexity --model $S260 --file "$TEXT" --ctx $CTX --device reference --save-logprobs "$OUT/s260-f32.logprobs" > /dev/null 2>&1
names=()
measure s260-F32 $S260 "$OUT/s260-f32.logprobs" $CTX; names+=(s260-F32)
for type in bf16 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_m q4_k_m q5_k_m q6_k; do
  [ -f "$OUT/s260-$type.gguf" ] || "$J" quantize $S260 --type $type --out "$OUT/s260-$type.gguf" > "$OUT/s260-$type.quantize.txt"
  measure "s260-${type^^}" "$OUT/s260-$type.gguf" "$OUT/s260-f32.logprobs" $CTX; names+=("s260-${type^^}")
done
rm -rf "$OUT"/s260-calib-*
mapfile -t calib < <(record_calibration $S260 "$OUT/s260-calib" 400)
for mode in AWQ RTN; do  # 64-wide rows: group 64, attention only (172 FFN rows cannot be packed)
  dir="$OUT/s260-$mode-INT4-g64"
  rm -rf "$dir"
  "$J" quantize $S260 --type awq --group-size 64 --calibration "${calib[@]}" --out "$dir" $([ $mode = RTN ] && echo --rtn) > "$dir.quantize.txt"
  measure "s260-$mode-INT4-g64" "$dir" "$OUT/s260-f32.logprobs" $CTX; names+=("s260-$mode-INT4-g64")
done
echo "### stories260K"
echo
table s260-F32 "${names[@]}"
echo

# ---- kq: random weights, K-friendly shapes (llama.cpp's files) ---------------------------------------------
KQ=$S/quantized/kq-f32.gguf
CTX=128
"$J" perplexity --model "$KQ" --file "$TEXT" --ctx $CTX --device reference --save-logprobs "$OUT/kq-f32.logprobs" > /dev/null 2>&1
names=()
measure kq-F32 "$KQ" "$OUT/kq-f32.logprobs" $CTX; names+=(kq-F32)
for type in q8_0 q6_k q5_k_m q5_k q5_1 q5_0 q4_k_m q4_k q4_1 q4_0 q3_k_m q3_k q2_k; do
  measure "kq-${type^^}" "$S/quantized/kq-$type.gguf" "$OUT/kq-f32.logprobs" $CTX; names+=("kq-${type^^}")
done
echo "### kq (random weights, 256-wide rows)"
echo
table kq-F32 "${names[@]}"
