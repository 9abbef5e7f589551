#include "assets/convert.h"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "assets/llama2c.h"
#include "assets/safetensors.h"
#include "core/error.h"

namespace journey {
namespace fs = std::filesystem;
namespace {

using ordered_json = nlohmann::ordered_json;

void check_rows(int64_t n_heads, int64_t rows, int64_t cols, size_t size) {
  if (n_heads <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0 || size != size_t(rows * cols))
    fail("RoPE permutation: ", size, " values cannot be ", n_heads, " heads of an even head size x ", cols, " columns (rows ", rows, ")");
}

void write_json(const fs::path& path, const ordered_json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot create ", path.string());
  out << j.dump(2) << "\n";
  if (!out) fail("error writing ", path.string());
}

}  // namespace

std::vector<float> permute_interleaved_to_half_split(const std::vector<float>& w, int64_t n_heads, int64_t rows, int64_t cols) {
  check_rows(n_heads, rows, cols, w.size());
  const int64_t D = rows / n_heads;
  std::vector<float> out(w.size());  // [rows, cols]
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < D / 2; ++i) {
        const int64_t dst = h * D + t * (D / 2) + i, src = h * D + 2 * i + t;
        std::copy_n(w.begin() + src * cols, cols, out.begin() + dst * cols);
      }
  return out;
}

std::vector<float> permute_half_split_to_interleaved(const std::vector<float>& w, int64_t n_heads, int64_t rows, int64_t cols) {
  check_rows(n_heads, rows, cols, w.size());
  const int64_t D = rows / n_heads;
  std::vector<float> out(w.size());  // [rows, cols]
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < D / 2; ++i) {
        const int64_t src = h * D + t * (D / 2) + i, dst = h * D + 2 * i + t;
        std::copy_n(w.begin() + src * cols, cols, out.begin() + dst * cols);
      }
  return out;
}

std::vector<fs::path> convert_llama2c_to_hf(const ConvertLlama2cOptions& opt) {
  if (opt.dtype != DType::F32 && opt.dtype != DType::F16 && opt.dtype != DType::BF16)
    fail("convert: --dtype ", dtype_name(opt.dtype), " is not supported (choose f32, f16 or bf16)");
  if (opt.tokenizer_model && !fs::is_regular_file(*opt.tokenizer_model))
    fail("convert: tokenizer ", opt.tokenizer_model->string(), " does not exist");
  const Llama2cCheckpoint ck = read_llama2c(opt.checkpoint);
  const ModelConfig& c = ck.config;
  fs::create_directories(opt.out_dir);
  std::vector<fs::path> written;

  // Tensors in HF order, widened to f32, Q/K permuted, then narrowed to the requested dtype.
  std::vector<std::vector<std::byte>> storage;  // keeps the bytes the TensorRefs point at
  std::vector<TensorRef> tensors;
  for (const auto& [name, ref] : ck.weights.all()) {
    std::vector<float> values = ref.to_f32();  // ref.shape
    const bool is_q = name.find("self_attn.q_proj.weight") != std::string::npos;
    const bool is_k = name.find("self_attn.k_proj.weight") != std::string::npos;
    if (is_q) values = permute_interleaved_to_half_split(values, c.num_heads, ref.shape[0], ref.shape[1]);
    if (is_k) values = permute_interleaved_to_half_split(values, c.num_kv_heads, ref.shape[0], ref.shape[1]);
    std::vector<std::byte> bytes(size_t(dtype_bytes_for(opt.dtype, int64_t(values.size()))));
    if (opt.dtype == DType::F32) {
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else {
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = opt.dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    storage.push_back(std::move(bytes));
    TensorRef t;
    t.name = name;
    t.dtype = opt.dtype;
    t.shape = ref.shape;
    t.data = storage.back().data();
    t.nbytes = storage.back().size();
    tensors.push_back(std::move(t));
  }
  write_safetensors(opt.out_dir / "model.safetensors", tensors, {{"format", "pt"}});
  written.push_back(opt.out_dir / "model.safetensors");

  const char* torch_dtype = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::F16 ? "float16" : "bfloat16";
  ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"attention_bias", false},
      {"tie_word_embeddings", ck.shared_classifier},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", torch_dtype},
  };
  write_json(opt.out_dir / "config.json", config);
  written.push_back(opt.out_dir / "config.json");

  // The end ids run.c obeys, BOS among them (llama2c_generation_config() says why).
  const GenerationConfig generation = llama2c_generation_config();
  write_json(opt.out_dir / "generation_config.json",
             ordered_json{{"bos_token_id", *generation.bos_token_id}, {"eos_token_id", generation.eos_token_ids}});
  written.push_back(opt.out_dir / "generation_config.json");

  if (opt.tokenizer_model) {
    fs::copy_file(*opt.tokenizer_model, opt.out_dir / "tokenizer.model", fs::copy_options::overwrite_existing);
    // copy_file keeps the source's mode; a read-only source must not make the output read-only.
    fs::permissions(opt.out_dir / "tokenizer.model", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
    written.push_back(opt.out_dir / "tokenizer.model");
    ordered_json tok = {
        {"tokenizer_class", "LlamaTokenizer"},
        {"bos_token", "<s>"},
        {"eos_token", "</s>"},
        {"unk_token", "<unk>"},
        {"pad_token", nullptr},
        {"add_bos_token", true},
        {"add_eos_token", false},
        {"model_max_length", c.max_position_embeddings},
        {"clean_up_tokenization_spaces", false},
    };
    write_json(opt.out_dir / "tokenizer_config.json", tok);
    written.push_back(opt.out_dir / "tokenizer_config.json");
  }
  return written;
}

}  // namespace journey
