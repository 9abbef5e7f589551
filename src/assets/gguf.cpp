// GGUF v3 reader. Every read goes through Cursor, which checks the bytes are there before it
// touches them, so a truncated or corrupted file ends in a journey::Error, never a wild read.
#include "assets/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <regex>

#include "core/error.h"

namespace journey {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxArrayDepth = 8;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class Cursor {
 public:
  Cursor(const MappedFile& file) : file_(file) {}
  uint64_t pos() const { return pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > file_.size() - pos_)
      fail("GGUF ", file_.path().string(), ": truncated while reading ", what, " (need ", n, " bytes at offset ", pos_,
           ", file has ", file_.size(), " bytes)");
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(file_.data() + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  const MappedFile& file_;
  uint64_t pos_ = 0;
};

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

GgufValue read_value(Cursor& in, GgufType type, const std::string& key, int depth, const MappedFile& file) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = in.read<uint8_t>(key); v.i = int64_t(v.u); break;
    case GgufType::I8: v.i = in.read<int8_t>(key); v.u = uint64_t(v.i); break;
    case GgufType::U16: v.u = in.read<uint16_t>(key); v.i = int64_t(v.u); break;
    case GgufType::I16: v.i = in.read<int16_t>(key); v.u = uint64_t(v.i); break;
    case GgufType::U32: v.u = in.read<uint32_t>(key); v.i = int64_t(v.u); break;
    case GgufType::I32: v.i = in.read<int32_t>(key); v.u = uint64_t(v.i); break;
    case GgufType::U64: v.u = in.read<uint64_t>(key); v.i = int64_t(v.u); break;
    case GgufType::I64: v.i = in.read<int64_t>(key); v.u = uint64_t(v.i); break;
    case GgufType::F32: v.f = in.read<float>(key); break;
    case GgufType::F64: v.f = in.read<double>(key); break;
    case GgufType::Bool: {
      const uint8_t b = in.read<uint8_t>(key);
      if (b > 1) fail("GGUF ", file.path().string(), ": key ", key, ": bool value is ", int(b), ", expected 0 or 1");
      v.b = b != 0;
      v.i = b;
      break;
    }
    case GgufType::String: v.s = in.read_string(key); break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth)
        fail("GGUF ", file.path().string(), ": key ", key, ": arrays nested deeper than ", kMaxArrayDepth, " levels");
      const uint32_t elem = in.read<uint32_t>(key);
      if (elem > uint32_t(GgufType::F64))
        fail("GGUF ", file.path().string(), ": key ", key, ": unknown array element type ", elem);
      v.elem_type = GgufType(elem);
      const uint64_t count = in.read<uint64_t>(key);
      // Every element takes at least one byte: a count beyond the remaining bytes is corruption,
      // and checking it here keeps a bad count from reserving terabytes.
      if (count > file.size() - in.pos())
        fail("GGUF ", file.path().string(), ": key ", key, ": array claims ", count, " elements but only ",
             file.size() - in.pos(), " bytes remain");
      v.items.reserve(size_t(count));
      for (uint64_t k = 0; k < count; ++k) v.items.push_back(read_value(in, v.elem_type, key, depth + 1, file));
      break;
    }
    default:
      fail("GGUF ", file.path().string(), ": key ", key, ": unknown value type ", uint32_t(type));
  }
  return v;
}

std::string describe_type(const GgufValue& v) {
  if (v.type == GgufType::Array) return cat("array of ", gguf_type_name(v.elem_type));
  return std::string(gguf_type_name(v.type));
}

}  // namespace

namespace {
// ggml_type numbers (ggml.h), in file order: index = the number stored in a GGUF tensor entry.
constexpr const char* kGgmlTypeNames[] = {
    "F32", "F16", "Q4_0", "Q4_1", "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
    "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
    "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4 (removed)", "Q4_0_4_8 (removed)",
    "Q4_0_8_8 (removed)", "TQ1_0", "TQ2_0", "IQ4_NL_4_4 (removed)", "IQ4_NL_4_8 (removed)", "IQ4_NL_8_8 (removed)",
    "MXFP4"};

// The ggml types journey holds, with their numbers.
constexpr std::pair<uint32_t, DType> kGgmlTypes[] = {
    {0, DType::F32},   {1, DType::F16},   {2, DType::Q4_0},  {3, DType::Q4_1},  {6, DType::Q5_0},
    {7, DType::Q5_1},  {8, DType::Q8_0},  {10, DType::Q2_K}, {11, DType::Q3_K}, {12, DType::Q4_K},
    {13, DType::Q5_K}, {14, DType::Q6_K}, {24, DType::I8},   {26, DType::I32},  {27, DType::I64},
    {30, DType::BF16},
};
}  // namespace

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (const auto& [number, dtype] : kGgmlTypes)
    if (number == ggml_type) return dtype;
  return std::nullopt;
}

