// Chapter 13 — quantization: what a block holds, what a model weighs in each type, where the error of
// a quantized model grows layer by layer, and what it costs in perplexity and KL divergence.
//
// Runs on the shipped stories260K: writes it as BF16, Q8_0, Q4_0 and Q4_K_M GGUF files with journey
// quantize's library (quant/quantize_model.h) and as AWQ / RTN INT4 checkpoints (quant/awq_model.h, on
// calibration traces it records itself), prints a Q4_0 block and a Q4_K block byte by byte, the memory
// table of Llama-2 7B / 70B from their config.json alone, the stage-by-stage comparison of one prompt
// through every type (trace/compare.h, what `journey-trace diff` prints), and perplexity / KL over the
// shipped text (engine/perplexity.h, what `journey perplexity` prints), and what the fast CPU backend
// (`--device cpu`, cpu/cpu_backend.h) holds of each file and reads per decoded token.
//
// Its README shows this output, checked by the chapter's ctest (tools/book/update_outputs.py; decimal
// numbers within 2 %, since f32 sums may round differently on other CPUs; words and integers exactly).
//
// `ch13_quantization --measure [--model PATH]...` times the types instead: each file loaded by the fast
// CPU backend and run through `journey bench`'s measurement (cpu/bench.h): resident memory, prefill and
// decode tok/s, and decode against the bandwidth ceiling of the bytes it reads per token. Without
// --model it writes stories260K in F32, BF16, Q8_0, Q4_0 and Q4_K_M; with --model (repeatable) it
// measures the files given, e.g. a TinyLlama-1.1B-shaped model in each type (README, section 6). Only
// the columns computed from the files are checked; the timings are masked (everything after a '|').
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/untrusted.h"
#include "assets/gguf.h"
#include "assets/hf_config.h"
#include "assets/model.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "core/threads.h"
#include "cpu/bench.h"
#include "cpu/cpu_backend.h"
#include "cpu/kernels.h"
#include "cpu/process_memory.h"
#include "engine/perplexity.h"
#include "engine/traced_generation.h"
#include "quant/awq_model.h"
#include "quant/awq_search.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "quant/quantize_model.h"
#include "reference/reference_backend.h"
#include "text/tokenizer.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"
#include "trace/filters.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = JOURNEY_SOURCE_DIR;
const fs::path kModel = kSource / "data/stories260K";

// ---- 1. blocks -------------------------------------------------------------------------------------

void show_q4_0_block(const fs::path& q4_0_file, const LoadedModel& f32) {
  const GgufFile g = GgufFile::open(q4_0_file);
  const GgufTensorInfo* info = nullptr;
  for (const GgufTensorInfo& t : g.tensors())
    if (t.name == "blk.0.ffn_gate.weight") info = &t;
  if (!info || info->dtype != DType::Q4_0) fail(q4_0_file.string(), ": no Q4_0 blk.0.ffn_gate.weight");
  const auto* block = reinterpret_cast<const quant::block_q4_0*>(g.tensor_data(*info));
  const std::vector<float> original = f32.weights.get("model.layers.0.mlp.gate_proj.weight").to_f32();  // [172, 64]
  float decoded[32];
  quant::dequantize_row_q4_0(block, decoded, 32);
  const auto* bytes = reinterpret_cast<const uint8_t*>(block);

  std::printf("1a. One Q4_0 block: blk.0.ffn_gate.weight (model.layers.0.mlp.gate_proj), row 0, weights 0-31\n");
  std::printf("    18 bytes:");
  for (int i = 0; i < 18; ++i) std::printf(" %02x", bytes[i]);
  const float d = f16_to_f32(block->d);
  std::printf("\n    bytes 0-1  d = f16 0x%04x = %.6f (the scale; weight = d * (q - 8), q = 0..15)\n", block->d, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = block->qs[j] & 0xF, hi = block->qs[j] >> 4;
    std::printf("    byte %2d  0x%02x  lo %2d -> w[%2d] = %+.4f (f32 %+.4f)   hi %2d -> w[%2d] = %+.4f (f32 %+.4f)\n", 2 + j,
        block->qs[j], lo, j, decoded[j], original[size_t(j)], hi, j + 16, decoded[j + 16], original[size_t(j + 16)]);
  }
  std::printf("\n");
}

