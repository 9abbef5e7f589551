// llama2.c checkpoint reader. Layouts (from llama2.c run.c / export.py):
//   v0:  int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative: separate
//        classifier), seq_len; float32 tok_emb [V,E], rms_att [L,E], wq [L,E,E], wk [L,KV,E],
//        wv [L,KV,E], wo [L,E,E], rms_ffn [L,E], w1 [L,F,E], w2 [L,E,F], w3 [L,F,E], rms_final [E],
//        freq_cis_real [S,D/2], freq_cis_imag [S,D/2], then wcls [V,E] when vocab_size < 0.
//   v1/v2: u32 magic "ak42", int32 version, the same 7 ints, u8 shared_classifier, (v2: int32
//        group_size), zero padding to 256 bytes. v1: float32 norms (rms_att [L,E], rms_ffn [L,E],
//        rms_final [E]) then tok_emb, wq.., wk.., wv.., wo.., w1.., w2.., w3.. (each per layer),
//        wcls if not shared. v2: the same norms in float32, then each matrix as int8 values
//        followed by one float32 scale per group of group_size values.
// Every weight is stored [out_features, in_features] row-major, like a PyTorch Linear.
#include "assets/llama2c.h"

#include <cstring>
#include <fstream>

#include "core/error.h"

namespace journey {
namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42"
constexpr size_t kHeaderBytes = 256;     // v1/v2 header, zero padded
constexpr int64_t kMaxDim = int64_t(1) << 24;

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// Structural sanity of the 7 ints; returns "" when plausible, else what is wrong.
std::string implausible(const Header& h) {
  auto bad = [](int64_t v) { return v <= 0 || v > kMaxDim; };
  if (bad(h.dim)) return cat("dim ", h.dim);
  if (bad(h.hidden_dim)) return cat("hidden_dim ", h.hidden_dim);
  if (bad(h.n_layers) || h.n_layers > 4096) return cat("n_layers ", h.n_layers);
  if (bad(h.n_heads) || h.dim % h.n_heads != 0) return cat("n_heads ", h.n_heads, " (dim ", h.dim, ")");
  if (bad(h.n_kv_heads) || h.n_heads % h.n_kv_heads != 0) return cat("n_kv_heads ", h.n_kv_heads, " (n_heads ", h.n_heads, ")");
  if (h.vocab_size == 0 || bad(std::abs(int64_t(h.vocab_size)))) return cat("vocab_size ", h.vocab_size);
  if (bad(h.seq_len)) return cat("seq_len ", h.seq_len);
  if ((h.dim / h.n_heads) % 2 != 0) return cat("head size ", h.dim / h.n_heads, " (must be even for RoPE)");
  return "";
}

ModelConfig config_from(const Header& h, bool shared) {
  ModelConfig c;
  c.architecture = "llama";
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = std::abs(int64_t(h.vocab_size));
  c.max_position_embeddings = h.seq_len;
  c.rope_theta = 10000.0;  // llama2.c hard-codes both
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = shared;
  c.rope_layout = RopeLayout::Interleaved;
  c.torch_dtype = "float32";
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

}  // namespace

GenerationConfig llama2c_generation_config() {
  GenerationConfig g;
  g.bos_token_id = 1;
  g.eos_token_ids = {2, 1};  // EOS, then BOS: the end of a TinyStories story (see llama2c.h)
  return g;
}

namespace {

// One tensor of the file, named and shaped as in Hugging Face; `layer` < 0 for global tensors.
struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const { int64_t n = 1; for (auto d : shape) n *= d; return n; }
};

std::string layer_name(int64_t l, const char* suffix) { return cat("model.layers.", l, ".", suffix); }

// The per-layer norms, in file order.
std::vector<Slot> norm_slots(const ModelConfig& c, bool attention) {
  std::vector<Slot> out;
  for (int64_t l = 0; l < c.num_layers; ++l)
    out.push_back({layer_name(l, attention ? "input_layernorm.weight" : "post_attention_layernorm.weight"), {c.hidden_size}});
  return out;
}

// The matrices per kind, each over all layers, in file order (wq, wk, wv, wo, w1, w2, w3).
std::vector<Slot> matrix_slots(const ModelConfig& c) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, KV = c.kv_dim();
  std::vector<Slot> out;
  struct Kind { const char* name; std::vector<int64_t> shape; };
  const Kind kinds[] = {{"self_attn.q_proj.weight", {E, E}}, {"self_attn.k_proj.weight", {KV, E}},
                        {"self_attn.v_proj.weight", {KV, E}}, {"self_attn.o_proj.weight", {E, E}},
                        {"mlp.gate_proj.weight", {F, E}},    {"mlp.down_proj.weight", {E, F}},
                        {"mlp.up_proj.weight", {F, E}}};
  for (const auto& k : kinds)
    for (int64_t l = 0; l < c.num_layers; ++l) out.push_back({layer_name(l, k.name), k.shape});
  return out;
}