uint32_t ggml_type_of(DType dtype) {
  for (const auto& [number, type] : kGgmlTypes)
    if (type == dtype) return number;
  fail("dtype ", dtype_name(dtype), " has no ggml type number");
}

std::string ggml_type_label(uint32_t ggml_type) {
  if (ggml_type < std::size(kGgmlTypeNames)) return cat(kGgmlTypeNames[ggml_type], " (#", ggml_type, ")");
  return cat("#", ggml_type, " (unknown to journey and to ggml as journey knows it)");
}

std::string ggml_supported_types() {
  std::string out;
  for (const auto& [number, dtype] : kGgmlTypes) out += cat(out.empty() ? "" : ", ", kGgmlTypeNames[number]);
  return out;
}

namespace {
// llama_ftype (llama.h): the general.file_type number that says which mix a file holds.
constexpr std::pair<int64_t, const char*> kFileTypes[] = {
    {0, "all f32"},         {1, "mostly f16"},      {2, "mostly q4_0"},    {3, "mostly q4_1"},
    {7, "mostly q8_0"},     {8, "mostly q5_0"},     {9, "mostly q5_1"},    {10, "mostly q2_k"},
    {11, "mostly q3_k_s"},  {12, "mostly q3_k_m"},  {13, "mostly q3_k_l"}, {14, "mostly q4_k_s"},
    {15, "mostly q4_k_m"},  {16, "mostly q5_k_s"},  {17, "mostly q5_k_m"}, {18, "mostly q6_k"},
    {32, "mostly bf16"},
};
}  // namespace

std::string gguf_file_type_name(int64_t file_type) {
  for (const auto& [number, name] : kFileTypes)
    if (number == file_type) return name;
  return cat("gguf file_type ", file_type);
}

