#!/usr/bin/env bash
# gpu-check.sh — everything the CUDA backend needs checked on a real GPU, in ONE run that fits a
# short device lease (an H200, 15 minutes of device time for a whole session: this script should
# take under 6 minutes, machine start not included).
#
#   bash scripts/gpu-pack.sh                     # on a CPU machine with nvcc: build and pack
#   PREBUILT=gpu-pack bash scripts/gpu-check.sh  # on the GPU machine; results in $OUT
#   SKIP_BENCH=1 PREBUILT=gpu-pack OUT=/tmp/x bash scripts/gpu-check.sh   # dry run (no GPU needed)
#
# Steps (each under its own timeout, each logged to NAME.log; a failing step is recorded in
# steps.tsv and the next one runs; everything is packed into $OUT/gpu-check.tgz after every step):
#   1. build with CUDA (or PREBUILT: the packed binaries)
#   2. test_cuda (every op and the whole model vs the CPU, every decode road), test_backends if built
#   2b. tensor parallelism: tp_cuda_exactness under `mpirun -np 2` (the CUDA shard against the
#      single-process CUDA run on every decode road; on a one-GPU machine both ranks share it, so the
#      collectives are host-staged: NCCL refuses two ranks on one GPU), and `journey generate
#      --device cuda --tensor-parallel 2` against the single-process text (needs mpirun there)
#   3. chapter 12, a generation on each device
#   4. `journey trace` on reference, cuda:f32 and cuda (bf16), then `journey-trace diff`: f32 at the f32
#      tolerances, bf16 at the bf16 profile; stories260K, the tiny goldens, SmolLM2 if models/ has it
#   5. a random-weight model of the TinyLlama-1.1B shape (bf16), cuda_bench on every decode road and
#      with 16 streams; the quantized types the GPU runs natively, made by `journey quantize`
#   6. summary.txt / summary.json: one row per benchmark — decode tok/s, % of the bandwidth
#      ceiling for the bytes that run's weights take per token, prefill tok/s, 16-stream tok/s
# Environment: OUT (results), PREBUILT, JOBS (16), MODELS_DIR (/tmp/journey-gpu-models),
#              BANDWIDTH_TB_S (4.8, the H200's HBM3e peak), SKIP_BENCH (1: steps 1-4 and the summary),
#              QUANT_TYPES ("q8_0 q4_0 q4_1 q4_k_m": tried when `journey quantize` exists).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# Everything is written under WORK and packed into $OUT/gpu-check.tgz (the device tool brings back
# at most 8 files from $OUT), with summary.txt and the log beside it.
OUT_FINAL=${OUT:-$ROOT/gpu-check-out}
OUT=${WORK:-/tmp/gpu-check-work}
rm -rf "$OUT"
JOBS=${JOBS:-16}
MODELS_DIR=${MODELS_DIR:-/tmp/journey-gpu-models}
BANDWIDTH_TB_S=${BANDWIDTH_TB_S:-4.8}
QUANT_TYPES=${QUANT_TYPES:-"q8_0 q4_0 q4_1 q4_k_m"}
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
skip() { log "SKIPPED $1: $2"; printf '%s\tskipped\t0s\t%s\n' "$1" "$2" >> "$STATUS"; }

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
runnable() { [ -n "$1" ] && { [ -x "$1" ] || [ -f "$1" ]; }; }

# ---- 0. the machine -----------------------------------------------------------------------------
{ nvidia-smi || true; nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv || true
  command -v nvcc || ls /usr/local/cuda/bin/nvcc || true; nproc; free -g; df -h /tmp; } > "$OUT/machine.txt" 2>&1
# the commit the programs were built from: the pack records it (the device's copy of the tree may
# carry another HEAD), else this checkout's
if [ -n "${PREBUILT:-}" ] && [ -f "$PREBUILT/commit.txt" ]; then cp "$PREBUILT/commit.txt" "$OUT/commit.txt"
else git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true; fi
GPU_VISIBLE=0
nvidia-smi -L > /dev/null 2>&1 && GPU_VISIBLE=1
log "GPU visible: $GPU_VISIBLE"

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
  TEST_BACKENDS=$BIN/test_backends; TRACE_TOOL=$BIN/journey-trace; TP_CUDA=$BIN/tp_cuda_exactness
  for b in "$JOURNEY" "$TEST_CUDA"; do
    [ -x "$b" ] && { env LD_TRACE_LOADED_OBJECTS=1 "$b" 2>&1 | grep 'not found' || true; } >> "$OUT/machine.txt"
  done
  printf 'build\tprebuilt\t0s\n' >> "$STATUS"
