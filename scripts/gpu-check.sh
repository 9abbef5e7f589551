#!/usr/bin/env bash
# gpu-check.sh — everything the CUDA backend needs checked on a real GPU, in ONE run that fits a
# short device lease (written for an H200 with 15 minutes of device time, machine start included).
#
#   scripts/gpu-check.sh            # from the repository root; results in $OUT or ./gpu-check-out
#
# Steps (each under its own timeout, each logged; a failing step is recorded and the next runs):
#   1. configure + build with CUDA (Release, sm_90, no chapters, -j16): journey, test_cuda, cuda_bench
#   2. the CUDA tests (per-op NMSE vs the reference ops, whole-model CPU vs GPU)
#   3. `journey trace --device cuda:f32` and `--device cuda` (bf16) vs `--device cpu`, then
#      `journey-trace diff` (bf16 at 100x the tolerances), if `journey trace` has --device
#   4. random-weight bf16 models of real shapes (TinyLlama 1.1B; Llama 7B shape with fewer layers
#      unless FULL7B=1) written to local disk outside the repo, then decode/prefill benchmarks
#   5. summary.json / summary.txt: decode tok/s at batch 1 against the H200 bandwidth ceiling
#      (4.8 TB/s divided by the bytes of weights read per token)
# Environment: OUT (output dir), JOBS (16), MODELS_DIR (/tmp/journey-gpu-models), FULL7B (0),
#              BANDWIDTH_TB_S (4.8, the H200's HBM3e peak).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# Everything is written under WORK and packed into $OUT/gpu-check.tgz at the end (the device tool
# brings back at most 8 files from $OUT), with summary.txt and the log beside it.
OUT_FINAL=${OUT:-$ROOT/gpu-check-out}
OUT=${WORK:-/tmp/gpu-check-work}
rm -rf "$OUT"
JOBS=${JOBS:-16}
MODELS_DIR=${MODELS_DIR:-/tmp/journey-gpu-models}
FULL7B=${FULL7B:-0}
BANDWIDTH_TB_S=${BANDWIDTH_TB_S:-4.8}
BUILD=$ROOT/build-gpu
mkdir -p "$OUT" "$OUT_FINAL" "$MODELS_DIR"
pack_results() {
  tar czf "$OUT_FINAL/gpu-check.tgz" -C "$OUT" . 2>/dev/null
  cp "$OUT/summary.txt" "$OUT/gpu-check.log" "$OUT_FINAL/" 2>/dev/null || true
}
trap pack_results EXIT
STATUS="$OUT/steps.tsv"
: > "$STATUS"
START=$(date +%s)

log() { echo "[gpu-check $(($(date +%s) - START))s] $*" | tee -a "$OUT/gpu-check.log"; }

# step NAME TIMEOUT_S COMMAND...: runs with a timeout, output to $OUT/NAME.log, status to steps.tsv
step() {
  local name=$1 limit=$2
  shift 2
  log "step $name (timeout ${limit}s): $*"
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  printf '%s\t%s\t%ss\n' "$name" "$rc" "$dt" >> "$STATUS"
  if [ $rc -eq 0 ]; then log "  ok ($dt s)"; else log "  FAILED rc=$rc ($dt s), tail:"; tail -n 15 "$OUT/$name.log" | tee -a "$OUT/gpu-check.log"; fi
  pack_results  # after every step: a run killed at the device's time limit still brings back what it did
  return $rc
}

# ---- 0. the machine -----------------------------------------------------------------------------
{ nvidia-smi || true; nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv || true
  command -v nvcc || ls /usr/local/cuda/bin/nvcc || true; nproc; free -g; df -h /tmp; } > "$OUT/machine.txt" 2>&1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true

# ---- 1. build (or use what scripts/gpu-pack.sh built on a CPU machine) --------------------------
# cuBLAS comes from this machine: the CUDA toolkit's lib64 or the nvidia-cublas Python wheel.
CUBLAS=$( (ls /usr/local/cuda/lib64/libcublas.so.* /usr/local/cuda*/targets/x86_64-linux/lib/libcublas.so.* \
          /usr/lib/x86_64-linux-gnu/libcublas.so.* 2>/dev/null; \
          find / -xdev -name 'libcublas.so.1*' -path '*nvidia*' 2>/dev/null) | head -n 1)
