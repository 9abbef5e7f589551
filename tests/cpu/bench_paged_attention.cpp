// Benchmark, not a test (no ctest entry): one decode step's attention (cpu::paged_attention, T = 1)
// at a long context, with every layer's K/V pool read from memory as in the engine — the layers'
// pools are visited in turn, together far larger than the caches — beside journey bench's bandwidth
// probe in the same run. Prints microseconds per layer and the GB/s at which the step's K and V rows
// were read (each position's rows of every kv head, K and V, once).
//
// usage: bench_paged_attention [--positions 2048] [--layers 22] [--heads 32] [--kv-heads 4]
//                              [--head-dim 64] [--kv f32|f16|bf16|q8_0] [--threads 2] [--repeats 5]
//                              [--prefill 0]
// --prefill N: time a prefill of N queries after the positions instead (one layer, in cache).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/bench.h"
#include "cpu/huge_pages.h"
#include "cpu/ops.h"

using namespace journey;

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

DType kv_type_named(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "q8_0") return DType::Q8_0;
  std::fprintf(stderr, "--kv: expected f32, f16, bf16 or q8_0, found \"%s\"\n", name.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t positions = 2048, layers = 22, H = 32, KVH = 4, D = 64, threads = 2, repeats = 5, prefill = 0;
  std::string kv = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--kv") { kv = argv[i + 1]; continue; }
    const int64_t value = std::atoll(argv[i + 1]);
    if (flag == "--positions") positions = value;
    else if (flag == "--layers") layers = value;
    else if (flag == "--heads") H = value;
    else if (flag == "--kv-heads") KVH = value;
    else if (flag == "--head-dim") D = value;
    else if (flag == "--threads") threads = value;
    else if (flag == "--repeats") repeats = value;
    else if (flag == "--prefill") prefill = value;
    else {
      std::fprintf(stderr, "unknown flag %s (see the file's head for usage)\n", flag.c_str());
      return 2;
    }
  }
  if (positions < (prefill > 0 ? 0 : 1) || layers < 1 || KVH < 1 || H % KVH != 0 || D < 1 || threads < 1 || repeats < 1 || prefill < 0) {
    std::fprintf(stderr, "positions >= 1 (>= 0 with --prefill), layers, kv heads, head dim, threads, repeats >= 1; "
                         "heads a multiple of kv heads\n");
    return 2;
  }
  const DType type = kv_type_named(kv);
  cpu::check_kv_pool_type(type, D);
  constexpr int64_t kBlockSize = 16;  // the engine's default KV block
  const int64_t T = prefill > 0 ? prefill : 1, P = positions + T;
  const int64_t blocks = (P + kBlockSize - 1) / kBlockSize;
  const int64_t slot_bytes = dtype_bytes_for(type, KVH * D);
  const int64_t pool_bytes = blocks * kBlockSize * slot_bytes;
  if (prefill > 0) layers = 1;

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(P * KVH * D)), v(k.size()), q(static_cast<size_t>(T * H * D));  // [P, KVH, D] x2, [T, H, D]
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  std::vector<int32_t> block_table(static_cast<size_t>(blocks));  // [blocks]: in order, as one sequence's are
  for (int64_t b = 0; b < blocks; ++b) block_table[size_t(b)] = int32_t(b);
  std::vector<HugePageVector<std::byte>> k_pools, v_pools;  // [layers] each [blocks, kBlockSize, KVH, D]
  for (int64_t l = 0; l < layers; ++l) {
    k_pools.emplace_back(size_t(pool_bytes), std::byte{0});
    v_pools.emplace_back(size_t(pool_bytes), std::byte{0});
    cpu::kv_cache_write({k_pools.back().data(), type}, {v_pools.back().data(), type}, k.data(), v.data(),
                        block_table.data(), P, 0, kBlockSize, KVH, D);
  }
  std::vector<float> context(static_cast<size_t>(T * H * D));  // [T, H * D]
  ReadBandwidthProbe probe(int(threads), size_t(512) << 20);

  std::printf("paged attention, %s: H %lld, KVH %lld, D %lld, %lld positions, %s KV, %lld threads, %s\n",
              prefill > 0 ? "prefill" : "one decode step", (long long)H, (long long)KVH, (long long)D,
              (long long)positions, kv.c_str(), (long long)threads,
              prefill > 0 ? "one layer" : (std::to_string(layers) + " layers' pools in turn (" +
                                           std::to_string(2 * layers * pool_bytes >> 20) + " MB)").c_str());
  std::vector<double> per_layer_us;
  for (int64_t r = 0; r < repeats; ++r) {
    const double t0 = seconds_now();
    for (int64_t l = 0; l < layers; ++l)
      cpu::paged_attention(context.data(), q.data(), {k_pools[size_t(l)].data(), type}, {v_pools[size_t(l)].data(), type},
                           block_table.data(), T, P - T, kBlockSize, H, KVH, D, nullptr, nullptr, int(threads));
    per_layer_us.push_back((seconds_now() - t0) / double(layers) * 1e6);
  }
  const double probe_gbs = probe.measure(2);
  std::sort(per_layer_us.begin(), per_layer_us.end());
  const double median = per_layer_us[per_layer_us.size() / 2];
  const double kv_bytes = 2.0 * double(P) * double(slot_bytes);  // K and V of every position, once
  double checksum = 0;
  for (float x : context) checksum += x;
  if (prefill > 0) {
    // scores and mix: 2 FLOPs per head, value of D and position attended (query t attends start + t + 1)
    const double attended = double(T) * double(positions) + double(T) * double(T + 1) / 2.0;
    const double flops = 2.0 * 2.0 * double(H) * double(D) * attended;
    std::printf("  %.1f us (median of %lld; best %.1f), %.1f GFLOP/s; checksum %.6g\n", median, (long long)repeats,
                per_layer_us.front(), flops / (median * 1e-6) / 1e9, checksum);
    return 0;
  }
  std::printf("  %.1f us a layer (median of %lld; best %.1f), K and V read at %.1f GB/s; probe %.1f GB/s "
              "(%.0f %%); checksum %.6g\n",
              median, (long long)repeats, per_layer_us.front(), kv_bytes / (median * 1e-6) / 1e9, probe_gbs,
              100.0 * kv_bytes / (median * 1e-6) / 1e9 / probe_gbs, checksum);
  return 0;
}