else
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DJOURNEY_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 -DJOURNEY_NATIVE=OFF
  targets="journey journey-trace test_cuda cuda_bench ch12_cuda"
  cmake --build "$BUILD" --target help 2>/dev/null | grep -q ' test_backends$' && targets="$targets test_backends"
  cmake --build "$BUILD" --target help 2>/dev/null | grep -q ' tp_cuda_exactness$' && targets="$targets tp_cuda_exactness"
  step build 420 cmake --build "$BUILD" -j"$JOBS" --target $targets
  JOURNEY=$BUILD/src/cli/journey
  TEST_CUDA=$BUILD/tests/cuda/test_cuda
  CUDA_BENCH=$BUILD/tests/cuda/cuda_bench
  CH12=$BUILD/chapters/ch12_cuda/ch12_cuda
  TEST_BACKENDS=$(find "$BUILD" -type f -name test_backends -perm -u+x 2>/dev/null | head -n 1)
  TRACE_TOOL=$(find "$BUILD" -type f -name journey-trace -perm -u+x 2>/dev/null | head -n 1)
  TP_CUDA=$BUILD/tests/parallel/tp_cuda_exactness
fi

# ---- 2. the tests ----------------------------------------------------------------------------------
if runnable "$TEST_CUDA"; then
  step test_cuda 240 "$TEST_CUDA" --reporters=console --duration=true
  # the bf16 first-divergence report, the roads' worst NMSE and any failed check, for the summary
  grep -E "first differ|identical to f32|worst logits NMSE|ERROR|FAILED|SKIPPED|test cases|assertions" \
    "$OUT/test_cuda.log" > "$OUT/test_cuda.summary.txt" || true
else
  skip test_cuda "no test_cuda binary (build failed?)"
fi
if runnable "$TEST_BACKENDS"; then
  step test_backends 180 "$TEST_BACKENDS" --reporters=console --duration=true
else
  skip test_backends "this build has no test_backends target (the op test of tests/backends)"
fi

# ---- 2b. tensor parallelism on the GPU: 2 ranks under mpirun ---------------------------------------
if ! command -v mpirun > /dev/null 2>&1; then
  skip tp_cuda_exactness "no mpirun on this machine (Open MPI: openmpi-bin); the tensor-parallel checks need it"
elif ! runnable "$TP_CUDA"; then
  skip tp_cuda_exactness "no tp_cuda_exactness binary (a build without MPI, or the build failed)"
else
  step tp_cuda_exactness 240 bash tests/parallel/run_mpi.sh 2 "$TP_CUDA"
  grep -E "^(ok|FAIL)|runs failed|error" "$OUT/tp_cuda_exactness.log" > "$OUT/tp_cuda_exactness.summary.txt" || true
  # the command as a user runs it: the same greedy text as one process (stdout only; the stats go to stderr)
  step tp_generate_cuda 90 bash -c "bash tests/parallel/run_mpi.sh 2 '$JOURNEY' generate --model data/stories260K \
      --device cuda --tensor-parallel 2 --max-tokens 64 --temperature 0 'Once upon a time' > '$OUT/tp_generate.txt' &&
    '$JOURNEY' generate --model data/stories260K --device cuda --max-tokens 64 --temperature 0 'Once upon a time' \
      > '$OUT/one_generate.txt' && diff '$OUT/one_generate.txt' '$OUT/tp_generate.txt' && echo 'same text as one process'"
fi

# ---- 3. chapter 12, a generation on each device ------------------------------------------------------
if runnable "$CH12"; then step ch12_cuda 120 "$CH12" data/stories260K; else skip ch12_cuda "no ch12_cuda binary"; fi
step generate_cuda 60 "$JOURNEY" generate --model data/stories260K --device cuda --max-tokens 64 --temperature 0 "Once upon a time"
step generate_cpu 60 "$JOURNEY" generate --model data/stories260K --device cpu --max-tokens 64 --temperature 0 "Once upon a time"