export JOURNEY_CUDA_LIBS=${CUBLAS:+$(dirname "$CUBLAS")}
log "cuBLAS: ${CUBLAS:-not found}"
if [ -n "${PREBUILT:-}" ]; then
  BIN=$ROOT/$PREBUILT/bin
  JOURNEY=$BIN/journey; TEST_CUDA=$BIN/test_cuda; CUDA_BENCH=$BIN/cuda_bench; CH12=$BIN/ch12_cuda
  TEST_BACKENDS=$BIN/test_backends; TRACE_TOOL=$BIN/journey-trace
  for b in "$JOURNEY" "$TEST_CUDA"; do
    [ -x "$b" ] && { env LD_TRACE_LOADED_OBJECTS=1 "$b" 2>&1 | grep 'not found' || true; } >> "$OUT/machine.txt"
  done
  printf 'build\tprebuilt\t0s\n' >> "$STATUS"
else
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DJOURNEY_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 -DJOURNEY_NATIVE=OFF
  step build 420 cmake --build "$BUILD" -j"$JOBS" --target journey journey-trace test_cuda cuda_bench ch12_cuda
  JOURNEY=$BUILD/src/cli/journey
  TEST_CUDA=$BUILD/tests/cuda/test_cuda
  CUDA_BENCH=$BUILD/tests/cuda/cuda_bench
  CH12=$BUILD/chapters/ch12_cuda/ch12_cuda
  TEST_BACKENDS=$BUILD/tests/backends/test_backends
  TRACE_TOOL=$(find "$BUILD" -type f -name journey-trace -perm -u+x 2>/dev/null | head -n 1)
fi

# ---- 2. the CUDA tests ---------------------------------------------------------------------------
if [ -x "$TEST_CUDA" ]; then
  step test_cuda 150 "$TEST_CUDA" --reporters=console --duration=true
  # the bf16 first-divergence report and any failed check, for the summary
  grep -E "first differ|identical to f32|ERROR|FAILED|SKIPPED|test cases" "$OUT/test_cuda.log" > "$OUT/test_cuda.summary.txt" || true
else
  log "no test_cuda binary: build failed"
fi

# ---- 2b. the op test of every backend (tests/backends), ch12, a generation ------------------------
if [ -x "$TEST_BACKENDS" ] || [ -f "$TEST_BACKENDS" ]; then
  step test_backends 180 "$TEST_BACKENDS" --reporters=console --duration=true
fi
if [ -x "$CH12" ] || [ -f "$CH12" ]; then
  step ch12_cuda 120 "$CH12" data/stories260K
fi
step generate_cuda 60 "$JOURNEY" generate --model data/stories260K --device cuda --max-tokens 64 --temperature 0 "Once upon a time"
step generate_cpu 60 "$JOURNEY" generate --model data/stories260K --device cpu --max-tokens 64 --temperature 0 "Once upon a time"

# ---- 3. traces: CPU vs CUDA, stage by stage -------------------------------------------------------
TRACE_MODELS="data/stories260K tests/golden/models/tiny-llama tests/golden/models/tiny-qwen2 tests/golden/models/tiny-qwen3"
if [ -x "$JOURNEY" ] && "$JOURNEY" trace --help 2>&1 | grep -q -- '--device' && [ -n "$TRACE_TOOL" ]; then
  for m in $TRACE_MODELS; do
    name=$(basename "$m")
    # the tiny models ship no tokenizer; their 512-token vocabulary is sized for stories260K's
    TRACE_ARGS="--model $m --tokenizer data/stories260K --temperature 0"
    step "trace_cpu_$name" 60 "$JOURNEY" trace $TRACE_ARGS --device cpu \
      --out "$OUT/traces/$name-cpu" "Once upon a time"
    # f32 weights: must be SAME at the default tolerances; bf16: a rounded model, tolerances x100
    step "trace_cuda_f32_$name" 60 "$JOURNEY" trace $TRACE_ARGS --device cuda:f32 \
      --out "$OUT/traces/$name-cuda-f32" "Once upon a time"
    step "trace_diff_f32_$name" 60 "$TRACE_TOOL" diff "$OUT/traces/$name-cuda-f32" "$OUT/traces/$name-cpu"
    step "trace_cuda_bf16_$name" 60 "$JOURNEY" trace $TRACE_ARGS --device cuda \
      --out "$OUT/traces/$name-cuda-bf16" "Once upon a time"
    step "trace_diff_bf16_$name" 60 "$TRACE_TOOL" diff "$OUT/traces/$name-cuda-bf16" "$OUT/traces/$name-cpu" \
      --tolerance-scale 100
  done
else
  log "skipping traces: needs 'journey trace --device' and the journey-trace tool (not in this build)"
  printf 'traces\tskipped\t0s\n' >> "$STATUS"
fi

