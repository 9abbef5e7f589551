#include "cli/backend_select.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/process_memory.h"
#include "engine/traced_generation.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"
#include "parallel/tensor_parallel.h"
#include "reference/reference_backend.h"
#include "text/tokenizer.h"
#include "trace/dump_sink.h"
#if defined(JOURNEY_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace journey::cli {

namespace {

DType kv_dtype_from_flag(const std::string& name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    if (name == dtype_name(t)) return t;
  fail("--kv-cache-dtype: expected f32, f16, bf16 or q8_0, found \"", name, "\"");
}

// "\rloading weights  45%  1.0 / 2.2 GB  3.2 s" on stderr, only on a terminal and only once loading
// has taken a second; the line is cleared when done.
struct ProgressLine {
  explicit ProgressLine(const char* what) : what(what) {}
  const char* what;  // "loading weights", "widening weights to f32", ...
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool shown = false;
  bool terminal = isatty(STDERR_FILENO) != 0;
  void update(int64_t done, int64_t total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!terminal || elapsed < 1.0 || total <= 0) return;
    std::fprintf(stderr, "\r%s %3d%%  %.2f / %.2f GB  %.1f s ", what, int(100 * done / total), double(done) / 1e9,
                 double(total) / 1e9, elapsed);
    std::fflush(stderr);
    shown = true;
  }
  ~ProgressLine() {
    if (shown) std::fprintf(stderr, "\r%60s\r", "");
  }
};

// The MPI world of a --tensor-parallel N run, checked: MPI built in, started by mpirun with N
// processes, and a device that has a sharded path. Null when not tensor-parallel.
Communicator* tensor_parallel_world(const std::string& device, const BackendFlags& flags) {
  const int launched = launcher_world_size();
  if (flags.tensor_parallel < 1) fail("--tensor-parallel: expected 1 or more ranks, found ", flags.tensor_parallel);
  if (flags.tensor_parallel == 1) {
    if (launched > 1)
      fail("this process is one of ", launched, " started by mpirun, but --tensor-parallel is 1: every process would ",
           "run the whole command; pass --tensor-parallel ", launched, " to split the model over them");
    return nullptr;
  }
  const bool cuda = device == "cuda" || device.rfind("cuda:", 0) == 0;
  if (!cuda && flags.tp_transport != "auto")
    fail("--tp-transport ", flags.tp_transport, ": only --device cuda chooses how its collectives travel (--device ",
         device, " uses the MPI communicator)");
  if (device != "cpu" && !cuda)
    fail("--tensor-parallel ", flags.tensor_parallel, ": --device ", device,
         " has no tensor-parallel path; use --device cpu or cuda");
  Communicator& world = mpi_world();
  if (world.size() != flags.tensor_parallel)
    fail("--tensor-parallel ", flags.tensor_parallel, " but the MPI world has ", world.size(), " process",
         world.size() == 1 ? "" : "es", "; start it as: mpirun -np ", flags.tensor_parallel, " journey ... --tensor-parallel ",
         flags.tensor_parallel);
  expect_tensor_parallel_followers(world);  // rank 0: the followers are told to stop even if this process fails first
  return &world;
}

// A follower's part of `journey trace`: the forward steps rank 0 traces, recorded into
// DIR/rank<r>/ with the step marks rank 0's dump has (step 0 the prefill, then one per decode).
void follow_with_trace(Backend& shard, Communicator& world, const LoadedModel& model, const BackendFlags& flags,
                       const std::string& transport) {
  const std::filesystem::path dir = std::filesystem::path(flags.follower_trace_dir) / cat("rank", world.rank());
  DumpSink sink(dir, flags.follower_trace_filters);
  std::vector<int32_t> prompt;  // [T] the prefill's tokens, for the manifest
  run_tensor_parallel_follower(shard, world, [&sink, &prompt](const ForwardBatch& batch, int64_t step) -> TraceSink* {
    const SequenceInput& s = batch.sequences.front();
    if (step == 0) prompt = s.tokens;
    std::vector<int64_t> positions;  // [T]
    for (size_t t = 0; t < s.tokens.size(); ++t) positions.push_back(s.start_position + int64_t(t));
    sink.set_step(int(step), step == 0 ? "prefill" : "decode", std::move(positions));
    return &sink;
  });
  Manifest& m = sink.manifest();
  m.generated_by_tool = cat("journey trace (rank ", world.rank(), " of ", world.size(), ")");
  m.model = manifest_model(model.path, shard.config());
  m.settings = backend_manifest_settings(shard);
  m.tensor_parallel = manifest_tensor_parallel(shard.config(), world.rank(), world.size(), transport);
  // the prompt as rank 0 fed it; its text and pieces where the model directory has a tokenizer
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer(model.path);
  } catch (const Error&) {
    // no tokenizer with the model (rank 0 was given --tokenizer): ids without pieces
  }
  for (int32_t id : prompt) m.tokens.push_back({id, tokenizer ? tokenizer->piece(id) : cat("#", id)});
  if (tokenizer) m.prompt = tokenizer->decode(std::vector<int>(prompt.begin(), prompt.end()));
  sink.finish([&tokenizer](int32_t id) {
    return tokenizer && id < tokenizer->vocab_size() ? tokenizer->piece(id) : std::string();
  });
}

