// Loading without copies, checked on real files: a model written to disk (a Hugging Face
// directory with an f32 or f16 model.safetensors of ~60 MB, and a Q8_0 GGUF made from it by
// `journey quantize`'s code) is loaded by the fast CPU backend, and this process's resident memory
// (VmRSS, /proc/self/status) grows by at most the file's size x 1.1 (+ the KV cache, allocated
// after the measurement here). A memory bound, not a timing: asserted. In place (--mmap), the
// growth is the file's pages (RssFile); copied (--no-mmap, and the default where Linux has
// transparent huge pages) it is anonymous memory in one WeightArena and the file's pages are given
// back; per-matrix 2 MiB allocations would have added ~1 MiB per matrix.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "assets/model.h"
#include "assets/safetensors.h"
#include "cpu/cpu_backend.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/process_memory.h"
#include "quant/quantize_model.h"
#include "reference/random_model.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

// A llama of ~15M parameters (E 512, F 1408, 4 layers, V 4096): big enough that the process's own
// few MB do not hide a copy of the weights, small enough for a test.
fs::path write_model(const fs::path& dir, DType dtype) {
  ModelConfig c = testmodel::tiny_config("llama");
  c.hidden_size = 512, c.intermediate_size = 1408, c.num_layers = 4, c.num_heads = 8, c.num_kv_heads = 4;
  c.head_dim = 64, c.vocab_size = 4096, c.max_position_embeddings = 256, c.tie_word_embeddings = false;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 256, "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
  const testmodel::Values values = testmodel::random_values(c, 5);
  std::vector<std::vector<uint8_t>> storage;  // the bytes each TensorRef points at
  std::vector<TensorRef> tensors;
  for (const auto& [shape, v] : values) {
    TensorRef t;
    t.name = shape.name;
    t.shape = shape.shape;
    t.dtype = shape.is_norm ? DType::F32 : dtype;
    storage.emplace_back(size_t(dtype_bytes_for(t.dtype, int64_t(v.size()))));
    for (size_t i = 0; i < v.size(); ++i) {
      if (t.dtype == DType::F32) std::memcpy(storage.back().data() + 4 * i, &v[i], 4);
      else {
        const uint16_t h = f32_to_f16(v[i]);
        std::memcpy(storage.back().data() + 2 * i, &h, 2);
      }
    }
    t.data = reinterpret_cast<const std::byte*>(storage.back().data());
    t.nbytes = storage.back().size();
    tensors.push_back(std::move(t));
  }
  write_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

// A GGUF of the f32 model at `f32_dir` in `type` (q8_0, q4_0, ...), written by journey quantize's code
// (it needs a vocabulary: stories260K's tokenizer, padded to the config's vocabulary).
fs::path write_quantized(const fs::path& f32_dir, const fs::path& out, const std::string& type) {
  if (!fs::exists(f32_dir / "tokenizer.model"))
    fs::copy_file(fs::path(JOURNEY_SOURCE_DIR) / "data/stories260K/tokenizer.model", f32_dir / "tokenizer.model");
  quant::QuantizeOptions options;
  options.input = f32_dir;
  options.output = out;
  options.type = type;
  options.threads = 2;
  quant::quantize_model(options);
  return out;
}

int64_t weight_file_bytes(const LoadedModel& model) {
  int64_t bytes = 0;
  for (const FileRole& f : model.files)
    if (f.role == "weights") bytes += int64_t(f.bytes);
  return bytes;
}

struct Growth {
  int64_t resident = 0, file_pages = 0, anonymous = 0, file_bytes = 0;
  CpuLoadReport report;
};

// Resident memory before and after loading `path` into the fast backend (the LoadedModel released,
// as the CLI does once the backend is built).
Growth load_and_measure(const fs::path& path, WeightPlacement placement, std::unique_ptr<Backend>& keep) {
  const ProcessMemory before = process_memory();
  Growth g;
  {
    const LoadedModel model = load_model(path);
    g.file_bytes = weight_file_bytes(model);
    keep = make_cpu_backend(model, {.threads = 2, .weights = placement, .report = &g.report});
  }
  const ProcessMemory after = process_memory();
  g.resident = after.resident - before.resident;
  g.file_pages = after.resident_file - before.resident_file;
  g.anonymous = after.resident_anon - before.resident_anon;
  return g;
}

}  // namespace