void show_q4_k_block(const LoadedModel& f32) {
  // stories260K's rows are 64 long, so no GGUF file of it holds a Q4_K block (256 weights per row
  // are needed); quantize 256 consecutive weights — rows 0-3 of the same matrix — as one.
  const std::vector<float> original = f32.weights.get("model.layers.0.mlp.gate_proj.weight").to_f32();  // [172, 64]
  quant::block_q4_k block;
  quant::quantize_row_q4_k(original.data(), &block, 256);
  float decoded[256];
  quant::dequantize_row_q4_k(&block, decoded, 256);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&block);
  const float d = f16_to_f32(block.d), dmin = f16_to_f32(block.dmin);

  std::printf("1b. One Q4_K super-block: 256 weights (rows 0-3 of the same matrix) through quantize_row_q4_k, 144 bytes\n");
  std::printf("    bytes 0-1   d    = f16 0x%04x = %.6f (scale of the group scales)\n", block.d, d);
  std::printf("    bytes 2-3   dmin = f16 0x%04x = %.6f (scale of the group minimums)\n", block.dmin, dmin);
  std::printf("    bytes 4-15  scales:");
  for (int i = 0; i < 12; ++i) std::printf(" %02x", block.scales[i]);
  std::printf("\n    group  weights   sc  m   d*sc      dmin*m    (6-bit pairs unpacked by scale_min_k4; w = d*sc*q - dmin*m)\n");
  for (int grp = 0; grp < 8; ++grp) {
    uint8_t sc = 0, m = 0;
    quant::scale_min_k4(grp, block.scales, &sc, &m);
    double worst = 0;
    for (int i = 32 * grp; i < 32 * grp + 32; ++i) worst = std::max(worst, double(std::abs(decoded[i] - original[size_t(i)])));
    std::printf("    %d      %3d-%3d   %2d  %2d  %.6f  %.6f  max |error| %.4f\n", grp, 32 * grp, 32 * grp + 31, sc, m, d * sc, dmin * m, worst);
  }
  std::printf("    bytes 16-143 qs (byte 16 + 32c + l: lo nibble = weight 64c + l, hi nibble = weight 64c + 32 + l):\n");
  for (int row = 0; row < 8; ++row) {
    std::printf("     ");
    for (int i = 0; i < 16; ++i) std::printf(" %02x", bytes[16 + 16 * row + i]);
    std::printf("\n");
  }
  uint8_t sc = 0, m = 0;
  quant::scale_min_k4(0, block.scales, &sc, &m);
  std::printf("    group 0 decoded (q -> d*%d*q - dmin*%d, f32 original):\n", sc, m);
  for (int i = 0; i < 32; i += 4) {
    std::printf("     ");
    for (int k = i; k < i + 4; ++k) std::printf("  %2d -> %+.4f (%+.4f)", block.qs[k] & 0xF, decoded[k], original[size_t(k)]);
    std::printf("\n");
  }
  std::printf("\n");
}

// ---- 2. memory from config.json alone -------------------------------------------------------------

