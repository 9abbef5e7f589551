// AWQ quantization (quant/awq, quant/awq_search, quant/awq_model, journey quantize --type awq):
//   - AutoAWQ's pseudo-quantization and GEMM packing: hand-made values, and the round trip
//     quantize -> pack -> the loader's unpacking;
//   - the scale search on calibration activations journey's own trace recorded from the real
//     tinystories-tok105 model (group 128): AWQ's output error against plain RTN with the same groups,
//     per group of linears and in total, printed and asserted lower;
//   - whole checkpoints written from stories260K: journey's loader and the NumPy port of AutoAWQ's
//     unpacking (tools/quant/make_awq_fixture.py --read) give the same weights bit for bit, and the
//     model's distributions over the shipped text are closer to f32's than RTN's;
//   - the command, and calibration dumps that do not fit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/untrusted.h"
#include "assets/model.h"
#include "assets/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "engine/perplexity.h"
#include "quant/awq.h"
#include "quant/awq_model.h"
#include "quant/awq_search.h"
#include "quant_test_util.h"
#include "reference/reference_backend.h"
#include "text/tokenizer.h"
#include "trace/npy.h"

using namespace journey;
using namespace journey::test;

namespace {

// The calibration text cut into windows of `context` tokens, BOS first (as a trace of each would run).
std::vector<std::vector<int32_t>> calibration_windows(const Tokenizer& tokenizer, int64_t context) {
  const std::vector<int> ids = tokenizer.encode(read_whole_file("data/texts/calibration-original.txt"), true, false);
  std::vector<std::vector<int32_t>> windows;
  for (size_t begin = 0; begin < ids.size(); begin += size_t(context)) {
    std::vector<int32_t> w(ids.begin() + long(begin), ids.begin() + long(std::min(ids.size(), begin + size_t(context))));
    w[0] = *tokenizer.bos_id();
    if (w.size() >= 16) windows.push_back(std::move(w));
  }
  return windows;
}

quant::AwqLayerWeights layer_weights(const LoadedModel& m, int layer) {
  auto get = [&](WeightRole role) { return m.weights.get(weight_spec(m.config, role, layer).name).to_f32(); };
  return {get(WeightRole::attn_norm), get(WeightRole::ffn_norm), get(WeightRole::q_proj),
          get(WeightRole::k_proj),    get(WeightRole::v_proj),   get(WeightRole::o_proj),
          get(WeightRole::gate_proj), get(WeightRole::up_proj),  get(WeightRole::down_proj)};
}

int run(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output->append(buffer, n);
  const int raw = pclose(pipe);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

}  // namespace

TEST_CASE("AWQ pseudo-quantization by hand: scale, zero point and integers of one group") {
  // one row, group of 8: min -0.3, max 0.45 -> scale = 0.75 / 15 = 0.05 (exact in f16? 0.05 is not:
  // f16(0.05) = 0.0500030517578125), zero = -round(-0.3 / s) = 6, q = round(w / s) + 6
  const std::vector<float> w = {-0.3f, -0.2f, -0.1f, 0.0f, 0.1f, 0.2f, 0.3f, 0.45f};
  const quant::AwqLinear l = quant::quantize_awq_linear(w.data(), 1, 8, 8);
  CHECK(f16_to_f32(l.scales[0]) == f16_to_f32(f32_to_f16(0.75f / 15)));
  CHECK(l.zeros[0] == 6);
  CHECK(std::vector<int>(l.q.begin(), l.q.end()) == std::vector<int>{0, 2, 4, 6, 8, 10, 12, 15});
  const std::vector<float> back = quant::dequantize_awq_linear(l);
  for (size_t i = 0; i < w.size(); ++i) CHECK(back[i] == doctest::Approx(w[i]).epsilon(0.02));
  // a constant group: the range is clamped at 1e-5, every weight lands on the zero point's level
  const std::vector<float> flat(8, 0.25f);
  const quant::AwqLinear c = quant::quantize_awq_linear(flat.data(), 1, 8, 8);
  CHECK(c.zeros[0] == 0);  // -round(0.25 / s) < 0, clamped to 0
  CHECK(c.q[0] == 15);     // round(0.25 / s) is huge, clamped to 15
  CHECK_THROWS_WITH_AS(quant::quantize_awq_linear(w.data(), 1, 8, 3), doctest::Contains("8 input features are not a multiple of the group size 3"), Error);
}

TEST_CASE("AWQ packing round trip: quantize -> pack_awq_gemm -> the loader's dequantize_awq_gemm, group 128") {
  const int64_t out = 24, in = 256, group = 128;
  std::vector<float> w(size_t(out * in));  // [out, in]
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(std::sin(0.37 * double(i)) * 0.05 + (i % 7 == 0 ? 0.2 : 0.0));
  const quant::AwqLinear l = quant::quantize_awq_linear(w.data(), out, in, group);
  const quant::AwqGemmTensors t = quant::pack_awq_gemm(l);
  CHECK(t.qweight.size() == size_t(in * out / 8));
  CHECK(t.qzeros.size() == size_t(in / group * out / 8));
  std::vector<float> scales(t.scales.size());  // [in/group, out]
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = f16_to_f32(t.scales[i]);
  std::vector<float> loaded(size_t(out * in));  // [out, in]
  quant::dequantize_awq_gemm(t.qweight.data(), t.qzeros.data(), scales.data(), in, out, group, loaded.data());
  CHECK(loaded == quant::dequantize_awq_linear(l));
  // output 1 of input 0 sits in bits 16..19 of qweight[0, 0] (AutoAWQ's order 0, 2, 4, 6, 1, 3, 5, 7)
  CHECK(int((uint32_t(t.qweight[0]) >> 16) & 0xF) == int(l.q[size_t(1 * in + 0)]));
  CHECK_THROWS_WITH_AS(quant::pack_awq_gemm(quant::quantize_awq_linear(w.data(), 12, 128, 128)),
                       doctest::Contains("12 output features are not a multiple of 8"), Error);
}

TEST_CASE("AWQ's search lowers the output error of every block vs RTN INT4 with the same groups (tinystories-tok105, group 128)") {
  // t105 is a real trained model whose rows are 128 wide: q/k/v/o and gate/up quantize at group 128;
  // down_proj's 352 inputs are not whole groups and stay float (not searched).
  const LoadedModel model = load_model(quant_data("t105-f32.gguf"));
  const auto tokenizer = load_tokenizer(model.path);
  const fs::path dir = quant_scratch("awq-t105-calibration");
  auto backend = make_reference_backend(model);
  const std::vector<fs::path> dumps =
      quant::record_awq_calibration(*backend, model.path, calibration_windows(*tokenizer, 128), dir);
  const quant::AwqCalibration calibration = quant::AwqCalibration::open(dumps, model.config, model.path);
  MESSAGE("calibration: ", calibration.tokens(), " tokens in ", calibration.sequences(), " traces of the f32 model");
  CHECK(calibration.tokens() > 1500);

  const quant::AwqQuantizable qz = quant::awq_quantizable(model.config, 128);
  CHECK((qz.q && qz.k && qz.v && qz.o && qz.gate && qz.up && !qz.down));
  double rtn_sum = 0, awq_sum = 0;
  int improved = 0, groups = 0;
  for (int l = 0; l < int(model.config.num_layers); ++l) {
    quant::AwqLayerWeights w = layer_weights(model, l);
    const quant::AwqLayerWeights original = w;
    const auto found = quant::search_and_apply_awq_scales(w, model.config, calibration.layer(l), calibration.row_begin(), qz, {});
    REQUIRE(found.size() == 4);
    for (const quant::AwqScaleSearch& s : found) {
      if (s.errors.empty()) {
        CHECK(s.group == "down_proj");  // the only group that is not quantized
        continue;
      }
      MESSAGE("layer ", l, " ", s.group, ": relative output error of ", s.error_of, " RTN ", s.rtn_error / s.output_power,
              ", AWQ ", s.awq_error / s.output_power, " (alpha ", s.alpha, ")");
      CHECK(s.awq_error <= s.rtn_error);  // alpha = 0 is RTN and is on the grid
      CHECK(s.rtn_error == s.errors[0]);
      rtn_sum += s.rtn_error / s.output_power;
      awq_sum += s.awq_error / s.output_power;
      ++groups;
      improved += s.awq_error < s.rtn_error;
      if (s.group == "o_proj") CHECK(s.scales.empty());  // GQA (8 query heads, 4 KV heads): not scaled
    }
    // the scales were folded: q's columns multiplied by s, the norm before it divided by s
    const quant::AwqScaleSearch& qkv = found[0];
    if (!qkv.scales.empty())
      for (int i : {0, 17, 127}) {
        CHECK(w.attn_norm[size_t(i)] == doctest::Approx(original.attn_norm[size_t(i)] / qkv.scales[size_t(i)]));
        CHECK(w.q[size_t(5 * 128 + i)] == doctest::Approx(original.q[size_t(5 * 128 + i)] * qkv.scales[size_t(i)]));
      }
  }
  MESSAGE("sum over ", groups, " groups of the relative output errors: RTN ", rtn_sum, ", AWQ ", awq_sum, " (", improved,
          " groups improved)");
  CHECK(awq_sum < rtn_sum);
  CHECK(improved >= groups / 2);
}

TEST_CASE("AWQ checkpoints of stories260K: journey's loader and AutoAWQ's unpacking (NumPy port) agree; AWQ beats RTN on the text") {
  // stories260K's rows are 64 wide: at group 64, q/k/v/o quantize; gate/up (172 outputs, not a
  // multiple of 8) and down (172 inputs) stay f16 and are listed in modules_to_not_convert.
  const fs::path dir = quant_scratch("awq-stories");
  const LoadedModel f32 = load_model("data/stories260K");
  const auto tokenizer = load_tokenizer(f32.path);
  auto backend = make_reference_backend(f32);
  const std::vector<fs::path> dumps = quant::record_awq_calibration(*backend, f32.path, calibration_windows(*tokenizer, 256), dir / "calibration");

  quant::AwqQuantizeOptions o;
  o.input = "data/stories260K";
  o.calibration = dumps;
  o.search.group = 64;
  o.output = dir / "awq";
  const quant::AwqQuantizeReport awq = quant::quantize_model_awq(o);
  o.output = dir / "rtn";
  o.search.search = false;
  const quant::AwqQuantizeReport rtn = quant::quantize_model_awq(o);
  CHECK(awq.quantized.size() == 20);  // 4 per layer
  CHECK(awq.not_converted.size() == 15);
  CHECK(rtn.layers.size() == 5);  // RTN with calibration still reports its errors
  CHECK(awq.tensor_bytes == quant::awq_checkpoint_bytes(f32.config, 64));  // the plan from config.json alone

  const nlohmann::json config = nlohmann::json::parse(read_whole_file(dir / "awq/config.json"));
  CHECK(config["quantization_config"]["group_size"] == 64);
  CHECK(config["quantization_config"]["modules_to_not_convert"].size() == 15);
  CHECK(fs::exists(dir / "awq/tokenizer.model"));

  const LoadedModel loaded = load_model(dir / "awq");
  // every INT4 layer: the loader's weights (Q4_1 blocks, group 64) == the NumPy port's dequantization
  // of the file, but for the f16 rounding of the blocks' minimums
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    MESSAGE("SKIPPED the NumPy check: /usr/bin/python3 with numpy is not available");
  } else {
    const std::string cmd = cat("/usr/bin/python3 tools/quant/make_awq_fixture.py --read ", (dir / "awq").string(), " --out ",
                                (dir / "numpy").string());
    REQUIRE(std::system(cmd.c_str()) == 0);
    for (const std::string& module : awq.quantized) {
      INFO(module);
      const NpyArray expected = read_npy(dir / "numpy" / (module + ".weight.npy"));
      const TensorRef& t = loaded.weights.get(module + ".weight");
      CHECK(t.shape == expected.shape);
      CHECK(t.dtype == DType::Q4_1);
      CHECK(awq_weights_beyond_rounding(t, expected.f32) == 0);
    }
  }
  // over the shipped text, the AWQ model's next-token distributions are closer to f32's than RTN's
  const std::vector<int> ids = tokenizer->encode(read_whole_file("data/texts/tinystories-original.txt"), true, false);
  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  auto base = make_reference_backend(f32);
  PerplexityOptions p;
  p.context = 256;
  p.bos = tokenizer->bos_id();
  p.base = base.get();
  auto awq_backend = make_reference_backend(loaded);
  auto rtn_backend = make_reference_backend(load_model(dir / "rtn"));
  const PerplexityReport a = measure_perplexity(*awq_backend, tokens, p);
  const PerplexityReport r = measure_perplexity(*rtn_backend, tokens, p);
  MESSAGE("stories260K, attention INT4 g64: AWQ PPL ", a.ppl, " mean KL ", a.mean_kl, " top-1 ", a.top1_agreement, "; RTN PPL ",
          r.ppl, " mean KL ", r.mean_kl, " top-1 ", r.top1_agreement, "; f32 PPL ", a.base_ppl);
  CHECK(a.mean_kl < r.mean_kl);
}

