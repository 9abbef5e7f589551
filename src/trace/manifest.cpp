#include "trace/manifest.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <type_traits>

#include <openssl/evp.h>

#include "core/error.h"
#include "trace/stages.h"
#include "core/untrusted.h"

namespace journey {
namespace {

using nlohmann::json;

// An integer of type I from a JSON value: get<int>() of 1e20 is undefined behaviour, of 2^40 a
// silent truncation, so the value is checked first (fuzz/crashes/trace/version-1e20.txt).
template <typename I>
I checked_integer(const json& v, const char* key, const std::string& where, const std::string& context) {
  const bool fits = v.is_number_integer() &&
                    (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<I>::max())
                                            : v.get<int64_t>() >= int64_t(std::numeric_limits<I>::min()) &&
                                                  v.get<int64_t>() <= int64_t(std::numeric_limits<I>::max()));
  if (!fits)
    fail(where, ": field \"", key, "\" of ", context, " must hold integers that fit in ", sizeof(I) * 8, " bits, found ",
         v.type_name(), " ", excerpt_json(v));
  return v.get<I>();
}

template <typename T>
struct is_integer_vector : std::false_type {};
template <typename I>
struct is_integer_vector<std::vector<I>> : std::is_integral<I> {};

// Reading a field with a message that names the file, the field and what was found.
template <typename T>
T field(const json& object, const char* key, const std::string& where, const std::string& context) {
  if (!object.is_object()) fail(where, ": ", context, " is not a JSON object");
  auto it = object.find(key);
  if (it == object.end()) fail(where, ": ", context, " has no field \"", key, "\"");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return checked_integer<T>(*it, key, where, context);
  } else if constexpr (is_integer_vector<T>::value) {
    if (!it->is_array()) fail(where, ": field \"", key, "\" of ", context, " must be a list of integers, found ", it->type_name());
    T out;
    for (const json& item : *it) out.push_back(checked_integer<typename T::value_type>(item, key, where, context));
    return out;
  } else {
    try {
      return it->get<T>();
    } catch (const json::exception& e) {
      fail(where, ": field \"", key, "\" of ", context, " has the wrong type (", it->type_name(), "): ", e.what());
    }
  }
}

template <typename T>
T field_or(const json& object, const char* key, T fallback, const std::string& where, const std::string& context) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  return field<T>(object, key, where, context);
}

json sampled_to_json(const ManifestSampled& s) {
  json top = json::array();
  for (const auto& alt : s.top) top.push_back({{"id", alt.id}, {"piece", alt.piece}, {"prob", alt.prob}});
  return {{"id", s.id}, {"piece", s.piece}, {"prob", s.prob}, {"top", top}};
}

ManifestSampled sampled_from_json(const json& j, const std::string& where, const std::string& ctx) {
  ManifestSampled s;
  s.id = field<int32_t>(j, "id", where, ctx);
  s.piece = field_or<std::string>(j, "piece", "", where, ctx);
  s.prob = field_or<double>(j, "prob", 0.0, where, ctx);
  if (j.contains("top"))
    for (const auto& alt : j.at("top"))
      s.top.push_back({field<int32_t>(alt, "id", where, ctx + ".top"), field_or<std::string>(alt, "piece", "", where, ctx),
                       field_or<double>(alt, "prob", 0.0, where, ctx + ".top")});
  return s;
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    fail("sha256 failed (OpenSSL EVP_Digest)");
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < length; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

}  // namespace

const ManifestTensor* Manifest::find(const std::string& stage, int layer, int step) const {
  for (const auto& t : tensors)
    if (t.stage == stage && t.layer == layer && t.step == step) return &t;
  return nullptr;
}

std::string tensor_name(const std::string& stage, int layer) {
  return layer < 0 ? stage : cat("L", layer, ".", stage);
}

std::string tensor_file_name(const std::string& stage, int layer, int step) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "s%03d.", step);
  return cat(prefix, tensor_name(stage, layer), ".npy");
}

