// Chapter 5 — the FFN and the residual stream.
// Captures, for every layer, what attention and the FFN add to the residual stream and how the
// stream grows; checks the identity layer_out = resid_attn + ffn_out at every layer.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "reference/reference_backend.h"
#include "text/tokenizer.h"
#include "trace/capture_sink.h"

using namespace journey;

// Norm of row `row` of a [T, N] capture.
static double row_norm(const CapturedTensor& x, int64_t row) {
  const int64_t N = x.shape.back();
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += double(x.data[row * N + i]) * x.data[row * N + i];
  return std::sqrt(sum);
}

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_reference_backend(model);
  const ModelConfig& c = model.config;

  const std::vector<int> ids = tokenizer->encode("Once upon a time", /*add_special=*/true);
  const int64_t T = int64_t(ids.size()), last = T - 1;
  backend->allocate_kv_cache(1, T);
  CaptureSink sink;
  sink.want(Stage::embeddings);
  for (Stage s : {Stage::attn_out, Stage::resid_attn, Stage::gate, Stage::act, Stage::ffn_out, Stage::layer_out})
    sink.want_all_layers(s);
  backend->forward(ForwardBatch{{SequenceInput{0, {ids.begin(), ids.end()}, 0, {0}, false}}}, &sink);

  std::cout << "# Chapter 5: the residual stream of the last token (\"" << tokenizer->piece(ids[last])
            << "\") through " << c.num_layers << " layers\n\n";
  std::printf("%-6s %12s %12s %12s %12s %14s\n", "layer", "|stream in|", "|attention|", "|FFN|", "|stream out|",
              "gate>0 share");
  double stream_in = row_norm(sink.get(Stage::embeddings), last);
  double worst = 0;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const CapturedTensor& resid = sink.get(Stage::resid_attn, layer);  // [T, E]
    const CapturedTensor& ffn = sink.get(Stage::ffn_out, layer);       // [T, E]
    const CapturedTensor& out = sink.get(Stage::layer_out, layer);     // [T, E]
    const CapturedTensor& gate = sink.get(Stage::gate, layer);         // [T, F]
    // SwiGLU: silu(gate) passes positive gates almost unchanged and squashes negative ones.
    int64_t open = 0;
    for (int64_t f = 0; f < c.intermediate_size; ++f) open += gate.data[last * c.intermediate_size + f] > 0;
    std::printf("%-6d %12.3f %12.3f %12.3f %12.3f %13.0f%%\n", layer, stream_in,
                row_norm(sink.get(Stage::attn_out, layer), last), row_norm(ffn, last), row_norm(out, last),
                100.0 * open / c.intermediate_size);
    for (size_t i = 0; i < out.data.size(); ++i)
      worst = std::max(worst, double(std::abs(out.data[i] - (resid.data[i] + ffn.data[i]))));
    stream_in = row_norm(out, last);
  }
  std::printf("\nlayer_out - (resid_attn + ffn_out): max |difference| = %.2e over every layer and token\n", worst);
  if (worst > 1e-6) {
    std::cerr << "MISMATCH: the residual identity does not hold\n";
    return 1;
  }
  return 0;
} catch (const journey::Error& e) {
  std::cerr << "ch05: " << e.what() << "\n";
  return 1;
}