TEST_CASE("journey quantize --type awq: the command on traces journey trace wrote, and what it refuses") {
  const fs::path dir = quant_scratch("awq-cli");
  const std::string cli = JOURNEY_CLI;
  std::string out;
  for (int i = 0; i < 2; ++i) {
    const char* prompt = i == 0 ? "Once upon a time, there was a little rabbit named Hop." : "Olivia had a yellow umbrella.";
    REQUIRE(run(cat(cli, " trace '", prompt, "' --out ", (dir / cat("c", i)).string(),
                    " --max-tokens 4 --temperature 0 --device reference --stages attn_norm,attn_context,ffn_norm,act"),
                &out) == 0);
  }
  out.clear();
  const int status = run(cat(cli, " quantize data/stories260K --type awq --group-size 64 --calibration ", (dir / "c0").string(), " ",
                             (dir / "c1").string(), " --out ", (dir / "awq").string()),
                         &out);
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find("layer 0 q_proj,k_proj,v_proj") != std::string::npos);
  CHECK(out.find("layer 4 down_proj              skipped: not quantized: 172 inputs are not whole groups of 64") != std::string::npos);
  CHECK(out.find("20 INT4 linear layers (group 64, zero point, GEMM packing), 15 kept f16") != std::string::npos);
  out.clear();
  CHECK(run(cat(cli, " generate --model ", (dir / "awq").string(), " 'Once upon a time' --max-tokens 8 --temperature 0 --device reference"), &out) == 0);

  // refused: an existing output, a GGUF input, no calibration, a trace of another model, a trace without the stages
  out.clear();
  CHECK(run(cat(cli, " quantize data/stories260K --type awq --calibration ", (dir / "c0").string(), " --out ", (dir / "awq").string()), &out) == 1);
  CHECK(out.find("already exists") != std::string::npos);
  out.clear();
  CHECK(run(cat(cli, " quantize ", quant_data("t105-f32.gguf").string(), " --type awq --out ", (dir / "x").string()), &out) == 1);
  CHECK(out.find("AWQ quantizes Hugging Face directories") != std::string::npos);
  out.clear();
  CHECK(run(cat(cli, " quantize data/stories260K --type awq --out ", (dir / "x").string()), &out) == 1);
  CHECK(out.find("needs calibration dumps (--calibration)") != std::string::npos);
  const LoadedModel f32 = load_model("data/stories260K");
  CHECK_THROWS_WITH_AS(quant::AwqCalibration::open({dir / "c0"}, f32.config, quant_data("awq-tiny")),
                       doctest::Contains("stories260K (sha256:"), Error);
  out.clear();
  REQUIRE(run(cat(cli, " trace 'Once' --out ", (dir / "partial").string(), " --max-tokens 1 --stages attn_norm,act"), &out) == 0);
  CHECK_THROWS_WITH_AS(quant::AwqCalibration::open({dir / "partial"}, f32.config, "data/stories260K"),
                       doctest::Contains("no L0.attn_context at step 0; record with --stages attn_norm,attn_context,ffn_norm,act"), Error);
  // a trace filtered to some steps lacks the others' activations
  out.clear();
  REQUIRE(run(cat(cli, " trace 'Once upon' --out ", (dir / "steps").string(), " --max-tokens 4 --steps 1-3 --stages attn_norm,attn_context,ffn_norm,act"), &out) == 0);
  CHECK_THROWS_WITH_AS(quant::AwqCalibration::open({dir / "steps"}, f32.config, "data/stories260K"),
                       doctest::Contains("at step 0; record with --stages attn_norm,attn_context,ffn_norm,act, every layer and every step"), Error);
}
