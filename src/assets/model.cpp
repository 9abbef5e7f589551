// load_model: look at what the user pointed at, pick the reader, and check the weights against
// the architecture before anything computes with them.
#include "assets/model.h"

#include <algorithm>

#include "assets/gguf.h"
#include "assets/hf_config.h"
#include "assets/llama2c.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "core/shape.h"

namespace journey {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string role_of(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name == "config.json") return "config";
  if (name == "generation_config.json") return "generation config";
  if (name == "model.safetensors.index.json" || ends_with(name, ".safetensors") || ends_with(name, ".gguf")) return "weights";
  if (name == "tokenizer.json" || name == "tokenizer.model" || name == "tokenizer_config.json" ||
      name == "special_tokens_map.json" || name == "vocab.json" || name == "merges.txt" || name == "tokenizer.bin" ||
      (name.rfind("tok", 0) == 0 && (ends_with(name, ".model") || ends_with(name, ".bin"))))
    return "tokenizer";
  if (ends_with(name, ".jinja")) return "template";
  if (ends_with(name, ".bin") && is_llama2c_file(p)) return "weights";
  return "other";
}

std::vector<FileRole> directory_files(const fs::path& dir) {
  std::vector<FileRole> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    files.push_back({entry.path(), role_of(entry.path()), uint64_t(entry.file_size())});
  }
  std::sort(files.begin(), files.end(), [](const FileRole& a, const FileRole& b) { return a.path < b.path; });
  return files;
}

std::vector<fs::path> gguf_files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

GenerationConfig generation_from(const ModelConfig& c) {
  GenerationConfig g;
  g.bos_token_id = c.bos_token_id;
  g.eos_token_ids = c.eos_token_ids;
  return g;
}

LoadedModel load_gguf(const fs::path& file, bool with_weights) {
  LoadedModel m;
  m.path = file;
  m.format = ModelFormat::Gguf;
  const GgufFile gguf = GgufFile::open(file);
  m.config = gguf_model_config(gguf);
  m.generation = generation_from(m.config);
  m.files = {{file, "weights", uint64_t(fs::file_size(file))}};
  m.notes.push_back("GGUF holds its tokenizer (tokenizer.ggml.*) and Q/K rows in Meta's interleaved RoPE order");
  if (gguf.tensors().empty()) fail(file.string(), ": GGUF file holds no tensors (vocab-only file?)");
  if (with_weights) {
    m.weights = gguf_weights(gguf);
    validate_weights(m.config, m.weights, file);
  }
  return m;
}

LoadedModel load_llama2c(const fs::path& file, bool with_weights) {
  LoadedModel m;
  m.path = file;
  m.format = ModelFormat::Llama2c;
  Llama2cCheckpoint ck = read_llama2c(file, with_weights);
  m.config = ck.config;
  m.generation = llama2c_generation_config();  // BOS ends a story, as in run.c
  m.files = {{file, "weights", uint64_t(fs::file_size(file))}};
  // llama2.c keeps its tokenizer beside the checkpoint under one of these names.
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  const std::string v = std::to_string(m.config.vocab_size);
  for (const std::string& name : std::vector<std::string>{"tokenizer.model", "tokenizer.bin", "tok" + v + ".model", "tok" + v + ".bin"}) {
    if (fs::is_regular_file(dir / name)) m.files.push_back({dir / name, "tokenizer", uint64_t(fs::file_size(dir / name))});
  }
  m.notes.push_back(cat("llama2.c version ", ck.version, " checkpoint",
                        ck.version == 2 ? cat(" (int8, group size ", ck.group_size, ", dequantized to f32 at load)") : std::string(),
                        "; Q/K rows in Meta's interleaved RoPE order"));
  if (with_weights) {
    m.weights = std::move(ck.weights);
    validate_weights(m.config, m.weights, file);
  }
  return m;
}