# ---- 4. traces: CPU vs CUDA, stage by stage -------------------------------------------------------
# the tiny models ship no tokenizer; their 512-token vocabulary is sized for stories260K's
TRACE_MODELS="data/stories260K:data/stories260K tests/golden/models/tiny-llama:data/stories260K"
TRACE_MODELS="$TRACE_MODELS tests/golden/models/tiny-qwen2:data/stories260K tests/golden/models/tiny-qwen3:data/stories260K"
SMOL=$(ls -d models/smollm2* 2>/dev/null | head -n 1)
if [ -n "$SMOL" ]; then
  SMOL_FILE=$(ls "$SMOL"/*.gguf 2>/dev/null | head -n 1)
  SMOL_MODEL=${SMOL_FILE:-$SMOL}
  TRACE_MODELS="$TRACE_MODELS $SMOL_MODEL:$SMOL_MODEL"
elif [ -n "${PY:=$(command -v python3)}" ] && runnable "$JOURNEY" && "$PY" tools/make_random_model.py --preset smollm2-135m \
       --dtype bf16 --out "$MODELS_DIR/smollm2-shape" > "$OUT/make_smollm2_shape.log" 2>&1 \
     && "$JOURNEY" quantize "$MODELS_DIR/smollm2-shape" --type q4_1 --out "$MODELS_DIR/smollm2-shape-q4_1.gguf" \
          >> "$OUT/make_smollm2_shape.log" 2>&1; then
  # The real SmolLM2 file (98 MB) cannot travel (the carry limit is 64 MiB): its exact shape with
  # random weights, in its Q4_1 blocks, made here, and traced with stories260K's tokenizer (ids < 512).
  log "SmolLM2: the real file is not here; tracing its shape with random weights in Q4_1 instead"
  SMOL_MODEL=$MODELS_DIR/smollm2-shape-q4_1.gguf
  TRACE_MODELS="$TRACE_MODELS $SMOL_MODEL:data/stories260K"
  SMOL=$SMOL_MODEL
else
  skip trace_smollm2 "models/ holds no SmolLM2 here (the directory is git-ignored and too large to carry)"
fi
if runnable "$JOURNEY" && "$JOURNEY" trace --help 2>&1 | grep -q -- '--device' && runnable "$TRACE_TOOL"; then
  F32_PROFILE="" BF16_PROFILE="--tolerance-scale 100"  # (a build without profiles: run 1's stopgap)
  if "$TRACE_TOOL" diff --help 2>&1 | grep -q -- '--tolerance-profile'; then
    F32_PROFILE="--tolerance-profile f32" BF16_PROFILE="--tolerance-profile bf16"
  fi
  for pair in $TRACE_MODELS; do
    m=${pair%%:*} tok=${pair#*:}
    name=$(basename "$m"); name=${name%.gguf}
    TRACE_ARGS="--model $m --temperature 0 --max-tokens 6"
    [ "$tok" != "$m" ] && TRACE_ARGS="$TRACE_ARGS --tokenizer $tok"
    # the oracle is the literal reference: on a quantized file the fast CPU backend rounds its
    # activations to 8 bits (as llama.cpp does), the reference and cuda:f32 widen the weights to f32
    step "trace_reference_$name" 90 "$JOURNEY" trace $TRACE_ARGS --device reference --out "$OUT/traces/$name-reference" "Once upon a time"
    # f32 weights: SAME at the f32 tolerances; bf16: the bf16 profile (docs/cuda.md, "Tolerances")
    step "trace_cuda_f32_$name" 90 "$JOURNEY" trace $TRACE_ARGS --device cuda:f32 \
      --out "$OUT/traces/$name-cuda-f32" "Once upon a time"
    step "trace_diff_f32_$name" 60 "$TRACE_TOOL" diff "$OUT/traces/$name-cuda-f32" "$OUT/traces/$name-reference" $F32_PROFILE
    step "trace_cuda_bf16_$name" 90 "$JOURNEY" trace $TRACE_ARGS --device cuda \
      --out "$OUT/traces/$name-cuda-bf16" "Once upon a time"
    step "trace_diff_bf16_$name" 60 "$TRACE_TOOL" diff "$OUT/traces/$name-cuda-bf16" "$OUT/traces/$name-reference" $BF16_PROFILE
  done
  # the traces of real-size models are large: keep the diffs, drop the tensors of the models beyond the goldens
  [ -n "$SMOL" ] && rm -rf "$OUT"/traces/$(basename "${SMOL_MODEL%.gguf}")-*
else
  skip traces "needs 'journey trace --device' and the journey-trace tool (not in this build)"
fi

# ---- 5. benchmarks on the TinyLlama-1.1B shape ---------------------------------------------------
PY=""
for candidate in /usr/bin/python3 python3; do
  if command -v "$candidate" > /dev/null 2>&1 && "$candidate" -c "import numpy" > /dev/null 2>&1; then PY=$candidate; break; fi
done
# bench NAME MODEL [cuda_bench flags...]: one JSON per run, bench_NAME.json
bench() {
  local name=$1 model=$2
  shift 2
  step "bench_$name" 150 "$CUDA_BENCH" "$model" --prompt-tokens 128 --gen-tokens 64 --runs 3 "$@"
  sed -n '/^{/,/^}/p' "$OUT/bench_$name.log" > "$OUT/bench_$name.json" 2>/dev/null || true
}
if [ "${SKIP_BENCH:-0}" = 1 ]; then
  skip bench "SKIP_BENCH=1"
elif [ "$GPU_VISIBLE" != 1 ] || [ -z "$PY" ] || ! runnable "$CUDA_BENCH"; then
  skip bench "needs a GPU ($GPU_VISIBLE), a python3 with numpy ('$PY') and cuda_bench"
else
  M=$MODELS_DIR/tinyllama-1.1b-bf16
  if step make_tinyllama 240 "$PY" tools/make_random_model.py --preset tinyllama-1.1b --dtype bf16 --out "$M"; then
    # The quantized files are made on the CPU cores WHILE the GPU runs the bf16 benchmarks: one
    # `journey quantize` per type in the background, a few threads each, each under a timeout.
    QUANT_JOBS=""
    QUANT_THREADS=""
    "$JOURNEY" quantize --help 2>&1 | grep -q -- '--threads' && QUANT_THREADS="--threads ${QUANT_THREADS_EACH:-3}"
    if runnable "$JOURNEY" && "$JOURNEY" quantize --help > /dev/null 2>&1; then
      NATIVE=$("$CUDA_BENCH" --list-dtypes 2>/dev/null || true)
      for q in $QUANT_TYPES; do
        base=${q%%_k_m}; base=${base%%_k_s}
        [ "$q" != "$base" ] && base=${base}_k
        if ! grep -qiw "$base" <<< "$NATIVE"; then skip "bench_$q" "the CUDA backend does not keep $q as stored"; continue; fi
        log "quantize $q in the background"
        ( t0=$(date +%s); timeout --kill-after=10 "${QUANT_TIMEOUT:-200}" nice -n 5 "$JOURNEY" quantize "$M" --type "$q" $QUANT_THREADS \
            --out "$MODELS_DIR/tinyllama-1.1b-$q.gguf" > "$OUT/quantize_$q.log" 2>&1
          printf '%s\t%s\t%ss\n' "quantize_$q" "$?" "$(($(date +%s) - t0))" > "$OUT/quantize_$q.status" ) &
        QUANT_JOBS="$QUANT_JOBS $q"
      done
    else
      skip bench_quantized "'journey quantize' is not in this build"
    fi
    # every road, fastest first; the last one is run 1's road (plain, GEMV v3) for the before/after
    bench bf16 "$M" --dtype bf16 --streams 16
    bench bf16_no_graphs "$M" --dtype bf16 --graphs 0
    bench bf16_no_early_launch "$M" --dtype bf16 --early-launch 0
    bench bf16_no_fusion "$M" --dtype bf16 --fuse 0 --graphs 0
    bench bf16_plain "$M" --dtype bf16 --fast-decode 0
    bench bf16_run1_road "$M" --dtype bf16 --fast-decode 0 --gemv 3
    if runnable "$JOURNEY" && "$JOURNEY" bench --help 2>&1 | grep -q -- '--device'; then
      step journey_bench_cuda 150 "$JOURNEY" bench --model "$M" --device cuda --prompt-tokens 128 --gen-tokens 64 --runs 3 --json
    else
      skip journey_bench_cuda "'journey bench' has no --device in this build"
    fi
    # the quantized files, as each one is ready (the blocks stay as stored on the device)
    for q in $QUANT_JOBS; do
      while [ ! -f "$OUT/quantize_$q.status" ]; do sleep 2; done
      cat "$OUT/quantize_$q.status" >> "$STATUS"
      if [ "$(cut -f2 "$OUT/quantize_$q.status")" = 0 ]; then
        log "quantize $q: ok ($(cut -f3 "$OUT/quantize_$q.status"))"
        bench "$q" "$MODELS_DIR/tinyllama-1.1b-$q.gguf" --dtype bf16
      else
        log "quantize $q FAILED: $(tail -n 3 "$OUT/quantize_$q.log" | tr '\n' ' ')"
      fi
      rm -f "$MODELS_DIR/tinyllama-1.1b-$q.gguf"
    done
  fi
  # SmolLM2-135M's shape in Q4_1 (the real file when models/ has it): a small model, so launch-bound
  if [ -n "${SMOL_MODEL:-}" ] && [ -f "$SMOL_MODEL" ]; then bench smollm2_q4_1 "$SMOL_MODEL" --dtype bf16 --streams 16; fi
fi

# ---- 6. summary ------------------------------------------------------------------------------------
SUMMARY_PY=$(command -v python3 || echo /usr/bin/python3)
"$SUMMARY_PY" - "$OUT" "$BANDWIDTH_TB_S" > "$OUT/summary.txt" 2>&1 <<'EOF'
import glob, json, os, sys
out, bw = sys.argv[1], float(sys.argv[2]) * 1e12
summary = {"bandwidth_ceiling_bytes_s": bw, "steps": [], "bench": {}}
failed = []
with open(os.path.join(out, "steps.tsv")) as f:
    for line in f:
        parts = line.rstrip("\n").split("\t")
        name, rc, secs = parts[:3]
        why = parts[3] if len(parts) > 3 else ""
        summary["steps"].append({"step": name, "rc": rc, "seconds": secs, "why": why})
        if rc not in ("0", "prebuilt", "skipped"):
            failed.append(name)
        print(f"{name:32s} rc={rc:8s} {secs:>5s} {why}")
rows = []
for path in sorted(glob.glob(os.path.join(out, "bench_*.json"))):
    name = os.path.basename(path)[6:-5]
    try:
        with open(path) as f:
            j = json.load(f)
    except Exception as e:  # an empty file from a failed step
        print(f"bench {name}: unreadable ({e})")
        continue
    bytes_tok = j.get("device_weight_bytes_per_token") or j["decode_bytes_per_token"] / 2
    ceiling = bw / bytes_tok
    decode = j["decode_tok_s"]["median"]
    serving = j.get("serving", {})
    by_type = j.get("device_weight_bytes_by_type") or {}
    weights = max(by_type, key=by_type.get) if by_type else j.get("weight_dtype")  # the type most bytes are in
    row = {"name": name, "weights": weights, "weight_bytes_by_type": by_type, "device": j.get("device"),
           "weight_bytes_per_token": bytes_tok, "decode_tok_s": decode,
           "decode_fraction_of_ceiling": decode / ceiling,
           "decode_device_sampling_tok_s": j.get("decode_device_sampling_tok_s"),
           "prefill_tok_s": j["prefill_tok_s"]["median"],
           "streams": serving.get("batched", {}).get("streams"),
           "streams_tok_s": serving.get("batched", {}).get("output_tok_s"),
           "single_stream_tok_s": serving.get("single", {}).get("output_tok_s"),
           "roads": j.get("roads"), "options": j.get("options")}
    summary["bench"][name] = row
    rows.append(row)
if rows:
    print()
    print(f"{'run':24s} {'weights':8s} {'GB/tok':>7s} {'decode tok/s':>12s} {'% of ' + format(bw / 1e12, '.1f') + ' TB/s':>13s} "
          f"{'dev-sampling':>12s} {'prefill tok/s':>13s} {'16-stream tok/s':>15s}  roads")
    for r in rows:
        roads = r["roads"] or {}
        road = f"graphs {roads.get('graph_replays', 0)}/decode {roads.get('decode_steps', 0)}/plain {roads.get('plain_steps', 0)}"
        if roads.get("early_launch_refused"):
            road += " (early launch refused by the driver)"
        if roads.get("graph_error"):
            road += " GRAPH ERROR: " + roads["graph_error"]
        st = f"{r['streams_tok_s']:.0f}" if r["streams_tok_s"] else "-"
        ds = f"{r['decode_device_sampling_tok_s']:.1f}" if r["decode_device_sampling_tok_s"] else "-"
        print(f"{r['name']:24s} {str(r['weights']):8s} {r['weight_bytes_per_token'] / 1e9:7.3f} {r['decode_tok_s']:12.1f} "
              f"{100 * r['decode_fraction_of_ceiling']:12.1f}% {ds:>12s} {r['prefill_tok_s']:13.0f} {st:>15s}  {road}")
    best = max(rows, key=lambda r: r["decode_fraction_of_ceiling"])
    print(f"\nbest decode: {best['name']} at {100 * best['decode_fraction_of_ceiling']:.1f}% of the ceiling "
          f"(target of issue #17: 60%)")
print("\nfailed steps: " + (", ".join(failed) if failed else "none"))
summary["failed_steps"] = failed
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
EOF
cat "$OUT/summary.txt"
log "done in $(($(date +%s) - START)) s; results in $OUT_FINAL"
