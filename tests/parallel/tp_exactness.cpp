// Tensor parallelism changes where the sums are done, not what is computed. Run under
// `mpirun -np N` (tests/parallel/run_mpi.sh): on the shipped model and the three golden models,
// rank 0 drives a tensor-parallel group of N ranks through the calls a server makes (allocate the
// KV pool, a prefill with every row's logits through a scrambled block table, greedy decode
// steps, a copy of KV blocks and decode steps from the copies, one batched step of a decode and a
// new prompt) and the same calls run on the literal reference and on the single-process fast CPU
// backend. Checked:
//   - the greedy tokens of the group equal the reference's and the single-process run's;
//   - every logits row agrees with the reference's within the trace diff's f32 logits tolerance
//     (trace/compare.cpp: stage_tolerance(Stage::logits)), the bound the single-process fast
//     backend is held to against the reference;
//   - every logits row agrees with the single-process fast backend's within NMSE 1e-10 and
//     max |diff| 1e-4 x max(1, |logit|max): the same weights, activations and kernels, only the
//     order of the sums differs (each rank sums its heads / FFN columns, then the all-reduce adds
//     the ranks' partial sums; f32 rounding of a reordered sum of ~100 terms is ~1e-7 relative).
// A mismatch prints the model, the call, the row and the first differing logits side by side.
// First, the device-id exchange a CUDA group uses to choose its transport runs over the same MPI
// group (every rank must receive every rank's id, in rank order).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "core/numeric.h"
#include "cpu/cpu_backend.h"
#include "parallel/communicator.h"
#include "parallel/device_transport.h"
#include "parallel/shard.h"
#include "parallel/tensor_parallel.h"
#include "reference/reference_backend.h"
#include "trace/compare.h"
#include "tp_drive.h"

using namespace journey;
using namespace journey::tp_test;
namespace fs = std::filesystem;

namespace {

constexpr double kSameKernelsNmse = 1e-10;   // against the single-process fast backend (see above)
constexpr double kSameKernelsMaxAbs = 1e-4;  // x max(1, |logit|max)

}  // namespace

int main() {
  try {
    Communicator& world = mpi_world();
    const int N = world.size();
    const fs::path source = JOURNEY_SOURCE_DIR;
    const StageTolerance logits_tolerance = stage_tolerance(Stage::logits);
    int failures = 0;
    // The device-id exchange a CUDA group runs at start-up to choose its transport
    // (parallel/device_transport.h), over this MPI group: every rank must receive every rank's 16
    // bytes, in rank order, each byte value intact.
    {
      auto id_of = [](int rank) {
        DeviceId id{};
        for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t((rank * 37 + int(i) * 11 + 200) % 256);
        return id;
      };
      const std::vector<DeviceId> ids = exchange_device_ids(world, id_of(world.rank()));
      bool same = int(ids.size()) == N;
      for (int r = 0; same && r < N; ++r) same = ids[size_t(r)] == id_of(r);
      if (!same) {
        std::printf("FAIL rank %d: the device-id exchange over %d ranks delivered %zu ids, not every rank's own in rank "
                    "order (rank 0's: %s)\n", world.rank(), N, ids.size(),
                    ids.empty() ? "none" : device_id_string(ids[0]).c_str());
        ++failures;
      } else if (world.rank() == 0) {
        std::printf("ok   the device-id exchange over %d ranks: every rank's 16 bytes on every rank\n", N);
      }
    }
    for (const char* path : kModels) {
      const LoadedModel model = load_model(source / path);
      // one thread per rank: the ranks share the machine's cores
      auto shard = make_cpu_backend(model, CpuOptions{.threads = 1, .communicator = &world});
      if (world.rank() != 0) {
        run_tensor_parallel_follower(*shard, world);
        continue;
      }
      Run tp;
      {
        auto group = make_tensor_parallel_backend(std::move(shard), world);
        tp = drive(*group, group->config());
      }  // the followers move on to the next model
      auto reference = make_reference_backend(model);
      auto single = make_cpu_backend(model, CpuOptions{.threads = 1});
      const Run ref = drive(*reference, model.config);
      const Run one = drive(*single, model.config);
      double vs_reference = 0, vs_single = 0;
      const bool ok_ref = compare(tp, ref, "reference", logits_tolerance.nmse, logits_tolerance.max_abs, path, vs_reference);
      const bool ok_one = compare(tp, one, "single-process cpu", kSameKernelsNmse, kSameKernelsMaxAbs, path, vs_single);
      ModelConfig c = model.config;
      c.head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads;
      std::printf("%s %s, --tensor-parallel %d (%s): %zu calls, %zu greedy tokens equal; logits NMSE at most %.2g against "
                  "the reference (bound %.2g), %.2g against the single-process cpu run (bound %.2g)\n",
                  ok_ref && ok_one ? "ok  " : "FAIL", path, N, plan_shard(c, N - 1, N, path).describe().c_str(),
                  tp.calls.size(), tp.greedy.size(), vs_reference, logits_tolerance.nmse, vs_single, kSameKernelsNmse);
      failures += !ok_ref + !ok_one;
    }
    if (failures > 0) std::printf("rank %d: %d comparisons failed\n", world.rank(), failures);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_exactness: error: %s\n", e.what());
    mpi_world().abort(1);
  }
}
