// Chapter 14 — Tensor parallelism: one model split over two processes.
//
//   ./build/chapters/ch14_tensor_parallel [MODEL]
//
// Prints what each of 2 ranks holds (parallel/shard.h), runs the prompt greedily in one process,
// then starts itself under `mpirun -np 2` (the same library calls `journey generate
// --tensor-parallel 2` makes: a cpu backend per rank holding its shard, rank 0 driving the
// group through parallel/tensor_parallel.h), shows where in layer 0's stages the two all-reduces
// fall (each rank's partial sum recorded just before each, its norm beside it), and checks that the two runs chose the same tokens with the same logits up to the order of
// the sums. Exit 77 (skipped) when mpirun is missing.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "core/numeric.h"
#include "cpu/cpu_backend.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"
#include "parallel/tensor_parallel.h"
#include "text/tokenizer.h"
#include "trace/sink.h"
#include "trace/stages.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

constexpr int kRanks = 2;
constexpr int kNewTokens = 12;

// Greedy decoding on any backend; returns the tokens and the logits of the prefill's last row and
// of every decode step ([steps][V]).
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Greedy run_greedy(Backend& backend, const std::vector<int32_t>& prompt, TraceSink* first_step_sink = nullptr) {
  backend.allocate_kv_cache(8, 16);
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};  // [8] blocks of 16 positions
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, false});
  Greedy g;
  int64_t position = int64_t(prompt.size());
  for (int step = 0; step <= kNewTokens; ++step) {
    const ForwardOutput out = backend.forward(batch, step == 0 ? first_step_sink : nullptr);
    const float* row = out.last_row(0);
    g.logits.emplace_back(row, row + out.vocab_size);
    const int32_t next = int32_t(std::max_element(row, row + out.vocab_size) - row);
    g.tokens.push_back(next);
    batch.sequences[0] = {0, {next}, position++, table, false};
  }
  return g;
}

const char* const kPromptText = "Once upon a time";

// The prompt's ids as `journey generate` makes them (BOS first); the group reads the same ids.
std::vector<int32_t> encode_prompt(const fs::path& model_path) {
  const std::vector<int> ids = load_tokenizer(model_path)->encode(kPromptText, /*add_special=*/true, /*parse_special=*/false);
  return {ids.begin(), ids.end()};
}

// A communicator that notes each all-reduce in a log before passing it on (the chapter's window
// onto the forward pass: which stage came just before each collective).
class LoggingCommunicator final : public Communicator {
 public:
  LoggingCommunicator(Communicator& inner, std::vector<std::string>& log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string transport() const override { return inner_.transport(); }
  void all_reduce_sum(float* data, int64_t n) override {
    if (logging) log_.push_back(cat("      >>> all-reduce: sum ", n, " floats over the ", size(), " ranks"));
    inner_.all_reduce_sum(data, n);
  }
  void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols) override {
    if (logging) log_.push_back(cat("      >>> gather: ", rows, " x ", cols, " logits of each rank to rank 0"));
    logging = false;  // the step's last collective (a follower records no logits after it)
    inner_.gather_columns(out, mine, rows, cols);
  }
  void broadcast(void* bytes, int64_t n) override { inner_.broadcast(bytes, n); }
  [[noreturn]] void abort(int status) override {
    inner_.abort(status);
    std::abort();  // (not reached: the inner abort does not return, but the compiler cannot see through the virtual call)
  }
  bool logging = false;

 private:
  Communicator& inner_;
  std::vector<std::string>& log_;
};

// Records the names and shapes of layer 0's stages (and the logits) into the same log; beside each
// rank's share of a sum (attn_out_partial, ffn_out_partial) and the all-reduced sum, its norm.
class StageLog final : public TraceSink {
 public:
  StageLog(std::vector<std::string>& log, LoggingCommunicator& comm) : log_(log), comm_(comm) {}
  bool wants(Stage stage, int layer) const override {
    const bool in_view = layer == 0 || stage == Stage::logits_partial || stage == Stage::logits;
    comm_.logging = in_view || layer == -1;  // collectives of layer 0 and the LM head only
    return in_view;
  }
  void record(Stage stage, int layer, const TraceTensor& t) override {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
    std::string norm;
    if (stage == Stage::attn_out_partial || stage == Stage::attn_out || stage == Stage::ffn_out_partial ||
        stage == Stage::ffn_out) {
      double sum = 0;
      for (float v : t.data) sum += double(v) * double(v);
      char text[48];
      std::snprintf(text, sizeof text, "   |x| = %.4f%s", std::sqrt(sum),
                    stage == Stage::attn_out_partial || stage == Stage::ffn_out_partial ? "  (this rank's share)" : "");
      norm = text;
    }
    log_.push_back(cat("      ", layer >= 0 ? "L0." : "", stage_name(stage), " [", shape, "]", norm));
    if (stage == Stage::layer_out || stage == Stage::logits) comm_.logging = false;  // until the next wants()
  }