void memory_table() {
  std::printf("2. What a model weighs, from config.json alone (weights only; GB = 10^9 bytes, bits per weight in brackets)\n");
  std::printf("    %-14s %14s %15s %15s %15s %15s %15s %15s\n", "model", "parameters", "F32", "F16/BF16", "Q8_0", "Q4_K_M", "Q4_0",
      "AWQ INT4 g128");
  const std::vector<std::pair<std::string, fs::path>> models = {
      {"stories260K", kModel / "config.json"},
      {"Llama-2-7B", kSource / "chapters/ch13_quantization/configs/llama-2-7b/config.json"},
      {"Llama-2-70B", kSource / "chapters/ch13_quantization/configs/llama-2-70b/config.json"}};
  for (const auto& [name, path] : models) {
    const ModelConfig c = read_hf_config(path);
    uint64_t params = 0;
    for (const WeightSpec& s : model_weights(c)) {
      if (s.optional && c.tie_word_embeddings) continue;
      uint64_t n = 1;
      for (int64_t d : s.shape) n *= uint64_t(d);
      params += n;
    }
    auto cell = [&](uint64_t bytes) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g (%.2f)", double(bytes) / 1e9, 8.0 * double(bytes) / double(params));
      return std::string(text);
    };
    auto gguf_bytes = [&](const char* type) {
      uint64_t total = 0;
      for (const quant::PlannedTensor& t : quant::plan_quantized_model(c, type)) total += t.bytes;
      return total;
    };
    std::printf("    %-14s %14llu %15s %15s %15s %15s %15s %15s\n", name.c_str(), (unsigned long long)params,
        cell(gguf_bytes("f32")).c_str(), cell(gguf_bytes("f16")).c_str(), cell(gguf_bytes("q8_0")).c_str(),
        cell(gguf_bytes("q4_k_m")).c_str(), cell(gguf_bytes("q4_0")).c_str(), cell(quant::awq_checkpoint_bytes(c, 128)).c_str());
  }
  std::printf("\n");
}

// ---- 3. AWQ's search ------------------------------------------------------------------------------------

void show_awq_search(const quant::AwqQuantizeReport& r) {
  std::printf("3. AWQ on %lld calibration tokens (%zu traces of the F32 model, data/texts/calibration-original.txt), group 64:\n",
      (long long)r.calibration_tokens, r.calibration_sequences);
  std::printf("   the alpha of s = mean|x|^alpha that minimizes each block's output error (relative to the output's mean square)\n");
  std::printf("    layer  linears                error of    RTN        AWQ        alpha\n");
  double rtn = 0, awq = 0;
  for (size_t l = 0; l < r.layers.size(); ++l)
    for (const quant::AwqScaleSearch& s : r.layers[l]) {
      if (s.errors.empty()) continue;
      rtn += s.rtn_error / s.output_power;
      awq += s.awq_error / s.output_power;
      std::printf("    %zu      %-22s %-10s  %.3e  %.3e  %.2f%s\n", l, s.group.c_str(), s.error_of.c_str(), s.rtn_error / s.output_power,
          s.awq_error / s.output_power, s.alpha, s.skipped.empty() ? "" : "  (GQA: not scaled, plain RTN)");
    }
  std::printf("    sum    RTN %.4f, AWQ %.4f; gate/up/down stay F16 (172 outputs are not whole int32s of 8 nibbles,\n", rtn, awq);
  std::printf("           172 inputs not whole groups of 64)\n\n");
}

// ---- 4. one prompt through every type, compared stage by stage -----------------------------------------

void trace_prefill(const LoadedModel& model, const std::vector<int32_t>& tokens, const fs::path& dir) {
  fs::remove_all(dir);
  // q/k and their RoPE are left out: GGUF files keep Q/K rows in Meta's interleaved order, Hugging Face
  // checkpoints in half-split order, so those tensors are permutations of each other across formats
  const TraceFilters filters = parse_filters(
      "embeddings,attn_norm,v,attn_context,attn_out,resid_attn,ffn_norm,gate,up,act,ffn_out,layer_out,final_norm,logits", "",
      "", "");
  DumpSink sink(dir, filters);
  auto backend = make_reference_backend(model);
  const int64_t T = int64_t(tokens.size());
  backend->allocate_kv_cache((T + 15) / 16, 16);
  std::vector<int64_t> positions(static_cast<size_t>(T));  // [T]
  std::vector<int32_t> blocks;                             // [ceil(T / 16)]
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = t;
  for (int64_t b = 0; b < (T + 15) / 16; ++b) blocks.push_back(int32_t(b));
  sink.set_step(0, "prefill", positions);
  ForwardBatch batch;
  batch.sequences.push_back(SequenceInput{0, tokens, 0, blocks, /*all_logits=*/true});
  backend->forward(batch, &sink);
  Manifest& m = sink.manifest();  // what the dump is, for the journey-trace diff the output suggests
  m.generated_by_tool = "chapters/ch13_quantization";
  m.model = manifest_model(model.path, model.config);
  m.settings = backend_manifest_settings(*backend);
  sink.finish();
}

