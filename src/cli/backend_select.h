// `--device reference|cpu|cuda`: the one place the CLI commands turn a device name into a Backend,
// so every command (generate, chat, bench, trace, serve) says the same thing when CUDA is missing.
// Also the fast CPU backend's loading flags (--kv-cache-dtype, --no-mmap), the progress line while
// the weights come into memory, and what loading cost (time, resident memory).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "assets/model.h"
#include "backend/backend.h"
#include "trace/filters.h"
#include "trace/manifest.h"

namespace journey::cli {

struct BackendFlags {
  int threads = 0;                    // the fast CPU backend's threads; 0 = all cores
  std::string kv_cache_dtype = "f32"; // f32 | f16 | bf16 | q8_0 (the fast CPU backend only)
  bool mmap = false;                  // use the weights in place in the file's mapping (WeightPlacement::InPlace)
  bool no_mmap = false;               // copy them into 2 MiB pages (WeightPlacement::Copy; the default where Linux has THP)
  int tensor_parallel = 1;            // ranks of the MPI world the model is split over (src/parallel)
  std::string tp_transport = "auto";  // --device cuda: auto | nccl | host-staged (parallel/device_transport.h)
  // `journey trace --tensor-parallel N`: each follower rank r writes its own dump to
  // follower_trace_dir/rank<r>/ with these filters (empty: followers trace nothing).
  std::string follower_trace_dir;
  TraceFilters follower_trace_filters;
};

// --kv-cache-dtype, --mmap / --no-mmap and --tensor-parallel on a subcommand (threads stay the command's own flag).
void add_backend_flags(CLI::App* cmd, BackendFlags& flags);

// What loading cost, for the load line and the summary lines.
struct LoadInfo {
  double seconds = 0;            // from load_model to a ready backend
  int64_t resident_bytes = -1;   // this process's resident memory right after (VmRSS)
  int64_t file_bytes = 0;        // the model's weight files
  int64_t in_place_bytes = 0;    // weights used in place in the mapping (cpu)
  int64_t copied_bytes = 0;      // weights copied (cpu)
  int64_t grouped_bytes = 0;     // of those, Q4_0 / Q4_K / Q8_0 rows regrouped by 8 for the decode dot (cpu)
  int64_t block_sums_bytes = 0;  // Q8_0 block sums made for batched decode (cpu, CpuOptions::q8_0_block_sums)
};
// "loaded in 0.6 s: 1.17 GB of weights copied into 2 MiB pages (--mmap: in place); resident 1.19 GB"
// (with ", 0.56 GB of them regrouped by 8 rows for decode" after "pages" where that happened, and
// "; 0.07 GB of Q8_0 block sums for batched decode" before "; resident" where those were made)
// or "loaded in 0.2 s: 2.20 GB of weights used in place, 0.01 GB copied; resident 2.25 GB".
std::string load_line(const LoadInfo& info);

// device: "reference" (the literal path: one thread, f32; what the chapters run), "cpu" (the fast
// CPU backend with `threads` threads, 0 = all cores; the default of every command), "cuda" (bf16
// weights on GPU 0), or "cuda:bf16" / "cuda:f16" / "cuda:f32" to choose the weight type. Throws
// journey::Error: "journey was built without CUDA (JOURNEY_CUDA=OFF)" or "no CUDA device visible"
// for cuda when it cannot run, and names the device for anything else.
std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads);
// The same with the loading flags; on a terminal, a progress line while the weights' pages come in
// (when that takes over a second). `info` (optional) gets the backend's part of the load.
std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, const BackendFlags& flags,
                                      LoadInfo* info = nullptr);

// Tensor parallelism (`mpirun -np N journey CMD --tensor-parallel N`): make_backend on rank 0
// returns a backend that drives the whole group; on the other ranks it runs rank 0's calls on
// its shard until rank 0's backend goes away, then ends the process (exit status 0) — a follower
// has no command of its own to return to. A command that must not start anything before its
// backend exists on a follower (serve binds a port) calls this first: on a follower it loads the
// model and follows (never returns); elsewhere it returns at once.
void follow_if_tensor_parallel_follower(const std::string& model_path, const std::string& device,
                                        const BackendFlags& flags);

// The manifest entry of rank `rank` of a group of `size` over this model (trace/manifest.h), whose
// collectives travel over `transport`.
ManifestTensorParallel manifest_tensor_parallel(const ModelConfig& config, int rank, int size,
                                                const std::string& transport);

// The help text of the flag, listing what this build supports.
const char* device_flag_help();

}  // namespace journey::cli