 private:
  std::vector<std::string>& log_;
  LoggingCommunicator& comm_;
};

void write_floats(std::ofstream& out, const std::vector<float>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

// One rank of the group (this program started by mpirun): rank 0 drives, the other follows. Each
// writes its layer-0 log to OUT.rank<r>.txt; rank 0 also writes the tokens and logits to OUT.bin.
int group_main(const fs::path& model_path, const std::string& out) {
  Communicator& world = mpi_world();
  std::vector<std::string> log;
  LoggingCommunicator comm(world, log);
  const LoadedModel model = load_model(model_path);
  auto shard = make_cpu_backend(model, CpuOptions{.threads = 1, .communicator = &comm});
  StageLog stages(log, comm);
  if (world.rank() == 0) {
    Greedy g;
    {
      auto group = make_tensor_parallel_backend(std::move(shard), comm);
      g = run_greedy(*group, encode_prompt(model_path), &stages);
    }
    std::ofstream bin(out + ".bin", std::ios::binary);
    bin.write(reinterpret_cast<const char*>(g.tokens.data()), std::streamsize(g.tokens.size() * sizeof(int32_t)));
    for (const auto& row : g.logits) write_floats(bin, row);
  } else {
    run_tensor_parallel_follower(*shard, comm, [&](const ForwardBatch&, int64_t step) -> TraceSink* {
      return step == 0 ? &stages : nullptr;
    });
  }
  std::ofstream text(out + ".rank" + std::to_string(world.rank()) + ".txt");
  for (const std::string& line : log) text << line << "\n";
  return 0;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "--group") return group_main(argv[3], argv[2]);  // a rank, under mpirun
    const fs::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
    if (!mpi_compiled_in()) {
      std::printf("skipped: this build has no MPI (find_package(MPI) found none); install libopenmpi-dev and configure again\n");
      return 77;
    }
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
      std::printf("skipped: mpirun not found; install Open MPI (apt install openmpi-bin libopenmpi-dev, as "
                  "scripts/install-deps.sh does)\n");
      return 77;
    }
    const LoadedModel model = load_model(model_path);
    ModelConfig c = model.config;
    c.head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads;
    const int64_t E = c.hidden_size, D = c.head_dim;

    std::printf("1. What each of %d ranks holds (%s: %lld layers, hidden %lld, %lld heads / %lld KV heads of %lld, "
                "FFN %lld, vocabulary %lld)\n\n",
                kRanks, model_path.filename().c_str(), (long long)c.num_layers, (long long)E, (long long)c.num_heads,
                (long long)c.num_kv_heads, (long long)D, (long long)c.intermediate_size, (long long)c.vocab_size);
    for (int r = 0; r < kRanks; ++r) {
      const TensorParallelShard s = plan_shard(c, r, kRanks, model_path.string());
      std::printf("   %s\n", s.describe().c_str());
      std::printf("      q_proj [%lld, %lld]  k_proj, v_proj [%lld, %lld]  o_proj [%lld, %lld]   (whole: [%lld, %lld], "
                  "[%lld, %lld], [%lld, %lld])\n",
                  (long long)(s.heads * D), (long long)E, (long long)(s.kv_heads * D), (long long)E, (long long)E,
                  (long long)(s.heads * D), (long long)c.q_dim(), (long long)E, (long long)c.kv_dim(), (long long)E,
                  (long long)E, (long long)c.q_dim());
      std::printf("      gate_proj, up_proj [%lld, %lld]  down_proj [%lld, %lld]  lm_head [%lld, %lld]   (whole: [%lld, %lld], "
                  "[%lld, %lld], [%lld, %lld])\n",
                  (long long)s.ffn_columns, (long long)E, (long long)E, (long long)s.ffn_columns, (long long)s.vocab_rows,
                  (long long)E, (long long)c.intermediate_size, (long long)E, (long long)E, (long long)c.intermediate_size,
                  (long long)c.vocab_size, (long long)E);
      std::printf("      KV cache per token and layer: %lld floats (whole model: %lld)\n", (long long)(2 * s.kv_heads * D),
                  (long long)(2 * c.kv_dim()));
    }
    std::printf("\n   per token: 2 all-reduces per layer x %lld layers = %lld, each of %lld floats (%lld bytes): "
                "%lld bytes per token\n\n",
                (long long)c.num_layers, (long long)(2 * c.num_layers), (long long)E, (long long)(4 * E),
                (long long)(2 * c.num_layers * 4 * E));

    // 2. one process
    auto single = make_cpu_backend(model, CpuOptions{.threads = 1});
    const std::vector<int32_t> prompt = encode_prompt(model_path);
    const Greedy one = run_greedy(*single, prompt);
    std::printf("2. One process: \"%s\" (%zu tokens with BOS), then %d greedy tokens:\n  ", kPromptText, prompt.size(),
                kNewTokens + 1);
    for (int32_t t : one.tokens) std::printf(" %d", t);
    const auto tokenizer = load_tokenizer(model_path);
    std::printf("\n   \"%s%s\"\n\n", kPromptText, tokenizer->decode(std::vector<int>(one.tokens.begin(), one.tokens.end())).c_str());

    // 3. two processes: this program again, under mpirun
    const fs::path work = fs::temp_directory_path() / ("journey-ch14-" + std::to_string(getpid()));
    fs::create_directories(work);
    const std::string out = (work / "run").string();
    const std::string root = getuid() == 0 ? " --allow-run-as-root" : "";
    // (no single-copy transport: a container without CAP_SYS_PTRACE refuses it, and the messages are small)
    const std::string command = "OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --oversubscribe --bind-to none" + root + " -np 2 '" +
                                fs::canonical("/proc/self/exe").string() + "' --group '" + out + "' '" + model_path.string() + "'";
    std::printf("3. Two processes: mpirun -np 2 ch14_tensor_parallel --group ...\n");
    std::fflush(stdout);
    if (std::system(command.c_str()) != 0) fail("the 2-rank run failed: ", command);
    for (int r = 0; r < kRanks; ++r) {
      std::printf("\n   rank %d, the first step (the prompt), layer 0 and the LM head in the order they run:\n%s", r,
                  read_text(out + ".rank" + std::to_string(r) + ".txt").c_str());
    }
    std::ifstream bin(out + ".bin", std::ios::binary);
    Greedy two;
    two.tokens.resize(one.tokens.size());
    bin.read(reinterpret_cast<char*>(two.tokens.data()), std::streamsize(two.tokens.size() * sizeof(int32_t)));
    for (size_t i = 0; i < one.logits.size(); ++i) {
      std::vector<float> row(one.logits[i].size());
      bin.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * sizeof(float)));
      two.logits.push_back(std::move(row));
    }
    fs::remove_all(work);
    if (!bin) fail("the 2-rank run wrote fewer logits than expected");

    // 4. the check
    std::printf("\n4. Two processes: the same %d tokens:", kNewTokens + 1);
    for (int32_t t : two.tokens) std::printf(" %d", t);
    double worst = 0;
    for (size_t i = 0; i < one.logits.size(); ++i) worst = std::max(worst, nmse(two.logits[i], one.logits[i]));
    const bool same_tokens = two.tokens == one.tokens, close = worst <= 1e-10;
    std::printf("\n   tokens equal: %s; logits NMSE against one process below 1e-10 at every step: %s\n",
                same_tokens ? "yes" : "NO", close ? "yes" : "NO");
    std::printf("   (the same weights and kernels: only the order of the sums differs, each rank adding its own heads\n"
                "    and FFN columns before the all-reduce adds the ranks' partial sums)\n");
    return same_tokens && close ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ch14_tensor_parallel: error: %s\n", e.what());
    return 1;
  }
}
