#!/usr/bin/env bash
# Makes the Python environment that journey's independent references and client tests run in:
# transformers' modeling code, the Rust `tokenizers`, llama.cpp's `gguf` package, jinja2 and the
# official `openai` client, at the versions pinned in tools/python/requirements.txt.
#
#   tools/python/make-venv.sh            # creates or reuses it; prints where it is
#
# Where it lives: $JOURNEY_CACHE/venv-<hash of requirements.txt> (JOURNEY_CACHE defaults to
# ~/.cache/journey), outside the checkout, so that a fresh clone (CI) on the same machine reuses
# it instead of downloading torch again; the checkout's git-ignored `.venv` is a link to it, and
# tools/python/venv-python runs it. Changing requirements.txt changes the hash: a new environment.
#
# Why PyPI's torch and not Debian's python3-torch (1.13): transformers has Qwen3 only from 4.51,
# and 4.51 imports torch.distributed.tensor, which torch 1.13 lacks (measured: ModuleNotFoundError
# when loading any model). PyPI has no CPU-only Linux wheel of torch; its wheel imports only with
# its CUDA runtime wheels beside it (~2.7 GB, never used here). Measured on the 2-core machine:
# about 2 minutes and 4.5 GB the first time, nothing afterwards.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
lock="$here/requirements.txt"
cache="${JOURNEY_CACHE:-$HOME/.cache/journey}"
venv="$cache/venv-$(sha256sum "$lock" | cut -c1-16)"

if [ ! -f "$venv/.complete" ]; then
  echo "make-venv: building $venv from $lock (first time: ~3 GB of wheels, a few minutes)"
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$cache"
  /usr/bin/python3 -m venv "$venv"
  # --no-deps: requirements.txt is the complete environment, so pip resolves nothing by itself.
  "$venv/bin/python" -m pip install --no-input --quiet --no-deps --requirement "$lock"
  "$venv/bin/python" -c 'import torch, transformers, tokenizers, gguf, jinja2, numpy, openai, jsonschema' || {
    echo "make-venv: $venv does not import its packages; see the errors above" >&2; exit 1; }
  echo "built $(date -u +%FT%TZ) in $(( $(date +%s) - start )) s from $lock" > "$venv/.complete"
  echo "make-venv: done in $(( $(date +%s) - start )) s"
fi
ln -sfn "$venv" "$repo/.venv"
echo "make-venv: $repo/.venv -> $venv ($(cat "$venv/.complete"))"