std::vector<ManifestStage> describe_stages(const Manifest& manifest, const std::string& backend) {
  std::vector<bool> used(kStages.size(), false);
  for (const auto& t : manifest.tensors)
    if (auto stage = stage_from_name(t.stage)) used[static_cast<size_t>(*stage)] = true;
  for (const auto& s : manifest.steps)
    if (s.sampled) used[static_cast<size_t>(Stage::sampled)] = true;
  std::vector<ManifestStage> out;
  for (const StageInfo& info : kStages) {
    if (!used[static_cast<size_t>(info.stage)]) continue;
    ManifestStage s;
    s.name = std::string(info.name);
    s.scope = info.scope == StageScope::Layer ? "layer" : "global";
    for (std::string_view rest = info.axes; !rest.empty();) {
      const size_t comma = rest.find(',');
      s.axes.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    constexpr std::string_view kForward = "forward: ";
    // Backends live in src/<name>/<name>_backend.cpp; a name that is no such word says nothing.
    const bool known = !backend.empty() && std::all_of(backend.begin(), backend.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (info.made_by.substr(0, kForward.size()) == kForward)
      s.made_in = cat(known ? cat("src/", backend, "/", backend, "_backend.cpp") : std::string("the backend's"),
                      " forward(): ", info.made_by.substr(kForward.size()));
    else
      s.made_in = std::string(info.made_by);
    s.description = std::string(info.doc);
    out.push_back(std::move(s));
  }
  return out;
}

json manifest_to_json(const Manifest& m) {
  json tokens = json::array();
  for (const auto& t : m.tokens) tokens.push_back({{"id", t.id}, {"piece", t.piece}});
  json steps = json::array();
  for (const auto& s : m.steps) {
    json step = {{"step", s.step}, {"kind", s.kind}, {"positions", s.positions}};
    if (s.sampled) step["sampled"] = sampled_to_json(*s.sampled);
    if (!s.kv_cache.is_null()) step["kv_cache"] = s.kv_cache;
    steps.push_back(step);
  }
  json tensors = json::array();
  for (const auto& t : m.tensors) {
    json entry = {{"name", t.name}, {"stage", t.stage}, {"layer", t.layer}, {"step", t.step},
                  {"shape", t.shape}, {"dtype", t.dtype}, {"file", t.file}};
    if (!t.heads.empty()) entry["heads"] = t.heads;
    tensors.push_back(entry);
  }
  json stages = json::array();
  for (const auto& s : m.stages)
    stages.push_back({{"name", s.name}, {"scope", s.scope}, {"axes", s.axes}, {"made_in", s.made_in},
                      {"description", s.description}});
  json pieces = json::object();
  for (const auto& [id, piece] : m.pieces) pieces[std::to_string(id)] = piece;
  json out = {
      {"format", m.format},
      {"version", m.version},
      {"generated_by", {{"tool", m.generated_by_tool}, {"command", m.generated_by_command}}},
      {"model", {{"path", m.model.path}, {"architecture", m.model.architecture}, {"config", m.model.config},
                 {"hash", m.model.hash}}},
      {"settings", m.settings},
      {"prompt", m.prompt},
      {"template_text", m.template_text},
      {"tokens", tokens},
      {"steps", steps},
      {"stages", stages},
      {"pieces", pieces},
      {"tensors", tensors},
  };
  if (m.tensor_parallel) {
    out["tensor_parallel"] = {{"rank", m.tensor_parallel->rank},
                              {"world_size", m.tensor_parallel->world_size},
                              {"shard", m.tensor_parallel->shard},
                              {"partials", m.tensor_parallel->partials}};
    if (!m.tensor_parallel->transport.empty()) out["tensor_parallel"]["transport"] = m.tensor_parallel->transport;
  }
  return out;
}

Manifest manifest_from_json(const json& j, const std::string& where) {
  Manifest m;
  m.format = field<std::string>(j, "format", where, "the manifest");
  if (m.format != kTraceFormat)
    fail(where, ": field \"format\" is \"", m.format, "\", expected \"", kTraceFormat, "\"");
  m.version = field<int>(j, "version", where, "the manifest");
  if (m.version != kTraceVersion)
    fail(where, ": dump format version ", m.version, " is not supported (this build reads version ", kTraceVersion, ")");
  if (j.contains("generated_by")) {
    const json& g = j.at("generated_by");
    m.generated_by_tool = field_or<std::string>(g, "tool", "", where, "generated_by");
    m.generated_by_command = field_or<std::string>(g, "command", "", where, "generated_by");
  }
  if (j.contains("model")) {
    const json& model = j.at("model");
    m.model.path = field_or<std::string>(model, "path", "", where, "model");
    m.model.architecture = field_or<std::string>(model, "architecture", "", where, "model");
    if (model.contains("config")) m.model.config = model.at("config");
    m.model.hash = field_or<std::string>(model, "hash", "", where, "model");
  }
  if (j.contains("settings")) m.settings = j.at("settings");
  if (j.contains("tensor_parallel")) {
    const json& tp = j.at("tensor_parallel");
    ManifestTensorParallel p;
    p.world_size = field<int>(tp, "world_size", where, "tensor_parallel");
    p.rank = field<int>(tp, "rank", where, "tensor_parallel");
    if (p.world_size < 1 || p.rank < 0 || p.rank >= p.world_size)
      fail(where, ": tensor_parallel.rank ", p.rank, " is outside a group of world_size ", p.world_size);
    if (tp.contains("shard")) p.shard = tp.at("shard");
    if (tp.contains("partials")) p.partials = tp.at("partials");  // optional: dumps before the partial stages lack it
    p.transport = field_or<std::string>(tp, "transport", "", where, "tensor_parallel");
    m.tensor_parallel = p;
  }
  m.prompt = field_or<std::string>(j, "prompt", "", where, "the manifest");
  m.template_text = field_or<std::string>(j, "template_text", "", where, "the manifest");
  for (const auto& t : field_or<json>(j, "tokens", json::array(), where, "the manifest"))
    m.tokens.push_back({field<int32_t>(t, "id", where, "tokens[]"), field_or<std::string>(t, "piece", "", where, "tokens[]")});
  for (const auto& s : field_or<json>(j, "steps", json::array(), where, "the manifest")) {
    ManifestStep step;
    step.step = field<int>(s, "step", where, "steps[]");
    const std::string ctx = cat("steps[", step.step, "]");
    step.kind = field<std::string>(s, "kind", where, ctx);
    if (step.kind != "prefill" && step.kind != "decode")
      fail(where, ": ", ctx, ".kind is \"", step.kind, "\", expected \"prefill\" or \"decode\"");
    step.positions = field_or<std::vector<int64_t>>(s, "positions", {}, where, ctx);
    if (s.contains("sampled") && !s.at("sampled").is_null()) step.sampled = sampled_from_json(s.at("sampled"), where, ctx + ".sampled");
    if (s.contains("kv_cache")) step.kv_cache = s.at("kv_cache");
    m.steps.push_back(step);
  }
  for (const auto& t : field_or<json>(j, "tensors", json::array(), where, "the manifest")) {
    ManifestTensor tensor;
    tensor.name = field<std::string>(t, "name", where, "tensors[]");
    const std::string ctx = cat("tensor \"", tensor.name, "\"");
    tensor.stage = field<std::string>(t, "stage", where, ctx);
    tensor.layer = field_or<int>(t, "layer", -1, where, ctx);
    tensor.step = field_or<int>(t, "step", 0, where, ctx);
    tensor.shape = field<std::vector<int64_t>>(t, "shape", where, ctx);
    tensor.dtype = field<std::string>(t, "dtype", where, ctx);
    if (tensor.dtype != "f32" && tensor.dtype != "i32")
      fail(where, ": ", ctx, " has dtype \"", tensor.dtype, "\", expected \"f32\" or \"i32\"");
    tensor.file = field<std::string>(t, "file", where, ctx);
    if (tensor.file.find("..") != std::string::npos || (!tensor.file.empty() && tensor.file.front() == '/'))
      fail(where, ": ", ctx, " names file \"", tensor.file, "\" outside the dump directory");
    tensor.heads = field_or<std::vector<int>>(t, "heads", {}, where, ctx);
    m.tensors.push_back(tensor);
  }
  const json pieces = field_or<json>(j, "pieces", json::object(), where, "the manifest");
  for (const auto& [key, value] : pieces.items()) {
    int32_t id = 0;
    try {
      id = std::stoi(key);
    } catch (const std::exception&) {
      fail(where, ": \"pieces\" has the key \"", key, "\", expected a token id");
    }
    if (!value.is_string()) fail(where, ": pieces[\"", key, "\"] is ", value.type_name(), ", expected a string");
    m.pieces[id] = value.get<std::string>();
  }
  for (const auto& s : field_or<json>(j, "stages", json::array(), where, "the manifest")) {
    ManifestStage stage;
    stage.name = field<std::string>(s, "name", where, "stages[]");
    const std::string ctx = cat("stage \"", stage.name, "\"");
    stage.scope = field_or<std::string>(s, "scope", "", where, ctx);
    stage.axes = field_or<std::vector<std::string>>(s, "axes", {}, where, ctx);
    stage.made_in = field_or<std::string>(s, "made_in", "", where, ctx);
    stage.description = field_or<std::string>(s, "description", "", where, ctx);
    m.stages.push_back(std::move(stage));
  }
  return m;
}

void write_manifest(const std::filesystem::path& path, const Manifest& manifest) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) fail("cannot open ", path.string(), " for writing");
  // Token pieces may be partial UTF-8 (byte-fallback pieces); replace rather than throw.
  out << manifest_to_json(manifest).dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  if (!out) fail("error while writing ", path.string());
}