int64_t gguf_file_type_number(std::string_view name) {
  for (const auto& [number, known] : kFileTypes)
    if (name == known) return number;
  fail("no GGUF file type is called \"", name, "\"");
}

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "uint8";
    case GgufType::I8: return "int8";
    case GgufType::U16: return "uint16";
    case GgufType::I16: return "int16";
    case GgufType::U32: return "uint32";
    case GgufType::I32: return "int32";
    case GgufType::F32: return "float32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "uint64";
    case GgufType::I64: return "int64";
    case GgufType::F64: return "float64";
  }
  return "?";
}

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), 4)) return false;
  return magic == kGgufMagic;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile g;
  g.path_ = path;
  g.file_ = MappedFile::open(path);
  const MappedFile& file = *g.file_;
  const std::string where = cat("GGUF ", path.string());
  Cursor in(file);

  const uint32_t magic = in.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    char found[5] = {};
    std::memcpy(found, &magic, 4);
    for (char& c : found) if (c != 0 && (c < 32 || c > 126)) c = '?';
    fail(path.string(), ": not a GGUF file (magic is \"", found, "\", expected \"GGUF\")");
  }
  g.version_ = in.read<uint32_t>("version");
  if (g.version_ != 3 && g.version_ != 2)
    fail(where, ": unsupported GGUF version ", g.version_, " (journey reads versions 2 and 3)");
  const uint64_t n_tensors = in.read<uint64_t>("tensor count");
  const uint64_t n_kv = in.read<uint64_t>("metadata count");
  // Each key/value takes at least 12 bytes, each tensor entry at least 24: reject absurd counts early.
  if (n_kv > file.size() / 12) fail(where, ": metadata count ", n_kv, " is impossible for a file of ", file.size(), " bytes");
  if (n_tensors > file.size() / 24) fail(where, ": tensor count ", n_tensors, " is impossible for a file of ", file.size(), " bytes");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = in.read_string(cat("metadata key #", k));
    const uint32_t type = in.read<uint32_t>(key);
    if (type > uint32_t(GgufType::F64)) fail(where, ": key ", key, ": unknown value type ", type);
    GgufValue v = read_value(in, GgufType(type), key, 0, file);
    if (g.values_.count(key)) fail(where, ": key ", key, " appears twice");
    g.key_order_.push_back(key);
    g.values_.emplace(std::move(key), std::move(v));
  }

  if (g.has("general.alignment")) {
    const int64_t a = g.get_int("general.alignment");
    if (a <= 0 || (a & (a - 1)) != 0) fail(where, ": general.alignment is ", a, ", expected a positive power of two");
    g.alignment_ = uint64_t(a);
  }

  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = in.read_string(cat("tensor name #", k));
    const uint32_t n_dims = in.read<uint32_t>(t.name);
    if (n_dims == 0 || n_dims > 4) fail(where, ": tensor ", t.name, ": ", n_dims, " dimensions (expected 1 to 4)");
    std::vector<int64_t> ne(n_dims);  // innermost first
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = in.read<uint64_t>(t.name);
      if (n == 0 || n > (uint64_t(1) << 40) || numel > (int64_t(1) << 40) / int64_t(n))
        fail(where, ": tensor ", t.name, ": dimension ", d, " is ", n, " (impossible)");
      ne[d] = int64_t(n);
      numel *= int64_t(n);
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t ggml_type = in.read<uint32_t>(t.name);
    const auto dtype = dtype_from_ggml(ggml_type);
    if (!dtype)
      fail(where, ": tensor ", t.name, " has ggml type ", ggml_type_label(ggml_type),
           ", which journey does not read (it reads: ", ggml_supported_types(), ")");
    t.dtype = *dtype;
    // Blocks never straddle rows: the innermost dimension must be whole blocks.
    if (ne[0] % dtype_block_size(t.dtype) != 0)
      fail(where, ": tensor ", t.name, " (", dtype_name(t.dtype), "): row length ", ne[0], " is not a multiple of the ",
           dtype_name(t.dtype), " block size ", dtype_block_size(t.dtype), " (", dtype_block_bytes(t.dtype),
           " bytes hold ", dtype_block_size(t.dtype), " weights)");
    t.nbytes = size_t(dtype_bytes_for(t.dtype, numel));
    t.offset = in.read<uint64_t>(t.name);
    if (t.offset % g.alignment_ != 0)
      fail(where, ": tensor ", t.name, ": data offset ", t.offset, " is not a multiple of the alignment ", g.alignment_);
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t pad = (g.alignment_ - in.pos() % g.alignment_) % g.alignment_;
  g.data_start_ = in.pos() + pad;
  if (!g.tensors_.empty() && g.data_start_ > file.size())
    fail(where, ": data section would start at ", g.data_start_, " but the file has only ", file.size(), " bytes");
  for (const auto& t : g.tensors_) {
    const uint64_t end = g.data_start_ + t.offset + t.nbytes;
    if (t.offset > file.size() || end > file.size())
      fail(where, ": tensor ", t.name, " (", dtype_name(t.dtype), ", shape ", shape_text(t.shape), ", ", t.nbytes,
           " bytes at data offset ", t.offset, ") ends at byte ", end, " but the file has only ", file.size(),
           " bytes (truncated?)");
  }
  // GGUF does not store a tensor's byte size: shape and type imply it. A file whose shapes or types
  // do not match its data shows as tensors whose implied bytes run into the next tensor.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : g.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (a.offset + a.nbytes > b.offset)
      fail(where, ": tensor ", a.name, " (", dtype_name(a.dtype), ", shape ", shape_text(a.shape), ") needs ", a.nbytes,
           " bytes from data offset ", a.offset, ", but tensor ", b.name, " starts ", b.offset - a.offset,
           " bytes after it: the shape and type do not match the data");
  }
  return g;
}

bool GgufFile::has(std::string_view key) const { return values_.find(key) != values_.end(); }

std::vector<std::string> GgufFile::keys() const { return key_order_; }

const GgufValue& GgufFile::value(std::string_view key) const {
  auto it = values_.find(key);
  if (it == values_.end()) fail("GGUF ", path_.string(), ": missing key ", key);
  return it->second;
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::String) fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected string");
  return v.s;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!is_integer_type(v.type) && v.type != GgufType::Bool)
    fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected an integer");
  return v.i;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = value(key);
  if (is_float_type(v.type)) return v.f;
  if (is_integer_type(v.type)) return double(v.i);
  fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected a number");
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Bool) fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected bool");
  return v.b;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || v.elem_type != GgufType::String)
    fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected array of string");
  std::vector<std::string> out;
  out.reserve(v.items.size());
  for (const auto& item : v.items) out.push_back(item.s);
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || !(is_float_type(v.elem_type) || is_integer_type(v.elem_type)))
    fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected array of numbers");
  std::vector<double> out;
  out.reserve(v.items.size());
  for (const auto& item : v.items) out.push_back(is_float_type(item.type) ? item.f : double(item.i));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || !(is_integer_type(v.elem_type) || v.elem_type == GgufType::Bool))
    fail("GGUF ", path_.string(), ": key ", key, " is ", describe_type(v), ", expected array of integers");
  std::vector<int64_t> out;
  out.reserve(v.items.size());
  for (const auto& item : v.items) out.push_back(item.i);
  return out;
}

