#!/bin/sh
# Regenerate every golden dump under tests/golden/ (and the tiny random models they run on)
# with the two independent references: the hand-written PyTorch one (tools/trace/reference.py,
# Debian's /usr/bin/python3 with numpy, torch and sentencepiece) and transformers' own modeling
# code (tools/trace/hf_reference.py, in the project's Python environment: tools/python/make-venv.sh)
# into tests/golden/transformers/. Then checks that the two agree. Run from anywhere. Commit the
# result together with the change that required it, and say in the commit why the goldens changed.
#
#   tools/trace/regenerate_goldens.sh
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
PROMPT_IDS=1,403,407,261,378   # "Once upon a time" with BOS, in the stories260K vocabulary
DECODE_STEPS=3

# Tiny random-weight models, one per architecture feature: GQA + untied head (llama),
# q/k/v biases + tied head (qwen2), per-head q/k RMSNorm + explicit head_dim (qwen3).
for preset in tiny-llama tiny-qwen2 tiny-qwen3; do
  rm -rf "tests/golden/models/$preset"
  $PY tools/make_random_model.py --preset "$preset" --seed 0 --out "tests/golden/models/$preset"
  $PY tools/trace/reference.py --model "tests/golden/models/$preset" --tokens "$PROMPT_IDS" \
      --decode-steps "$DECODE_STEPS" --out "tests/golden/$preset"
  tools/python/venv-python tools/trace/hf_reference.py --model "tests/golden/models/$preset" --tokens "$PROMPT_IDS" \
      --decode-steps "$DECODE_STEPS" --out "tests/golden/transformers/$preset"
done
$PY tests/golden/check_hf_goldens.py

# The real model that ships in data/: tokenized from text, so the tokenizer is checked too.
$PY tools/trace/reference.py --model data/stories260K --prompt "Once upon a time" \
    --decode-steps "$DECODE_STEPS" --out tests/golden/stories260K

du -sh tests/golden