LoadedModel load_directory(const fs::path& dir, bool with_weights) {
  const fs::path config = dir / "config.json";
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  const bool has_safetensors = fs::is_regular_file(single) || fs::is_regular_file(index);
  if (!fs::is_regular_file(config)) {
    const auto ggufs = gguf_files_in(dir);
    if (ggufs.size() == 1) return load_gguf(ggufs[0], with_weights);
    if (ggufs.size() > 1) fail(dir.string(), " holds ", ggufs.size(), " .gguf files; name the one to load");
    if (has_safetensors) fail(dir.string(), " has safetensors weights but no config.json");
    fail("no weights found in ", dir.string(), " (looked for model.safetensors, model.safetensors.index.json, *.gguf)");
  }
  LoadedModel m;
  m.path = dir;
  m.format = ModelFormat::HuggingFace;
  m.config = read_hf_config(config, &m.notes);
  const fs::path gen = dir / "generation_config.json";
  m.generation = fs::is_regular_file(gen) ? read_generation_config(gen) : generation_from(m.config);
  m.files = directory_files(dir);
  if (!has_safetensors) {
    const auto ggufs = gguf_files_in(dir);
    if (ggufs.size() == 1) {
      LoadedModel g = load_gguf(ggufs[0], with_weights);
      g.files = m.files;
      return g;
    }
    fail("no weights found in ", dir.string(), " (looked for model.safetensors, model.safetensors.index.json, *.gguf)");
  }
  if (with_weights) {
    if (fs::is_regular_file(index)) read_safetensors_index(index, m.weights);
    else read_safetensors(single, m.weights);
    if (const auto awq = read_awq_config(config))
      m.notes.push_back(cat("AWQ checkpoint (", awq->bits, "-bit, group size ", awq->group_size, ", GEMM packing): ",
                            convert_awq_weights(*awq, m.weights, dir.string()).describe()));
    validate_weights(m.config, m.weights, dir);
  }
  return m;
}

LoadedModel load(const fs::path& path, bool with_weights) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_directory(path, with_weights);
  if (!fs::exists(path, ec)) fail("model path ", path.string(), " does not exist");
  const std::string name = path.filename().string();
  if (name == "config.json" || ends_with(name, ".safetensors") || name == "model.safetensors.index.json")
    return load_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path(), with_weights);
  if (is_gguf_file(path)) return load_gguf(path, with_weights);
  if (is_llama2c_file(path)) return load_llama2c(path, with_weights);
  if (ends_with(name, ".bin")) return load_llama2c(path, with_weights);  // let the reader say what is wrong
  fail("cannot tell the format of ", path.string(),
       " (expected a Hugging Face directory, a .gguf file or a llama2.c .bin checkpoint)");
}

}  // namespace

std::string_view format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::HuggingFace: return "Hugging Face";
    case ModelFormat::Llama2c: return "llama2.c";
    case ModelFormat::Gguf: return "GGUF";
  }
  return "?";
}

void validate_weights(const ModelConfig& config, const WeightStore& weights, const fs::path& where) {
  for (const WeightSpec& e : model_weights(config)) {
    if (!weights.has(e.name)) {
      if (e.optional) continue;
      fail(where.string(), ": missing tensor ", e.name, " (expected shape ", shape_string(e.shape), " for ",
           config.architecture, " with ", config.num_layers, " layers",
           e.name == "lm_head.weight" ? ", untied embeddings" : "", ")");
    }
    const TensorRef& t = weights.get(e.name);
    if (t.shape != e.shape)
      fail(where.string(), ": tensor ", e.name, " has shape ", shape_string(t.shape), ", expected ", shape_string(e.shape),
           " from the config (hidden ", config.hidden_size, ", heads ", config.num_heads, ", KV heads ", config.num_kv_heads,
           ", head dim ", config.head_dim, ", FFN ", config.intermediate_size, ", vocab ", config.vocab_size, ") in ", t.source);
    // Quantized GGUF blocks dequantize like floats; integer tensors are not weights.
    if (!dtype_is_weight(t.dtype))
      fail(where.string(), ": tensor ", e.name, " has dtype ", dtype_name(t.dtype),
           ", expected a float type (f32, f16, bf16) or a GGML block type (q8_0 ... q6_K) in ", t.source);
  }
}

LoadedModel load_model(const fs::path& path) { return load(path, true); }

LoadedModel load_model_metadata(const fs::path& path) { return load(path, false); }

}  // namespace journey
