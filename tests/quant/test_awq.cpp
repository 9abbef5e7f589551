// AutoAWQ checkpoints (quant_method "awq", GEMM packing) load as Q4_1 blocks (groups of a multiple of
// 32, scales that are f16 values) or f32.
// The expected values come from tools/quant/make_awq_fixture.py: a NumPy port of AutoAWQ's own packing
// (WQLinear_GEMM.from_linear) and unpacking (packing_utils.dequantize_gemm) code, which also checks
// that unpacking its packing gives back the integers it started from (the round trip).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "assets/model.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "quant/awq.h"
#include "quant/blocks.h"
#include "quant_test_util.h"
#include "text/tokenizer.h"
#include "trace/npy.h"
#include "whole_model.h"

using namespace journey;
using namespace journey::test;

TEST_CASE("an AutoAWQ GEMM checkpoint loads as Q4_1 blocks with the weights AutoAWQ's unpacking gives") {
  const LoadedModel m = load_model(quant_data("awq-tiny"));
  bool noted = false;
  for (const std::string& note : m.notes)
    noted |= note.find("AWQ checkpoint (4-bit, group size 128, GEMM packing): 14 layers as Q4_1 blocks") == 0;
  CHECK(noted);
  CHECK_FALSE(m.weights.has("model.layers.0.self_attn.q_proj.qweight"));
  for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"}) {
    INFO(name);
    const TensorRef& w = m.weights.get(cat(name, ".weight"));
    const NpyArray expected = read_npy(quant_data(cat("awq-tiny-expected/", name, ".weight.npy")));  // [out, in]
    CHECK(w.dtype == DType::Q4_1);  // 4-bit in memory: 20 bytes per 32 weights
    CHECK(w.nbytes == size_t(expected.f32.size() / 32 * 20));
    CHECK(w.shape == expected.shape);
    CHECK(awq_weights_beyond_rounding(w, expected.f32) == 0);
    const std::vector<float> got = w.to_f32();
    size_t exact = 0;
    for (size_t i = 0; i < got.size(); ++i) exact += got[i] == expected.f32[i];
    MESSAGE(std::string(name), ": ", exact, " of ", got.size(), " weights bit-equal to AutoAWQ's unpacking");
  }
  // and the model runs: a prompt gives finite logits whose spread is that of a random model
  const auto tokenizer = load_tokenizer(quant_data("awq-tiny"));
  const Logits logits = reference_logits(m, to_int32(tokenizer->encode("Once upon a time", true)));
  double sum2 = 0;
  for (float v : logits.values) sum2 += double(v) * v;
  CHECK(std::isfinite(sum2));
  CHECK(sum2 > 0);
}