std::vector<char> read_prefix(const std::filesystem::path& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(n);
  in.read(buf.data(), std::streamsize(n));
  buf.resize(size_t(in.gcount()));
  return buf;
}

// File sizes implied by a header are computed in 128 bits: dimensions up to 2^24 and 4096 layers
// can imply more than 2^64 bytes, and a 64-bit sum could wrap around to a small file's size.
using Bytes = unsigned __int128;

std::string bytes_string(Bytes n) {
  std::string digits;
  do {
    digits.insert(digits.begin(), char('0' + int(n % 10)));
    n /= 10;
  } while (n > 0);
  return digits;
}

Bytes legacy_expected_bytes(const Header& h) {
  const ModelConfig c = config_from(h, h.vocab_size > 0);
  const Bytes V = Bytes(c.vocab_size), E = Bytes(c.hidden_size), F = Bytes(c.intermediate_size);
  const Bytes L = Bytes(c.num_layers), KV = Bytes(c.kv_dim()), D = Bytes(c.head_dim), S = Bytes(h.seq_len);
  Bytes floats = V * E + L * (E + E * E + 2 * KV * E + E * E + E + 3 * F * E) + E + S * D;  // S*D/2 real + S*D/2 imag
  if (h.vocab_size < 0) floats += V * E;
  return 28 + 4 * floats;
}

TensorRef f32_tensor(const Slot& s, const std::byte* data, const std::string& source) {
  TensorRef t;
  t.name = s.name;
  t.dtype = DType::F32;
  t.shape = s.shape;
  t.data = data;
  t.nbytes = size_t(s.numel()) * 4;
  t.source = source;
  return t;
}

}  // namespace

bool is_llama2c_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  const auto prefix = read_prefix(path, 28);
  if (prefix.size() < 28) return false;
  uint32_t magic;
  std::memcpy(&magic, prefix.data(), 4);
  if (magic == kMagic) return true;
  Header h;
  std::memcpy(&h, prefix.data(), 28);
  return implausible(h).empty() && legacy_expected_bytes(h) == std::filesystem::file_size(path, ec);
}