std::string GgufFile::summary(std::string_view key) const {
  const GgufValue& v = value(key);
  switch (v.type) {
    case GgufType::String: return v.s.size() > 60 ? cat('"', v.s.substr(0, 57), "...\" (", v.s.size(), " chars)") : cat('"', v.s, '"');
    case GgufType::Bool: return v.b ? "true" : "false";
    case GgufType::F32: case GgufType::F64: return cat(v.f);
    case GgufType::Array: return cat(v.items.size(), " x ", gguf_type_name(v.elem_type));
    default: return (v.type == GgufType::U64) ? cat(v.u) : cat(v.i);
  }
}

const std::byte* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  return file_->data() + data_start_ + t.offset;
}

ModelConfig gguf_model_config(const GgufFile& gguf) {
  const std::string arch = gguf.get_string("general.architecture");
  if (arch != "llama")
    fail("GGUF ", gguf.path().string(), ": general.architecture is \"", arch, "\"; journey reads GGUF models of architecture: llama");
  ModelConfig c;
  c.architecture = "llama";
  c.hidden_size = gguf.get_int("llama.embedding_length");
  c.intermediate_size = gguf.get_int("llama.feed_forward_length");
  c.num_layers = gguf.get_int("llama.block_count");
  c.num_heads = gguf.get_int("llama.attention.head_count");
  c.num_kv_heads = gguf.has("llama.attention.head_count_kv") ? gguf.get_int("llama.attention.head_count_kv") : c.num_heads;
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
    fail("GGUF ", gguf.path().string(), ": llama.embedding_length ", c.hidden_size, " is not divisible by llama.attention.head_count ", c.num_heads);
  c.head_dim = c.hidden_size / c.num_heads;
  c.max_position_embeddings = gguf.get_int("llama.context_length");
  if (gguf.has("llama.rope.freq_base")) c.rope_theta = gguf.get_float("llama.rope.freq_base");
  c.rms_norm_eps = gguf.get_float("llama.attention.layer_norm_rms_epsilon");
  if (gguf.has("llama.vocab_size")) c.vocab_size = gguf.get_int("llama.vocab_size");
  else c.vocab_size = int64_t(gguf.value("tokenizer.ggml.tokens").items.size());
  bool has_output = false;
  for (const auto& t : gguf.tensors()) has_output |= (t.name == "output.weight");
  c.tie_word_embeddings = !has_output && !gguf.tensors().empty();
  c.rope_layout = RopeLayout::Interleaved;
  if (gguf.has("tokenizer.ggml.bos_token_id")) c.bos_token_id = int(gguf.get_int("tokenizer.ggml.bos_token_id"));
  if (gguf.has("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {int(gguf.get_int("tokenizer.ggml.eos_token_id"))};
  if (gguf.has("general.file_type")) c.torch_dtype = gguf_file_type_name(gguf.get_int("general.file_type"));
  return c;
}

namespace {
// GGUF <-> Hugging Face tensor names: one table each for the global and the per-layer tensors.
const std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_q", "self_attn.q_proj"},       {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"},
    {"attn_norm", "input_layernorm"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},        {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
};
}  // namespace

std::string gguf_to_hf_name(const std::string& name) {
  for (const auto& [gguf, hf] : kGlobalNames)
    if (name == gguf) return hf;
  static const std::regex layer_re(R"(blk\.(\d+)\.([a-z_]+)\.(weight|bias))");
  std::smatch m;
  if (std::regex_match(name, m, layer_re)) {
    for (const auto& [gguf, hf] : kLayerNames)
      if (m[2].str() == gguf) return cat("model.layers.", m[1].str(), ".", hf, ".", m[3].str());
  }
  return name;
}

std::string hf_to_gguf_name(const std::string& name) {
  for (const auto& [gguf, hf] : kGlobalNames)
    if (name == hf) return gguf;
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.([a-z_.]+)\.(weight|bias))");
  std::smatch m;
  if (std::regex_match(name, m, layer_re)) {
    for (const auto& [gguf, hf] : kLayerNames)
      if (m[2].str() == hf) return cat("blk.", m[1].str(), ".", gguf, ".", m[3].str());
  }
  return name;
}

WeightStore gguf_weights(const GgufFile& gguf) {
  WeightStore store;
  const std::shared_ptr<const MappedFile> file = gguf.mapping();
  for (const auto& info : gguf.tensors()) {
    TensorRef t;
    t.name = gguf_to_hf_name(info.name);
    t.dtype = info.dtype;
    t.shape = info.shape;
    t.data = gguf.tensor_data(info);
    t.nbytes = info.nbytes;
    t.source = gguf.path().string();
    store.add_mapped(std::move(t), file);
  }
  return store;
}

}  // namespace journey
