#!/bin/bash
# One prepared device run: build journey, make the TinyLlama-1.1B-shaped models, bench each type with 2 threads.
set -x
exec > >(tee $OUT/log.txt) 2>&1
nproc; lscpu | grep -E "Model name|Flags" | cut -c1-400; free -g; python3 -c "import numpy; print(numpy.__version__)"
T0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DJOURNEY_CUDA=OFF -DJOURNEY_TESTS=OFF -DJOURNEY_CHAPTERS=OFF > $OUT/cmake.txt 2>&1 || { tail -30 $OUT/cmake.txt; exit 1; }
cmake --build build-dev -j16 --target journey > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "built in $(( $(date +%s) - T0 )) s"
M=/tmp/models; mkdir -p $M
python3 tools/make_random_model.py --preset tinyllama-1.1b --dtype f32 --out $M/f32 > /dev/null
echo "f32 model at $(( $(date +%s) - T0 )) s"
for t in q4_0 q8_0 q4_k_m; do ./build-dev/src/cli/journey quantize $M/f32 --type $t --out $M/$t.gguf --threads 16 > /dev/null 2>&1; done
echo "quantized at $(( $(date +%s) - T0 )) s"
for m in q4_0.gguf q8_0.gguf q4_k_m.gguf f32; do
  ./build-dev/src/cli/journey bench --model $M/$m --threads 2 --runs 3 --gen-tokens 64 --prompt-tokens 128 > $OUT/bench-$m.txt 2>&1
  cat $OUT/bench-$m.txt; echo "at $(( $(date +%s) - T0 )) s"
done
python3 tools/make_random_model.py --preset tinyllama-1.1b --dtype bf16 --out $M/bf16 > /dev/null
./build-dev/src/cli/journey bench --model $M/bf16 --threads 2 --runs 3 --gen-tokens 64 > $OUT/bench-bf16.txt 2>&1; cat $OUT/bench-bf16.txt
python3 tools/make_random_model.py --preset tinyllama-1.1b --dtype f16 --out $M/f16 > /dev/null
./build-dev/src/cli/journey bench --model $M/f16 --threads 2 --runs 3 --gen-tokens 64 > $OUT/bench-f16.txt 2>&1; cat $OUT/bench-f16.txt
echo "all at $(( $(date +%s) - T0 )) s"
