// Chapter 4 — attention in one layer, printed.
// Captures layer 0's q, k (after RoPE), v, the scores with the causal mask, the softmax weights
// and the weighted sum for a short prompt; shows head 0; then recomputes one row by hand to check.
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

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_reference_backend(model);
  const ModelConfig& c = model.config;
  const int64_t H = c.num_heads, KVH = c.num_kv_heads, D = c.head_dim;
  const int layer = 0, head = 0;

  const std::vector<int> ids = tokenizer->encode("Once upon a time", /*add_special=*/true);
  const int64_t T = int64_t(ids.size());
  backend->allocate_kv_cache(1, T);
  CaptureSink sink;
  for (Stage s : {Stage::q_rope, Stage::k_rope, Stage::v, Stage::attn_scores, Stage::attn_weights, Stage::attn_context})
    sink.want(s, layer);
  backend->forward(ForwardBatch{{SequenceInput{0, {ids.begin(), ids.end()}, 0, {0}, false}}}, &sink);
  const CapturedTensor& q = sink.get(Stage::q_rope, layer);             // [T, H, D]
  const CapturedTensor& k = sink.get(Stage::k_rope, layer);             // [T, KVH, D]
  const CapturedTensor& v = sink.get(Stage::v, layer);                  // [T, KVH, D]
  const CapturedTensor& scores = sink.get(Stage::attn_scores, layer);   // [H, T, P]
  const CapturedTensor& weights = sink.get(Stage::attn_weights, layer); // [H, T, P]
  const CapturedTensor& context = sink.get(Stage::attn_context, layer); // [T, H*D]

  std::cout << "# Chapter 4: attention, layer " << layer << ", head " << head << " of " << H << " (" << KVH
            << " key/value heads: query head h reads kv head h / " << H / KVH << ")\n\ntokens:";
  for (int id : ids) std::cout << " " << tokenizer->piece(id);
  std::cout << "\n\nscores = q . k / sqrt(" << D << "), future positions masked to -inf:\n";
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t p = 0; p < T; ++p) {
      const float s = scores.at({head, t, p});
      if (std::isinf(s)) std::printf("   -inf"); else std::printf("%7.3f", s);
    }
    std::cout << "\n";
  }
  std::cout << "\nweights = softmax(scores) row by row (each row sums to 1):\n";
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t p = 0; p < T; ++p) std::printf("%7.3f", weights.at({head, t, p}));
    std::cout << "\n";
  }

  // Check by hand for the last token: score, softmax and weighted sum of values.
  const int64_t t = T - 1, kv_head = head / (H / KVH);
  std::vector<double> w(T);
  double max_score = -1e30, total = 0;
  for (int64_t p = 0; p < T; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(q.at({t, head, d})) * k.at({p, kv_head, d});
    w[p] = dot / std::sqrt(double(D));
    max_score = std::max(max_score, w[p]);
  }
  for (auto& x : w) total += (x = std::exp(x - max_score));
  double max_error = 0;
  for (int64_t d = 0; d < D; ++d) {
    double sum = 0;
    for (int64_t p = 0; p < T; ++p) sum += w[p] / total * v.at({p, kv_head, d});
    max_error = std::max(max_error, std::abs(sum - context.at({t, head * D + d})));
  }
  std::printf("\nlast token, head %d, recomputed by hand: max |difference| from the engine = %.2e\n", head, max_error);
  if (max_error > 1e-5) {
    std::cerr << "MISMATCH: the hand computation disagrees with the engine\n";
    return 1;
  }
  return 0;
} catch (const journey::Error& e) {
  std::cerr << "ch04: " << e.what() << "\n";
  return 1;
}