// A tensor-parallel rank's shard, made by make_backend for either device: on a follower, runs rank
// 0's calls until told to stop and ends the process; on rank 0, prints the split and returns the
// backend that drives the group. `transport`: how the forward pass's collectives travel.
std::unique_ptr<Backend> join_tensor_parallel_group(std::unique_ptr<Backend> shard, Communicator& world,
                                                   const LoadedModel& model, const BackendFlags& flags,
                                                   const std::string& transport) {
  if (world.rank() != 0) {
    // mpirun passes a Ctrl-C or SIGTERM to every rank; a follower leaves when rank 0, having
    // finished its own shutdown (a server's in-flight requests), tells it to
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    if (flags.follower_trace_dir.empty())
      run_tensor_parallel_follower(*shard, world);
    else
      follow_with_trace(*shard, world, model, flags, transport);
    shard.reset();
    std::exit(0);  // MPI is finalized at exit (parallel/communicator.cpp)
  }
  const ModelConfig& c = shard->config();
  for (int r = 0; r < world.size(); ++r)
    std::fprintf(stderr, "journey: tensor parallel over %s, %s\n", transport.c_str(),
                 plan_shard(c, r, world.size(), model.path.string()).describe().c_str());
  return make_tensor_parallel_backend(std::move(shard), world, transport);
}

}  // namespace

ManifestTensorParallel manifest_tensor_parallel(const ModelConfig& config, int rank, int size,
                                                const std::string& transport) {
  const TensorParallelShard s = plan_shard(config, rank, size, "the model");
  auto range = [](int64_t begin, int64_t n) { return nlohmann::json::array({begin, begin + n}); };
  ManifestTensorParallel m;
  m.rank = rank, m.world_size = size;
  m.shard = {{"heads", range(s.head_begin, s.heads)},
             {"kv_heads", range(s.kv_head_begin, s.kv_heads)},
             {"ffn_columns", range(s.ffn_begin, s.ffn_columns)},
             {"vocabulary", range(s.vocab_begin, s.vocab_rows)},
             {"kv_heads_shared", s.kv_replicated}};
  // what each rank's partial stage covers (the cpu backend records them before combining them)
  m.partials = {{std::string(stage_name(Stage::attn_out_partial)), "heads"},
                {std::string(stage_name(Stage::ffn_out_partial)), "ffn_columns"},
                {std::string(stage_name(Stage::logits_partial)), "vocabulary"}};
  m.transport = transport;
  return m;
}

void follow_if_tensor_parallel_follower(const std::string& model_path, const std::string& device,
                                        const BackendFlags& flags) {
  Communicator* world = tensor_parallel_world(device, flags);
  if (!world || world->rank() == 0) return;
  const LoadedModel model = load_model(model_path);
  make_backend(model, device, flags);  // a follower's never returns
}

void add_backend_flags(CLI::App* cmd, BackendFlags& flags) {
  cmd->add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                  "KV cache type on --device cpu: f32, f16 or bf16 (half the memory), q8_0 (~0.27x)")
      ->capture_default_str();
  CLI::Option* in_place =
      cmd->add_flag("--mmap", flags.mmap,
                    "use the weights in place in the file's memory map (no copy; the default where Linux has no "
                    "transparent huge pages; decodes slower: docs/performance.md)");
  cmd->add_flag("--no-mmap", flags.no_mmap,
                "copy the weights into 2 MiB pages (the default where Linux has transparent huge pages)")
      ->excludes(in_place);
  cmd->add_option("--tensor-parallel", flags.tensor_parallel,
                  "split the model over N MPI ranks (start with: mpirun -np N journey ... --tensor-parallel N; "
                  "--device cpu or cuda)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tp-transport", flags.tp_transport,
                  "--device cuda --tensor-parallel N: how the ranks' sums travel: auto (NCCL when every rank has its "
                  "own GPU, else through host memory over MPI), nccl or host-staged")
      ->check(CLI::IsMember({"auto", "nccl", "host-staged"}))
      ->capture_default_str();
}