struct Variant {
  std::string name;
  fs::path path;
  std::string holds;  // what the file holds
};

void stage_by_stage(const std::vector<Variant>& variants, const std::vector<int32_t>& prompt, const fs::path& work) {
  std::printf("4. \"Once upon a time, there was a little girl named Lily.\" (%zu tokens) through every type, each dump compared with\n", prompt.size());
  std::printf("   the F32 one stage by stage (journey-trace diff): NMSE = sum (x - x_f32)^2 / sum x_f32^2, per stage\n");
  const fs::path f32_dump = work / "trace-F32";
  std::vector<ComparisonResult> results;
  for (const Variant& v : variants) {
    trace_prefill(load_model(v.path), prompt, work / ("trace-" + v.name));
    if (v.name != "F32") results.push_back(compare_dumps(work / ("trace-" + v.name), f32_dump));
  }
  std::printf("    %-16s", "stage");
  for (size_t i = 1; i < variants.size(); ++i) std::printf(" %12s", variants[i].name.c_str());
  std::printf("\n");
  const ComparisonResult& first = results.front();
  for (size_t row = 0; row < first.tensors.size(); ++row) {
    const TensorComparison& t = first.tensors[row];
    const bool shown = t.stage == "embeddings" || t.stage == "attn_out" || t.stage == "ffn_out" || t.stage == "layer_out" ||
                       t.stage == "logits";
    if (!shown) continue;
    std::printf("    %-16s", t.name.c_str());
    for (const ComparisonResult& r : results) {
      if (r.tensors[row].name != t.name) fail("the dumps list different tensors: ", r.tensors[row].name, " vs ", t.name);
      std::printf(" %12.3e", r.tensors[row].nmse);
    }
    std::printf("\n");
  }
  std::printf("    first stage beyond f32 tolerance:");
  for (size_t i = 0; i < results.size(); ++i)
    std::printf(" %s %s%s", variants[i + 1].name.c_str(), results[i].first() ? results[i].first()->name.c_str() : "none",
        i + 1 < results.size() ? "," : "\n");
  std::printf("    the dumps stay in $TMPDIR/journey-ch13: journey-trace diff $TMPDIR/journey-ch13/trace-Q4_K_M $TMPDIR/journey-ch13/trace-F32\n\n");
}

// ---- 5. perplexity and KL over the shipped text --------------------------------------------------------

void quality_table(const std::vector<Variant>& variants, const std::vector<int32_t>& tokens, const fs::path& work) {
  const LoadedModel f32 = load_model(kModel);
  PerplexityOptions options;
  options.context = 512;
  options.bos = tokens.front();
  const PerplexityWindows plan = plan_windows(int64_t(tokens.size()), options.context);
  {
    auto base = make_reference_backend(f32);
    LogProbFile save = LogProbFile::create(work / "f32.logprobs", plan, f32.config.vocab_size, tokens);
    options.save = &save;
    measure_perplexity(*base, tokens, options);
    options.save = nullptr;
  }
  std::printf("5. Perplexity of data/texts/tinystories-original.txt (%zu tokens, windows of %lld, the second half of each scored:\n",
      tokens.size(), (long long)plan.context);
  std::printf("   %lld tokens) and KL(F32 || type) per token, as `journey perplexity --kl-base` computes them\n", (long long)plan.scored_tokens());
  std::printf("    %-12s %-40s %9s %8s %9s %9s %8s\n", "type", "the file holds", "KiB", "PPL", "mean KL", "99% KL", "top-1");
  for (const Variant& v : variants) {
    LogProbFile base = LogProbFile::open(work / "f32.logprobs", plan, f32.config.vocab_size, tokens);
    options.base_file = &base;
    const LoadedModel m = load_model(v.path);
    auto backend = make_reference_backend(m);
    const PerplexityReport r = measure_perplexity(*backend, tokens, options);
    const fs::path file = fs::is_directory(v.path) ? v.path / "model.safetensors" : v.path;
    std::printf("    %-12s %-40s %9.1f %8.4f %9.5f %9.4f %7.2f%%\n", v.name.c_str(), v.holds.c_str(), double(fs::file_size(file)) / 1024,
        r.ppl, r.mean_kl, r.kl_p99, 100 * r.top1_agreement);
  }
  std::printf("\n");
}