# ---- 4. benchmarks on real shapes ----------------------------------------------------------------
PY=""
for candidate in /usr/bin/python3 python3; do
  if command -v "$candidate" > /dev/null 2>&1 && "$candidate" -c "import numpy" > /dev/null 2>&1; then PY=$candidate; break; fi
done
bench() {  # bench NAME MODEL_DIR
  local name=$1 model=$2
  if [ -x "$JOURNEY" ] && "$JOURNEY" bench --help 2>&1 | grep -q -- '--device'; then
    step "bench_$name" 150 "$JOURNEY" bench --model "$model" --device cuda --prompt-tokens 128 --gen-tokens 64 --runs 3 --json
  fi
  # cuda_bench also reports decode with on-device sampling (ids only cross PCIe)
  step "cuda_bench_$name" 150 "$CUDA_BENCH" "$model" --dtype bf16 --prompt-tokens 128 --gen-tokens 64 --runs 3
  sed -n '/^{/,/^}/p' "$OUT/cuda_bench_$name.log" > "$OUT/bench_$name.json" 2>/dev/null || true
}
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -n "$PY" ] && [ -x "$CUDA_BENCH" ]; then
  step make_tinyllama 240 "$PY" tools/make_random_model.py --preset tinyllama-1.1b --dtype bf16 --out "$MODELS_DIR/tinyllama-1.1b-bf16" \
    && bench tinyllama-1.1b "$MODELS_DIR/tinyllama-1.1b-bf16"
  if [ "$FULL7B" = 1 ]; then LAYERS=""; SEVEN=llama-7b; else LAYERS="--layers 8"; SEVEN=llama-7b-8layers; fi
  [ "${SEVEN_B:-0}" = 1 ] && step make_7b 300 "$PY" tools/make_random_model.py --preset llama-7b $LAYERS --dtype bf16 --out "$MODELS_DIR/$SEVEN-bf16" \
    && bench "$SEVEN" "$MODELS_DIR/$SEVEN-bf16"
else
  log "skipping benchmarks: needs a python3 with numpy (found: '${PY}') and cuda_bench"
  printf 'bench\tskipped\t0s\n' >> "$STATUS"
fi

# ---- 5. summary ------------------------------------------------------------------------------------
SUMMARY_PY=$(command -v python3 || echo /usr/bin/python3)
"$SUMMARY_PY" - "$OUT" "$BANDWIDTH_TB_S" > "$OUT/summary.txt" 2>&1 <<'EOF'
import glob, json, os, sys
out, bw = sys.argv[1], float(sys.argv[2]) * 1e12
summary = {"bandwidth_ceiling_bytes_s": bw, "steps": [], "bench": {}}
with open(os.path.join(out, "steps.tsv")) as f:
    for line in f:
        name, rc, secs = line.rstrip("\n").split("\t")
        summary["steps"].append({"step": name, "rc": rc, "seconds": secs})
        print(f"{name:32s} rc={rc:8s} {secs}")
for path in sorted(glob.glob(os.path.join(out, "bench_*.json"))):
    try:
        with open(path) as f:
            j = json.load(f)
    except Exception as e:  # an empty file from a failed step
        print(f"{os.path.basename(path)}: unreadable ({e})")
        continue
    # bench reports f32 bytes per token (4 per weight); the device holds bf16 (2 per weight)
    bytes_bf16 = j["decode_bytes_per_token"] / 2
    ceiling = bw / bytes_bf16
    decode = j["decode_tok_s"]["median"]
    device_sampling = j.get("decode_device_sampling_tok_s")
    row = {"model": j["model"], "device": j.get("device"), "weight_bytes_per_token": bytes_bf16,
           "decode_tok_s": decode, "decode_ceiling_tok_s": ceiling, "decode_fraction_of_ceiling": decode / ceiling,
           "decode_device_sampling_tok_s": device_sampling,
           "prefill_tok_s": j["prefill_tok_s"]["median"]}
    if device_sampling:
        row["decode_device_sampling_fraction_of_ceiling"] = device_sampling / ceiling
    summary["bench"][os.path.basename(path)[6:-5]] = row
    print(f"{row['model']}: decode {decode:.1f} tok/s (device sampling {device_sampling or 0:.1f}), ceiling "
          f"{ceiling:.1f} tok/s at {bw / 1e12:.1f} TB/s over {bytes_bf16 / 1e9:.2f} GB/token -> "
          f"{100 * decode / ceiling:.1f}%; prefill {row['prefill_tok_s']:.0f} tok/s")
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
EOF
cat "$OUT/summary.txt"
log "done in $(($(date +%s) - START)) s; results in $OUT"
