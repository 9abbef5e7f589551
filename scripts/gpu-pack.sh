#!/usr/bin/env bash
# gpu-pack.sh — build the GPU check's programs HERE (a machine with nvcc but no GPU) and pack them,
# with the shared libraries they need that a bare CUDA machine may lack, into one folder that
# travels to the GPU machine. Device time then goes to running, not to compiling.
#
#   scripts/gpu-pack.sh [PACK_DIR]     # default: gpu-pack (git-ignored)
#   then on the GPU machine:  PREBUILT=gpu-pack bash scripts/gpu-check.sh
#
# The build is generic x86-64 (JOURNEY_NATIVE=OFF: the GPU machine's CPU is another model) and
# compiles the kernels for sm_90 only (the H100/H200). Each program gets a wrapper in PACK_DIR/bin
# that puts PACK_DIR/lib first on LD_LIBRARY_PATH for that program alone, so the machine's own
# Python and tools keep their libraries. cuBLAS and the driver are NOT packed: the CUDA machine has
# its own (gpu-check.sh finds libcublas there).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=${1:-gpu-pack}
BUILD=${BUILD:-build-gpu}
TARGETS=${TARGETS:-"journey journey-trace test_cuda test_backends cuda_bench ch12_cuda tp_cuda_exactness"}
# NCCL off by default: libnccl is ~220 MB, far over what may travel to the GPU machine (64 MiB in
# all), and the one-GPU machine could not use it anyway (NCCL refuses two ranks on one GPU; the
# tensor-parallel check runs host-staged there). JOURNEY_NCCL=ON where the GPU machine has its own.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DJOURNEY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DJOURNEY_NATIVE=OFF -DJOURNEY_TESTS=ON -DJOURNEY_CHAPTERS=ON -DJOURNEY_NCCL="${JOURNEY_NCCL:-OFF}" > /dev/null
available=$(cmake --build "$BUILD" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
build_targets=()
for t in $TARGETS; do grep -qx "$t" <<< "$available" && build_targets+=("$t"); done
cmake --build "$BUILD" -j"$(nproc)" --target "${build_targets[@]}"
rm -rf "$PACK"
mkdir -p "$PACK/bin" "$PACK/real" "$PACK/lib"
# what the programs were built from: HEAD, and whether the tree had uncommitted changes
{ git rev-parse HEAD; git diff --quiet HEAD -- . || echo "(plus uncommitted changes)"; } > "$PACK/commit.txt" 2>/dev/null || true
for t in "${build_targets[@]}"; do
  exe=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$exe" ] || continue
  strip -o "$PACK/real/$t" "$exe"
  cat > "$PACK/bin/$t" <<WRAP
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)
LD_LIBRARY_PATH="\$here/lib\${JOURNEY_CUDA_LIBS:+:\$JOURNEY_CUDA_LIBS}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/real/$t" "\$@"
WRAP
  chmod +x "$PACK/bin/$t"
  # every shared library except the C library, the driver and the CUDA toolkit's own
  ldd "$exe" | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcublas[^/]*|libcudart[^/]*)\.so' \
    | { grep -v '/libnccl' || true; } | while read -r lib; do cp -Lu "$lib" "$PACK/lib/"; done
done
du -sh "$PACK"