TEST_CASE("resident memory after loading <= the file's size x 1.1, in place and copied, f32, f16 and q8_0") {
  if (process_memory().resident < 0) {
    MESSAGE("no /proc/self/status here: resident memory cannot be measured");
    return;
  }
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "resident-memory";
  fs::remove_all(work);
  const fs::path f32 = write_model(work / "f32", DType::F32);
  const fs::path f16 = write_model(work / "f16", DType::F16);
  const fs::path q8_0 = write_quantized(f32, work / "q8_0.gguf", "q8_0");
  for (const fs::path& path : {f32, f16, q8_0}) {
    for (WeightPlacement asked : {WeightPlacement::InPlace, WeightPlacement::Copy, WeightPlacement::Auto}) {
      CAPTURE(path.string()); CAPTURE(weight_placement_name(asked));
      std::unique_ptr<Backend> backend;
      const Growth g = load_and_measure(path, asked, backend);
      // Auto copies exactly where 2 MiB pages can be had
      const WeightPlacement expected = asked != WeightPlacement::Auto       ? asked
                                       : transparent_huge_pages_available() ? WeightPlacement::Copy
                                                                            : WeightPlacement::InPlace;
      CHECK(g.report.placement == expected);
      const bool copy_weights = g.report.placement == WeightPlacement::Copy;
      const std::string label = path.filename().string() + " " + weight_placement_name(asked) + " -> " +
                                weight_placement_name(g.report.placement);
      MESSAGE(label << ": file " << g.file_bytes
                                       << " B, resident +" << g.resident << " B (file pages +" << g.file_pages
                                       << ", anonymous +" << g.anonymous << ")");
      CHECK(g.file_bytes > 15'000'000);  // not a vacuous bound (q8_0: 16 MB, f16: 30 MB, f32: 61 MB)
      CHECK(g.resident <= int64_t(1.1 * double(g.file_bytes)));
      if (copy_weights) {
        CHECK(g.report.bytes_in_place == 0);
        // the file's pages were given back after the copy (the copy itself may reuse memory the
        // allocator already holds, so its growth is not checked from below)
        CHECK(g.file_pages < g.file_bytes / 20);
      } else {
        CHECK(g.report.bytes_copied < g.file_bytes / 100);  // only norms widened to f32
        CHECK(g.file_pages >= int64_t(0.9 * double(g.file_bytes)));  // the weights are the file's pages, brought in
      }
      // and the backend runs from them
      backend->allocate_kv_cache(2, 16);
      ForwardBatch batch;
      batch.sequences.push_back({0, {1, 2, 3}, 0, {0, 1}, false});
      const ForwardOutput out = backend->forward(batch);
      CHECK(std::isfinite(out.logits[0]));
    }
  }
}

// Copying gives the source's pages back (MADV_DONTNEED) only where they are a file's: on owned
// storage (a model built in memory, AWQ weights converted at load) that would zero the weights
// under any other backend built from the same model. Every tensor's bytes are the same after
// building a copying backend as before, from a file and from memory.
TEST_CASE("copying the weights leaves the model's own tensors intact, file-backed and owned") {
  auto checksums = [](const LoadedModel& model) {
    std::vector<uint64_t> sums;
    for (const auto& [name, t] : model.weights.all()) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the tensor's bytes
      for (size_t i = 0; i < t.nbytes; ++i) h = (h ^ uint64_t(t.data[i])) * 1099511628211ull;
      sums.push_back(h);
    }
    return sums;
  };
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "weights-intact";
  fs::remove_all(work);
  const LoadedModel from_file = load_model(write_model(work / "f16", DType::F16));
  const LoadedModel in_memory = testmodel::random_model("llama", 7);
  for (const LoadedModel* model : {&from_file, &in_memory}) {
    const std::vector<uint64_t> before = checksums(*model);
    CpuLoadReport report;
    const std::unique_ptr<Backend> backend =
        make_cpu_backend(*model, {.threads = 2, .weights = WeightPlacement::Copy, .report = &report});
    CHECK(report.bytes_copied > 0);
    CHECK(report.bytes_in_place == 0);
    CHECK(checksums(*model) == before);
  }
}