Manifest read_manifest(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open ", path.string(), " (a dump directory holds manifest.json)");
  std::ostringstream text;
  text << in.rdbuf();
  // Depth checked before parsing: copying a 20k-deep "config" overflowed the stack (fuzz/crashes/trace).
  return manifest_from_json(parse_untrusted_json(text.str(), path.string()), path.string());
}

std::string model_fingerprint(const std::filesystem::path& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("cannot read ", p.string(), " for the model fingerprint");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string material;
  if (fs::is_directory(model_path, ec)) {
    if (fs::exists(model_path / "config.json")) material = slurp(model_path / "config.json");
    std::vector<fs::path> weights;
    for (const auto& entry : fs::directory_iterator(model_path))
      if (entry.is_regular_file() && entry.path().extension() == ".safetensors") weights.push_back(entry.path());
    std::sort(weights.begin(), weights.end());
    for (const auto& w : weights) material += cat(w.filename().string(), " ", fs::file_size(w), "\n");
  } else if (fs::is_regular_file(model_path, ec)) {
    material = cat(model_path.filename().string(), " ", fs::file_size(model_path), "\n");
  } else {
    fail("model fingerprint: ", model_path.string(), " is neither a directory nor a file");
  }
  return "sha256:" + sha256_hex(material);
}

ManifestModel manifest_model(const std::filesystem::path& path, const ModelConfig& c) {
  ManifestModel m;
  m.path = path.string();
  m.architecture = c.architecture;
  m.config = {{"architecture", c.architecture},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"head_dim", c.head_dim},
              {"vocab_size", c.vocab_size},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rope_theta", c.rope_theta},
              {"rms_norm_eps", c.rms_norm_eps},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"attention_bias", c.attention_bias},
              {"qk_norm", c.qk_norm},
              {"rope_layout", c.rope_layout == RopeLayout::HalfSplit ? "half_split" : "interleaved"}};
  m.hash = model_fingerprint(path);
  return m;
}

}  // namespace journey
