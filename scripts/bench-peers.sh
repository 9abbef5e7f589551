#!/usr/bin/env bash
# journey and llama.cpp side by side, in one run, on the same GGUF files.
#
#   scripts/bench-peers.sh [--journey build/src/cli/journey] [--threads 2] [--prompt-tokens 128]
#                          [--gen-tokens 32] [--runs 3] [--rows f32,bf16,f16,q8_0,q4_0,q4_k_m,smollm2]
#
# 1. builds llama-cpp-python from PyPI (it compiles llama.cpp from source, `nice`, -j2; the wheel
#    is cached in build-peers/wheels, installed into build-peers/site, both git-ignored), pinned below;
# 2. makes the TinyLlama-1.1B shape with random weights (tools/make_random_model.py, f32), converts
#    it to GGUF F32 with llama.cpp's own convert_hf_to_gguf.py (from the same sdist) and quantizes
#    that to BF16 / F16 / Q8_0 / Q4_0 / Q4_K_M with llama.cpp's llama_model_quantize, cached in
#    build-peers/models; SmolLM2-135M-Instruct Q4_1 comes from models/ (tools/python/fetch-models.sh);
# 3. per row, alternating engine by engine and run by run: prefill and decode tok/s of
#    `journey bench` and of llama.cpp (llama_decode timed the same way), one table with the ratio
#    journey / llama.cpp; a row journey cannot load says "unsupported" and why; then each run's
#    decode over the read bandwidth probed right after it (journey bench's probe; after llama.cpp's
#    run `journey bench --bandwidth-only`), a second table, since the memory's speed drifts 2x;
# 4. on SmolLM2: greedy tokens and logits of the two engines, 64 steps (tools/python/bench_peers.py).
#
# Prints the table on stdout (docs/performance.md carries a run of it). Needs the project's Python
# environment (tools/python/make-venv.sh). Takes ~30 min the first time (the llama.cpp build and
# the 4.4 GB model), then a few minutes per row.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
LLAMA_CPP_PYTHON=0.3.36
peers="$repo/build-peers"
python="$repo/.venv/bin/python"
[ -x "$python" ] || { echo "bench-peers: the Python environment is missing; run tools/python/make-venv.sh" >&2; exit 1; }

# 1. llama-cpp-python, built once.
wheel_dir="$peers/wheels"
site="$peers/site"
if [ ! -f "$site/.llama-cpp-python-$LLAMA_CPP_PYTHON" ]; then
  mkdir -p "$wheel_dir" "$peers/sdist"
  if ! ls "$wheel_dir"/llama_cpp_python-"$LLAMA_CPP_PYTHON"-*.whl >/dev/null 2>&1; then
    echo "bench-peers: building llama-cpp-python $LLAMA_CPP_PYTHON (compiles llama.cpp; 10-20 min on 2 cores)" >&2
    start=$(date +%s)
    CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 "$python" -m pip wheel --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON" --wheel-dir "$wheel_dir" >"$peers/build.log" 2>&1 || {
        tail -30 "$peers/build.log" >&2; echo "bench-peers: the llama-cpp-python build failed ($peers/build.log)" >&2; exit 1; }
    echo "bench-peers: built in $(( $(date +%s) - start )) s" >&2
  fi
  rm -rf "$site"
  "$python" -m pip install --quiet --no-deps --target "$site" "$wheel_dir"/llama_cpp_python-"$LLAMA_CPP_PYTHON"-*.whl \
    "diskcache==5.6.3" "sentencepiece==0.2.0" "protobuf==4.25.3"  # llama_cpp needs diskcache; the converter the others
  touch "$site/.llama-cpp-python-$LLAMA_CPP_PYTHON"
fi
# llama.cpp's converter, from the same source distribution as the engine.
sdist="$peers/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON"
if [ ! -f "$sdist/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
  # (--no-binary for this package only: ":all:" also compiled its build requirements from source, for
  # many minutes on 2 cores, where their wheels do)
  "$python" -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$peers/sdist"
  tar -xzf "$peers/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$peers/sdist"
fi

exec env PYTHONPATH="$site" LLAMA_CPP_SOURCE="$sdist/vendor/llama.cpp" "$python" "$repo/tools/python/bench_peers.py" "$@"