std::string load_line(const LoadInfo& info) {
  char line[320];
  const double gb = 1e9;
  char grouped[96] = "";
  if (info.grouped_bytes > 0)
    std::snprintf(grouped, sizeof grouped, ", %.2f GB of them regrouped by 8 rows for decode",
                  double(info.grouped_bytes) / gb);
  char sums[80] = "";
  if (info.block_sums_bytes > 0)
    std::snprintf(sums, sizeof sums, "; %.2f GB of Q8_0 block sums for batched decode", double(info.block_sums_bytes) / gb);
  if (info.in_place_bytes == 0 && info.copied_bytes > 0)
    std::snprintf(line, sizeof line,
                  "loaded in %.1f s: %.2f GB of weights copied into 2 MiB pages%s (--mmap: in place)%s; resident %.2f GB",
                  info.seconds, double(info.copied_bytes) / gb, grouped, sums, double(info.resident_bytes) / gb);
  else if (info.in_place_bytes + info.copied_bytes > 0)
    std::snprintf(line, sizeof line, "loaded in %.1f s: %.2f GB of weights used in place, %.2f GB copied%s; resident %.2f GB",
                  info.seconds, double(info.in_place_bytes) / gb, double(info.copied_bytes) / gb, sums,
                  double(info.resident_bytes) / gb);
  else
    std::snprintf(line, sizeof line, "loaded in %.1f s; resident %.2f GB", info.seconds, double(info.resident_bytes) / gb);
  return line;
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads) {
  BackendFlags flags;
  flags.threads = threads;
  return make_backend(model, device, flags);
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, const BackendFlags& flags,
                                      LoadInfo* info) {
  const DType kv = kv_dtype_from_flag(flags.kv_cache_dtype);
  if (device != "cpu" && kv != DType::F32)
    fail("--kv-cache-dtype ", flags.kv_cache_dtype, ": only --device cpu keeps its KV cache in another type than f32 (",
         device, " keeps f32)");
  Communicator* world = tensor_parallel_world(device, flags);  // null unless --tensor-parallel N > 1
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Backend> backend;
  if (device == "reference") {
    ProgressLine progress("widening weights to f32");
    backend = make_reference_backend(model, [&progress](int64_t done, int64_t total) { progress.update(done, total); });
  } else if (device == "cpu") {
    ProgressLine progress("loading weights");
    CpuLoadReport report;
    const WeightPlacement placement = flags.mmap      ? WeightPlacement::InPlace
                                      : flags.no_mmap ? WeightPlacement::Copy
                                                      : WeightPlacement::Auto;
    CpuOptions options{.threads = flags.threads, .kv_dtype = kv, .weights = placement};
    options.on_load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    options.report = &report;
    if (world) {
      // the ranks share this machine's cores unless told otherwise
      if (options.threads == 0)
        options.threads = std::max(1, int(std::thread::hardware_concurrency()) / world->size());
      options.communicator = world;
    }
    backend = make_cpu_backend(model, options);
    if (world) backend = join_tensor_parallel_group(std::move(backend), *world, model, flags, world->transport());
    if (info)
      info->in_place_bytes = report.bytes_in_place, info->copied_bytes = report.bytes_copied,
      info->grouped_bytes = report.bytes_grouped, info->block_sums_bytes = report.bytes_block_sums;
  } else if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#if defined(JOURNEY_HAVE_CUDA)
    CudaOptions options;  // bf16 weights unless "cuda:f32" / "cuda:f16"
    const std::string type = device == "cuda" ? "bf16" : device.substr(5);
    if (type == "f32") options.dtype = DType::F32;
    else if (type == "f16") options.dtype = DType::F16;
    else if (type != "bf16") fail("--device ", device, ": the weight type after \"cuda:\" must be bf16, f16 or f32");
    const int devices = cuda_device_count();
    if (devices == 0) fail("--device ", device, ": no CUDA device visible (cudaGetDeviceCount found none)");
    options.tp_transport = flags.tp_transport;
    if (world) {
      // rank r on device r % devices: one GPU each where there are enough, else ranks share
      // (the transport then goes through host memory: parallel/device_transport.h)
      options.device = world->rank() % devices;
      options.communicator = world;
    }
    ProgressLine progress("uploading weights");
    options.on_load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    std::unique_ptr<CudaBackend> cuda = make_cuda_backend(model, options);
    const std::string transport = cuda->stats().tp_transport;
    backend = std::move(cuda);
    if (world) backend = join_tensor_parallel_group(std::move(backend), *world, model, flags, transport);
#else
    fail("--device ", device, ": journey was built without CUDA (JOURNEY_CUDA=OFF); rebuild with -DJOURNEY_CUDA=ON");
#endif
  } else {
    fail("--device: expected reference, cpu, cuda, cuda:bf16, cuda:f16 or cuda:f32, found \"", device, "\"");
  }
  if (info) {
    info->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    info->resident_bytes = process_memory().resident;
    for (const FileRole& f : model.files)
      if (f.role == "weights") info->file_bytes += int64_t(f.bytes);
  }
  return backend;
}

const char* device_flag_help() {
#if defined(JOURNEY_HAVE_CUDA)
  return "where to run: cpu (fast, the default), reference (the literal path the chapters teach), cuda (bf16 "
         "weights on GPU 0), cuda:f16 or cuda:f32";
#else
  return "where to run: cpu (fast, the default) or reference (the literal path the chapters teach); this build has "
         "no CUDA (cuda needs -DJOURNEY_CUDA=ON)";
#endif
}

}  // namespace journey::cli