// ---- 6. what the fast CPU backend holds and reads per token; --measure times it --------------------------

// A file as the fast CPU backend (`--device cpu`) loads it: what it holds and what a decode step reads,
// from the library's own accounting, and the backend itself, for timing.
struct CpuFootprint {
  std::string types;              // the loaded tensors' types (weight_type_summary)
  int64_t weights = 0;            // elements of the loaded tensors (the parameters)
  int64_t file_bytes = 0;         // the model's weight files
  int64_t held_bytes = 0;         // what make_cpu_backend keeps: matrices as stored, vectors in f32 (its CpuLoadReport)
  double read_bytes = 0;          // what one decode step reads (decode_bytes_per_token, cpu/bench.h)
  std::string prefill_path;       // the prefill's compute path on this CPU (prefill_path, cpu/bench.h)
  int64_t resident_added = -1;    // VmRSS after loading minus before (measured: never in checked output)
  std::unique_ptr<Backend> backend;
};

CpuFootprint load_on_cpu(const fs::path& path, int threads) {
  CpuFootprint f;
  const int64_t before = process_memory().resident;
  {
    const LoadedModel model = load_model(path);
    for (const FileRole& file : model.files)
      if (file.role == "weights") f.file_bytes += int64_t(file.bytes);
    for (const auto& [name, t] : model.weights.all()) f.weights += t.numel();
    f.types = weight_type_summary(model.weights);
    f.read_bytes = decode_bytes_per_token(model.config, model.weights);
    f.prefill_path = prefill_path(model.weights);
    CpuLoadReport report;
    CpuOptions options;
    options.threads = threads;
    options.report = &report;
    f.backend = make_cpu_backend(model, options);
    f.held_bytes = report.bytes_in_place + report.bytes_copied;
  }  // the model is released here: the backend keeps what it multiplies (and the file mapping, if used in place)
  f.resident_added = process_memory().resident - before;
  return f;
}

void cpu_footprint_table(const std::vector<Variant>& variants) {
  std::printf("6. What the fast CPU backend (--device cpu) holds of each file and what one decode step reads, in bytes, from the\n");
  std::printf("   loaded weights (make_cpu_backend's load report, decode_bytes_per_token); --measure times the same files\n");
  std::printf("    %-10s %11s %11s %12s %15s   %s\n", "type", "file", "held", "bits/weight", "read per token", "loaded as");
  int64_t f32_weights = 0;
  for (const Variant& v : variants) {
    const CpuFootprint f = load_on_cpu(v.path, 1);
    if (v.name == "F32") f32_weights = f.weights;
    std::printf("    %-10s %11lld %11lld %12.2f %15.0f   %s\n", v.name.c_str(), (long long)f.file_bytes, (long long)f.held_bytes,
        8.0 * double(f.held_bytes) / double(f.weights), f.read_bytes, f.types.c_str());
  }
  std::printf("    the reference backend of sections 3-5 widens every weight to f32 at load: 4 x %lld = %lld bytes, whatever the file\n\n",
      (long long)f32_weights, 4 * (long long)f32_weights);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "an unknown CPU";
}

double megabytes(double bytes) { return bytes / 1e6; }

std::string type_counts(const quant::QuantizeReport& r) {
  std::string text;
  for (auto it = r.type_counts.rbegin(); it != r.type_counts.rend(); ++it)
    text += cat(text.empty() ? "" : " ", dtype_name(it->first), "x", it->second);
  return text;
}

// stories260K as a GGUF file of `type` ("bf16", "q8_0", "q4_0", "q4_k_m"), through journey quantize's library.
Variant write_gguf(const char* type, const fs::path& work) {
  quant::QuantizeOptions q;
  q.input = kModel;
  q.output = work / cat("stories260K-", type, ".gguf");
  q.type = type;
  q.threads = 1;
  const quant::QuantizeReport r = quant::quantize_model(q);
  std::string name = type;
  for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return {name, q.output, type_counts(r)};
}