Llama2cCheckpoint read_llama2c(const std::filesystem::path& path, bool with_weights) {
  auto file = MappedFile::open(path);
  const std::string where = cat("llama2.c checkpoint ", path.string());
  const std::string source = path.string();
  if (file->size() < 28) fail(where, ": file is ", file->size(), " bytes, too short for the 28-byte header");
  Llama2cCheckpoint ck;
  uint32_t magic;
  std::memcpy(&magic, file->data(), 4);
  Header h;
  size_t offset = 0;
  if (magic == kMagic) {
    if (file->size() < kHeaderBytes) fail(where, ": file is ", file->size(), " bytes, too short for the 256-byte header");
    int32_t version;
    std::memcpy(&version, file->data() + 4, 4);
    if (version != 1 && version != 2)
      fail(where, ": version ", version, " is unsupported (journey reads llama2.c versions 0, 1 and 2)");
    ck.version = version;
    std::memcpy(&h, file->data() + 8, 28);
    ck.shared_classifier = uint8_t(file->data()[36]) != 0;
    if (version == 2) {
      int32_t group;
      std::memcpy(&group, file->data() + 37, 4);
      if (group <= 0) fail(where, ": group_size ", group, " must be positive");
      ck.group_size = group;
    }
    if (h.vocab_size < 0) fail(where, ": vocab_size ", h.vocab_size, " is negative in a version ", version, " header");
    offset = kHeaderBytes;
  } else {
    std::memcpy(&h, file->data(), 28);
    ck.shared_classifier = h.vocab_size > 0;
    offset = 28;
  }
  if (const std::string what = implausible(h); !what.empty())
    fail(where, ": header field ", what, " is implausible (not a llama2.c checkpoint, or corrupted)");
  ck.config = config_from(h, ck.shared_classifier);
  const ModelConfig& c = ck.config;
  const int64_t V = c.vocab_size, E = c.hidden_size;

  if (ck.version == 0) {
    const Bytes expected = legacy_expected_bytes(h);
    if (file->size() != expected)
      fail(where, ": the header (dim ", h.dim, ", hidden_dim ", h.hidden_dim, ", n_layers ", h.n_layers, ", n_heads ",
           h.n_heads, ", n_kv_heads ", h.n_kv_heads, ", vocab_size ", h.vocab_size, ", seq_len ", h.seq_len,
           ") implies ", bytes_string(expected), " bytes but the file has ", file->size(), " bytes");
    if (!with_weights) return ck;
    // Zero-copy: float32 weights start at byte 28 (4-byte aligned) and are laid out as HF expects.
    const std::byte* p = file->data() + offset;
    auto take = [&](const Slot& s) {
      ck.weights.add_mapped(f32_tensor(s, p, source), file);
      p += s.numel() * 4;
    };
    take({"model.embed_tokens.weight", {V, E}});
    for (const auto& s : norm_slots(c, true)) take(s);
    for (const auto& s : matrix_slots(c)) {
      // matrix_slots lists wq..w3; the file has rms_ffn between wo and w1.
      if (s.name == layer_name(0, "mlp.gate_proj.weight"))
        for (const auto& n : norm_slots(c, false)) take(n);
      take(s);
    }
    take({"model.norm.weight", {E}});
    p += uint64_t(h.seq_len) * uint64_t(c.head_dim) * 4;  // skip freq_cis_real and freq_cis_imag
    if (!ck.shared_classifier) take({"lm_head.weight", {V, E}});
    return ck;
  }

  // Versions 1 and 2 store norms first, then the matrices in order.
  std::vector<Slot> norms = norm_slots(c, true);
  for (const auto& s : norm_slots(c, false)) norms.push_back(s);
  norms.push_back({"model.norm.weight", {E}});
  std::vector<Slot> matrices = {{"model.embed_tokens.weight", {V, E}}};
  for (const auto& s : matrix_slots(c)) matrices.push_back(s);
  if (!ck.shared_classifier) matrices.push_back({"lm_head.weight", {V, E}});

  Bytes expected = kHeaderBytes;
  for (const auto& s : norms) expected += Bytes(s.numel()) * 4;
  for (const auto& s : matrices) {
    if (ck.version == 1) {
      expected += Bytes(s.numel()) * 4;
    } else {
      if (s.numel() % ck.group_size != 0)
        fail(where, ": tensor ", s.name, " has ", s.numel(), " values, not a multiple of group_size ", ck.group_size);
      expected += Bytes(s.numel()) + Bytes(s.numel() / ck.group_size) * 4;
    }
  }
  if (file->size() != expected)
    fail(where, ": the version ", ck.version, " header (dim ", h.dim, ", hidden_dim ", h.hidden_dim, ", n_layers ", h.n_layers,
         ", n_heads ", h.n_heads, ", n_kv_heads ", h.n_kv_heads, ", vocab_size ", h.vocab_size, ", seq_len ", h.seq_len,
         ck.version == 2 ? cat(", group_size ", ck.group_size) : std::string(), ") implies ", bytes_string(expected),
         " bytes but the file has ", file->size(), " bytes");

  if (!with_weights) return ck;
  const std::byte* p = file->data() + offset;
  for (const auto& s : norms) {
    ck.weights.add_mapped(f32_tensor(s, p, source), file);
    p += s.numel() * 4;
  }
  for (const auto& s : matrices) {
    if (ck.version == 1) {
      ck.weights.add_mapped(f32_tensor(s, p, source), file);
      p += s.numel() * 4;
      continue;
    }
    // Dequantize group-wise into owned float32 storage: w[i] = q[i] * scale[i / group_size].
    const int64_t n = s.numel();
    auto values = std::make_shared<std::vector<float>>(size_t(n));  // s.shape, row-major
    const auto* q = reinterpret_cast<const int8_t*>(p);              // [n]
    const std::byte* scales = p + n;                                  // [n / group_size] float32
    for (int64_t g = 0; g < n / ck.group_size; ++g) {
      float scale;
      std::memcpy(&scale, scales + g * 4, 4);
      for (int64_t i = g * ck.group_size; i < (g + 1) * ck.group_size; ++i) (*values)[size_t(i)] = float(q[i]) * scale;
    }
    p += n + (n / ck.group_size) * 4;
    TensorRef t = f32_tensor(s, reinterpret_cast<const std::byte*>(values->data()), source);
    ck.weights.add(std::move(t), values);
  }
  return ck;
}

}  // namespace journey