// Q4_0, Q8_0 and Q4_K linear weights copied at load are regrouped by 8 rows for the one-token decode
// dot (kernels.h, block_q4_0x8, ..) where the CPU has it for the type (AVX512-VNNI: all three;
// AVX2: Q4_0 and Q4_K, in their own layout); every product — one token, a
// few, the token lanes of a larger batch, a prefill — then gives exactly what it gives on the rows
// as stored: the same logits, bit for bit. So do the Q8_0 block sums of batched decode
// (CpuOptions::q8_0_block_sums, kernels::dot_tokens_q8_0_sums), made for Q8_0 matrices as stored.
TEST_CASE("Q4_0, Q8_0 and Q4_K weights regrouped by 8 rows at load give the logits of the rows as stored, bit for bit") {
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "row-groups";
  fs::remove_all(work);
  const fs::path f32 = write_model(work / "f32", DType::F32);
  for (const std::string type : {"q4_0", "q8_0", "q4_k"}) {
    CAPTURE(type);
    const LoadedModel model = load_model(write_quantized(f32, work / (type + ".gguf"), type));
    const cpu::kernels::Isa isa = cpu::kernels::best_isa();
    const bool has_kernel = cpu::kernels::table(isa).dot_row_groups != nullptr;
    if (!has_kernel) MESSAGE("this CPU has no dot_row_groups (AVX512-VNNI, AVX2): nothing is regrouped, checked below");

    struct Run {
      CpuLoadReport report;
      std::vector<float> logits;  // a prefill of 20 tokens (last row), 3 one-token steps, steps of 2 and 7 sequences
    };
    auto run = [&](WeightPlacement placement, std::vector<DType> row_groups, bool block_sums = true) {
      Run r;
      const std::unique_ptr<Backend> backend =
          make_cpu_backend(model, {.threads = 2, .weights = placement, .row_groups = row_groups,
                                   .q8_0_block_sums = block_sums, .report = &r.report});
      backend->allocate_kv_cache(8, 16);
      auto keep = [&](const ForwardOutput& out) {
        r.logits.insert(r.logits.end(), out.logits.begin(), out.logits.end());
      };
      std::vector<int32_t> prompt;
      for (int32_t t = 0; t < 20; ++t) prompt.push_back(3 + 37 * t % 4000);
      ForwardBatch prefill;
      prefill.sequences.push_back({0, prompt, 0, {0, 1}, false});
      keep(backend->forward(prefill));
      for (int32_t step = 0; step < 3; ++step) {
        ForwardBatch one;
        one.sequences.push_back({0, {100 + step}, 20 + step, {0, 1}, false});
        keep(backend->forward(one));
      }
      ForwardBatch two;
      two.sequences.push_back({0, {7}, 23, {0, 1}, false});
      two.sequences.push_back({1, {9}, 0, {2}, false});
      keep(backend->forward(two));
      ForwardBatch seven;  // (the token-lane kernels from 6 tokens)
      for (int32_t s = 0; s < 7; ++s)
        seven.sequences.push_back({s, {11 + s}, s < 2 ? (s == 0 ? 24 : 1) : 0, {s == 0 ? 0 : s + 1}, false});
      seven.sequences[0].block_table = {0, 1};
      keep(backend->forward(seven));
      return r;
    };
    const std::vector<DType> every = {DType::Q4_0, DType::Q8_0, DType::Q4_K};  // (the default groups Q4_0 and Q4_K)
    const Run grouped = run(WeightPlacement::Copy, every);
    const Run stored = run(WeightPlacement::Copy, {});
    const Run in_place = run(WeightPlacement::InPlace, every);
    const Run no_sums = run(WeightPlacement::Copy, {}, false);
    // every linear weight of a type with row groups is regrouped (the embedding is read by rows and
    // kept as stored): in a q4_0 file the layers' 7 matrices (its output layer is Q6_K), in a q8_0
    // file those and the output layer, in a q4_k file the Q4_K ones (some v and down matrices and
    // the output layer are of other types there, by the mix rules)
    // Q8_0's block sums: 2 bytes per block of every linear Q8_0 matrix as stored (the Q4_K_M mix holds
    // Q8_0 matrices too, where a row is not a multiple of 256); those of fewer than 8 rows stay ungrouped
    // (groupable: of a type with groups on some CPU; regrouped: on this one)
    int64_t groupable = 0, regrouped = 0, output_groupable = 0, sums_bytes = 0, q8_0_ungroupable = 0;
    for (const auto& [name, t] : model.weights.all())
      if (t.shape.size() == 2 && name != "model.embed_tokens.weight" && cpu::kernels::has_row_groups(t.dtype)) {
        groupable += int64_t(t.nbytes);
        if (has_kernel && cpu::kernels::has_row_group_dot(t.dtype, isa)) regrouped += int64_t(t.nbytes);
        if (name == "lm_head.weight") output_groupable = int64_t(t.nbytes);
        if (t.dtype != DType::Q8_0) continue;
        const int64_t sums = int64_t(t.nbytes) / dtype_block_bytes(DType::Q8_0) * int64_t(sizeof(int16_t));
        sums_bytes += sums;
        if (t.shape[0] % cpu::kernels::kGroupRows != 0) q8_0_ungroupable += sums;
      }
    CHECK(groupable >= 4 * dtype_bytes_for(DType::Q4_0, 2 * 512 * 512));  // q and o at least, in each layer
    CHECK((output_groupable > 0) == (type == "q8_0"));
    if (type == "q4_0") CHECK((regrouped >= 4 * dtype_bytes_for(DType::Q4_0, 2 * 512 * 512)) == has_kernel);
    CHECK(grouped.report.bytes_grouped == regrouped);
    CHECK(stored.report.bytes_grouped == 0);
    CHECK(in_place.report.bytes_grouped == 0);  // --mmap: the file's bytes as they are
    REQUIRE(grouped.logits.size() == stored.logits.size());
    CHECK(grouped.logits.size() == 13 * 4096);  // the last row of each sequence per step
    CHECK(std::memcmp(grouped.logits.data(), stored.logits.data(), grouped.logits.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(in_place.logits.data(), stored.logits.data(), stored.logits.size() * sizeof(float)) == 0);
    // the block sums, made where the CPU has the kernel (copied or in place, not grouped); the logits
    // those give are the logits without them
    const bool has_sums_kernel = cpu::kernels::table(cpu::kernels::best_isa()).dot_tokens_q8_0_sums != nullptr;
    if (type == "q8_0") CHECK(sums_bytes == groupable / dtype_block_bytes(DType::Q8_0) * int64_t(sizeof(int16_t)));
    CHECK(stored.report.bytes_block_sums == (has_sums_kernel ? sums_bytes : 0));
    CHECK(in_place.report.bytes_block_sums == (has_sums_kernel ? sums_bytes : 0));
    const bool q8_0_grouped = cpu::kernels::has_row_group_dot(DType::Q8_0, isa);
    CHECK(grouped.report.bytes_block_sums == (q8_0_grouped ? q8_0_ungroupable : stored.report.bytes_block_sums));  // grouped: none
    CHECK(no_sums.report.bytes_block_sums == 0);
    CHECK(std::memcmp(no_sums.logits.data(), stored.logits.data(), stored.logits.size() * sizeof(float)) == 0);
  }
}