// --measure: every file through the fast CPU backend and `journey bench`'s run_bench. Left of '|' what
// the files determine (the README's block checks it), right of '|' what this run measured (masked there).
int measure(const std::vector<std::string>& args) {
  std::vector<Variant> models;
  BenchOptions options;
  options.threads = -1;  // not given: all cores for --model files, as journey bench; one thread for stories260K (below)
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) fail(args[i], " needs a value");
      return args[++i];
    };
    auto number = [&]() {
      const std::string& v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 0 || n > 1000000) fail(args[i - 1], ": expected a count, found \"", v, "\"");
      return int(n);
    };
    if (args[i] == "--model") {
      const fs::path path = value();
      const std::string name = path.filename().empty() ? path.parent_path().filename().string() : path.filename().string();
      models.push_back({name, path, ""});
    } else if (args[i] == "--threads") {
      options.threads = number();
    } else if (args[i] == "--prompt-tokens") {
      options.prompt_tokens = number();
    } else if (args[i] == "--gen-tokens") {
      options.gen_tokens = number();
    } else if (args[i] == "--runs") {
      options.runs = number();
    } else {
      fail("unexpected argument ", args[i],
          "; usage: ch13_quantization [--measure [--model PATH]... [--threads N] [--prompt-tokens N] [--gen-tokens N] [--runs N]]");
    }
  }
  if (models.empty()) {  // the shipped stories260K in each GGUF type of section 5
    const fs::path work = fs::temp_directory_path() / "journey-ch13-measure";
    fs::remove_all(work);
    fs::create_directories(work);
    models.push_back({"F32", kModel, ""});
    for (const char* type : {"bf16", "q8_0", "q4_0", "q4_k_m"}) models.push_back(write_gguf(type, work));
    // 1 MB of weights: a step is a few dozen tiny products, and a second thread costs more than it
    // gives, and far more on a machine shared with other jobs (each join waits for every thread)
    if (options.threads < 0) options.threads = 1;
  }
  if (options.threads < 0) options.threads = 0;

  const int64_t resident_before = process_memory().resident;
  std::printf("--measure: speed and memory on the fast CPU backend (--device cpu), each file through journey bench's measurement:\n");
  std::printf("   %d random prompt tokens, then %d greedy decode steps, median of %d runs, on %s. Before the bar: what\n",
      options.prompt_tokens, options.gen_tokens, options.runs,
      options.threads == 0 ? "all cores" : cat(options.threads, options.threads == 1 ? " thread" : " threads").c_str());
  std::printf("   the files determine; after it: what this run measured. +resident = what loading added to VmRSS; ceiling =\n");
  std::printf("   read bandwidth / read per token; decode/CPU-s = decode tok/s per CPU-second x threads (what the threads' own\n");
  std::printf("   work reached, whatever else ran)\n");
  int width = 6;  // the first column: as wide as the longest name
  for (const Variant& m : models) width = std::max(width, int(m.name.size()));
  std::printf("    %-*s %9s %9s %11s | %12s %13s %12s %13s %10s %12s  %s\n", width, "type", "file MB", "held MB", "read MB/tok",
      "+resident MB", "prefill tok/s", "decode tok/s", "ceiling tok/s", "of ceiling", "decode/CPU-s", "prefill path");
  std::vector<std::string> types;
  std::vector<double> bandwidths;
  double load_average = -1;  // the first run's, at its start (the machine may be shared)
  for (const Variant& m : models) {
    CpuFootprint f = load_on_cpu(m.path, options.threads);
    BenchOptions o = options;
    o.weight_bytes_per_token = f.read_bytes;
    o.prefill_path = f.prefill_path;
    const BenchResult r = run_bench(*f.backend, o);
    f.backend.reset();
    bandwidths.push_back(r.bandwidth_gb_s);
    if (load_average < 0) load_average = r.load_average;
    types.push_back(f.types);
    std::printf("    %-*s %9.3f %9.3f %11.3f | %12.1f %13.1f %12.1f %13.1f %9.1f%% %12.1f  %s\n", width, m.name.c_str(),
        megabytes(double(f.file_bytes)), megabytes(double(f.held_bytes)), megabytes(f.read_bytes),
        megabytes(double(f.resident_added)), r.prefill_tok_s.median, r.decode_tok_s.median, r.decode_ceiling_tok_s(),
        100.0 * r.decode_tok_s.median / r.decode_ceiling_tok_s(), r.decode_cpu_tok_s.median, r.prefill_path.c_str());
    std::fflush(stdout);
  }
  std::printf("    loaded as:\n");
  for (size_t i = 0; i < models.size(); ++i) std::printf("      %-*s %s\n", width, models[i].name.c_str(), types[i].c_str());
  std::sort(bandwidths.begin(), bandwidths.end());
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const int threads = resolve_threads(options.threads);
  std::printf("    machine | %s, %d thread%s, %s kernels; read bandwidth %.1f GB/s (median of the files' probes)\n"
              "            | load average %.2f at the start; resident %.0f MB before loading; %s\n",
      cpu_model_name().c_str(), threads, threads == 1 ? "" : "s", cpu::kernels::kernel_choice().c_str(),
      bandwidths[bandwidths.size() / 2], load_average, megabytes(double(resident_before)), date);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--measure") return measure(std::vector<std::string>(argv + 2, argv + argc));
    if (argc > 1)
      fail("unexpected argument ", argv[1], ": the chapter runs on the shipped stories260K and takes none (or --measure, see its README)");
    const fs::path work = fs::temp_directory_path() / "journey-ch13";
    fs::remove_all(work);
    fs::create_directories(work);
    const LoadedModel f32 = load_model(kModel);
    const auto tokenizer = load_tokenizer(kModel);

    // the files: GGUF types through journey quantize's library, AWQ / RTN INT4 through AWQ's
    std::vector<Variant> variants = {{"F32", kModel, "F32 (the Hugging Face directory)"}};
    quant::AwqQuantizeReport awq;
    for (const char* type : {"bf16", "q8_0", "q4_0", "q4_k_m"}) variants.push_back(write_gguf(type, work));
    {
      const std::vector<int> ids = tokenizer->encode(read_whole_file(kSource / "data/texts/calibration-original.txt"), true, false);
      std::vector<std::vector<int32_t>> windows;  // the calibration text in windows of 256 tokens, BOS first
      for (size_t b = 0; b < ids.size(); b += 256) {
        std::vector<int32_t> w(ids.begin() + long(b), ids.begin() + long(std::min(ids.size(), b + 256)));
        w[0] = ids[0];
        windows.push_back(std::move(w));
      }
      auto backend = make_reference_backend(f32);
      quant::AwqQuantizeOptions a;
      a.input = kModel;
      a.calibration = quant::record_awq_calibration(*backend, kModel, windows, work / "calibration");
      a.search.group = 64;  // stories260K's rows are 64 wide: group 128 does not fit
      for (const bool search : {true, false}) {
        a.search.search = search;
        a.output = work / (search ? "stories260K-awq-g64" : "stories260K-rtn-g64");
        const quant::AwqQuantizeReport r = quant::quantize_model_awq(a);
        variants.push_back({search ? "AWQ-g64" : "RTN-g64", a.output, cat("INT4 x", r.quantized.size(), " (q,k,v,o), F16 the rest")});
        if (search) awq = r;
      }
    }

    show_q4_0_block(work / "stories260K-q4_0.gguf", f32);
    show_q4_k_block(f32);
    memory_table();
    show_awq_search(awq);
    const std::vector<int> prompt_ids = tokenizer->encode("Once upon a time, there was a little girl named Lily.", true, false);
    std::vector<Variant> traced;
    for (const Variant& v : variants)
      if (v.name != "Q4_0" && v.name != "RTN-g64") traced.push_back(v);
    stage_by_stage(traced, std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end()), work);
    const std::vector<int> text_ids = tokenizer->encode(read_whole_file(kSource / "data/texts/tinystories-original.txt"), true, false);
    quality_table(variants, std::vector<int32_t>(text_ids.begin(), text_ids.end()), work);
    cpu_footprint_table(variants);

    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ch13_quantization: %s\n", e.what());
    return 1;
  }
}