// tests/data/quantized/autoawq-tiny was written by AutoAWQ's own package (0.2.9: its search, its
// WQLinear_GEMM.from_linear packing, its save_quantized), and autoawq-tiny-expected holds what AutoAWQ's
// own code gives for it: every layer through packing_utils.dequantize_gemm (scales widened to f32, so
// exact) and the logits of its quantized model (naive f16 path) for the tokens in tokens.json
// (tools/quant/make_autoawq_fixture.sh; provenance in tests/data/quantized/PROVENANCE.md).
TEST_CASE("a checkpoint written by AutoAWQ itself loads with the weights and logits AutoAWQ gives") {
  const LoadedModel m = load_model(quant_data("autoawq-tiny"));
  const fs::path expected_dir = quant_data("autoawq-tiny-expected");
  int layers = 0;
  for (const auto& entry : fs::directory_iterator(expected_dir)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = ".weight.npy";
    if (file.size() <= suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string name = file.substr(0, file.size() - std::string(".npy").size());  // "model.layers.0.mlp.up_proj.weight"
    INFO(name);
    const TensorRef& w = m.weights.get(name);
    const NpyArray expected = read_npy(entry.path());  // [out, in]
    CHECK(w.dtype == DType::Q4_1);
    CHECK(w.shape == expected.shape);
    // journey's Q4_1 minimum is -scale * zero rounded to f16: the only difference allowed
    CHECK(awq_weights_beyond_rounding(w, expected.f32) == 0);
    ++layers;
  }
  CHECK(layers == 14);  // 2 layers x (q, k, v, o, gate, up, down)

  std::ifstream in(expected_dir / "tokens.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = meta["tokens"].get<std::vector<int32_t>>();
  const NpyArray autoawq = read_npy(expected_dir / "logits.npy");  // [T, vocab], computed by AutoAWQ in f16
  REQUIRE(autoawq.shape.size() == 2);
  const Logits expected{autoawq.shape[0], autoawq.shape[1], autoawq.f32};
  const LogitsError e = compare_logits(reference_logits(m, tokens), expected);
  MESSAGE("journey (f32 on the stored blocks) vs AutoAWQ (f16): ", e.describe());
  // AutoAWQ multiplies in f16 (x.half() @ dequantize_gemm(...), f16 norms and residuals): its logits
  // carry f16 rounding, ~1e-3 of their spread; a layer unpacked in the wrong order is off by ~1
  CHECK(e.relative_rms < 1e-2);
  CHECK(e.top1_agreement == 1.0);
}

TEST_CASE("AWQ unpacking: the nibble order of one int32 (AutoAWQ packs outputs 0,2,4,6,1,3,5,7)") {
  // outputs 0..7 of input 0 hold 1..8; zero point 0; scale 1 (so the weight is the integer itself)
  int32_t qweight = 0;
  const int order_map[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // gemm.py: slot s holds output order_map[s]
  for (int s = 0; s < 8; ++s) qweight |= int32_t(uint32_t(order_map[s] + 1) << (4 * s));
  const int32_t qzeros = 0;
  std::vector<float> scales(8, 1.0f), w(8);
  quant::dequantize_awq_gemm(&qweight, &qzeros, scales.data(), 1, 8, 1, w.data());
  CHECK(w == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
}

// Scales stored as bf16 or f32 (a checkpoint cast after AutoAWQ wrote it in f16): where every scale
// of a layer is exactly an f16 value (Q4_1's scale type) the layer still loads as Q4_1 blocks; a
// layer with one scale that is not stays exact, widened to f32.
TEST_CASE("AWQ scales in bf16 or f32 load as Q4_1 where every one is an f16 value, else the layer is widened to f32") {
  WeightStore stored;
  read_safetensors(quant_data("awq-tiny") / "model.safetensors", stored);
  const std::string odd_layer = "model.layers.1.mlp.down_proj";
  // each scales tensor in `type`: the f16 values widened (f32), or rounded to bf16 (bf16); with
  // `nudge_one`, one scale of odd_layer moved off the f16 grid (f32 only)
  auto variant = [&](const std::string& tag, DType type, bool nudge_one) {
    const fs::path dir = quant_scratch("awq-scales-" + tag);
    for (const char* file : {"config.json", "tokenizer.model", "tokenizer_config.json"})
      fs::copy_file(quant_data("awq-tiny") / file, dir / file);
    std::vector<TensorRef> tensors;
    std::vector<std::vector<uint16_t>> halves;  // owners of the new tensors' bytes
    std::vector<std::vector<float>> floats;
    for (const auto& [name, t] : stored.all()) {
      TensorRef out = t;
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".scales") == 0) {
        REQUIRE(t.dtype == DType::F16);
        std::vector<float> values = t.to_f32();
        if (nudge_one && name == odd_layer + ".scales") values[5] *= 1.0f + 0x1p-20f;
        out.dtype = type;
        if (type == DType::F32) {
          floats.push_back(values);
          out.data = reinterpret_cast<const std::byte*>(floats.back().data());
          out.nbytes = values.size() * 4;
        } else {
          std::vector<uint16_t> bits(values.size());
          for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
          halves.push_back(std::move(bits));
          out.data = reinterpret_cast<const std::byte*>(halves.back().data());
          out.nbytes = values.size() * 2;
        }
      }
      tensors.push_back(out);
    }
    write_safetensors(dir / "model.safetensors", tensors);
    return dir;
  };
  const LoadedModel f16 = load_model(quant_data("awq-tiny"));
  {  // f32 scales equal to the f16 ones: the same Q4_1 blocks, byte for byte
    const LoadedModel m = load_model(variant("f32", DType::F32, false));
    bool noted = false;
    for (const std::string& note : m.notes) noted |= note.find("14 layers as Q4_1 blocks (4-bit in memory)") != std::string::npos;
    CHECK(noted);
    for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"}) {
      CAPTURE(name);
      const TensorRef& got = m.weights.get(name);
      const TensorRef& want = f16.weights.get(name);
      REQUIRE(got.dtype == DType::Q4_1);
      REQUIRE(got.nbytes == want.nbytes);
      CHECK(std::memcmp(got.data, want.data, got.nbytes) == 0);
    }
  }
  {  // bf16 scales (7 of f16's 10 mantissa bits): Q4_1 blocks with the weights of the bf16 scales
    const LoadedModel m = load_model(variant("bf16", DType::BF16, false));
    const TensorRef& got = m.weights.get(odd_layer + ".weight");
    CHECK(got.dtype == DType::Q4_1);
    // the exact weights of those scales: AutoAWQ's unpacking (quant::dequantize_awq_gemm) in f32
    const TensorRef& qweight = stored.get(odd_layer + ".qweight");
    const TensorRef& qzeros = stored.get(odd_layer + ".qzeros");
    std::vector<float> scales = stored.get(odd_layer + ".scales").to_f32();
    for (float& v : scales) v = bf16_to_f32(f32_to_bf16(v));
    const int64_t in = qweight.shape[0], out = qweight.shape[1] * 8;
    std::vector<int32_t> q(size_t(qweight.numel())), z(size_t(qzeros.numel()));
    std::memcpy(q.data(), qweight.data, q.size() * 4);
    std::memcpy(z.data(), qzeros.data, z.size() * 4);
    std::vector<float> expected(size_t(in * out));  // [out, in]
    quant::dequantize_awq_gemm(q.data(), z.data(), scales.data(), in, out, 128, expected.data());
    CHECK(awq_weights_beyond_rounding(got, expected) == 0);
  }
  {  // one f32 scale off the f16 grid: its layer widened to f32 (exact), the others Q4_1
    const LoadedModel m = load_model(variant("f32-odd", DType::F32, true));
    bool noted = false;
    for (const std::string& note : m.notes)
      noted |= note.find("13 layers as Q4_1 blocks (4-bit in memory), 1 dequantized to f32 at load") != std::string::npos;
    CHECK(noted);
    CHECK(m.weights.get(odd_layer + ".weight").dtype == DType::F32);
    CHECK(m.weights.get("model.layers.0.self_attn.q_proj.weight").dtype == DType::Q4_1);
  }
}

TEST_CASE("AWQ checkpoints journey cannot read are refused with the reason") {
  const fs::path dir = quant_scratch("awq-bad");
  auto variant = [&](const std::string& tag, auto edit) {
    const fs::path d = dir / tag;
    fs::copy(quant_data("awq-tiny"), d);
    std::ifstream in(d / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    edit(config["quantization_config"]);
    std::ofstream(d / "config.json") << config.dump(2);
    try {
      load_model(d);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(variant("bits", [](auto& q) { q["bits"] = 8; }).find("AWQ with 8-bit weights; journey reads 4-bit AWQ only") != std::string::npos);
  CHECK(variant("gemv", [](auto& q) { q["version"] = "gemv"; }).find("journey reads the GEMM packing only") != std::string::npos);
  CHECK(variant("gptq", [](auto& q) { q["quant_method"] = "gptq"; }).find("quant_method is \"gptq\"; journey reads \"awq\" checkpoints only") != std::string::npos);
  // a group size that does not match the stored zeros and scales: named with the shapes
  const std::string group = variant("group", [](auto& q) { q["group_size"] = 64; });
  CHECK(group.find("AWQ layer model.layers.0.mlp.down_proj: qweight [256, 16] (256 inputs, 128 outputs, group 64) needs qzeros [4, 16] and scales [4, 128], found [2, 16] and [2, 128]") != std::string::npos);
  CHECK(variant("group3", [](auto& q) { q["group_size"] = 96; }).find("input features are not a multiple of the group size 96") != std::string::npos);
}
