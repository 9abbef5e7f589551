// Logits of a whole model through the CPU reference backend, and how far two sets of logits are apart.
// Block types are widened to f32 here through TensorRef::to_f32 (quant::dequantize), which is what
// the reference does at load; doing it before make_reference_backend keeps these tests independent of
// which block types a backend's own load check lists.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "reference/reference_backend.h"

namespace journey::test {

struct Logits {
  int64_t rows = 0, vocab = 0;
  std::vector<float> values;  // [rows, vocab]
};

inline std::vector<int32_t> to_int32(const std::vector<int>& ids) { return std::vector<int32_t>(ids.begin(), ids.end()); }

// The same model with every weight dequantized into owned f32 storage.
inline LoadedModel widened_to_f32(const LoadedModel& m) {
  LoadedModel out;
  out.path = m.path;
  out.format = m.format;
  out.config = m.config;
  out.generation = m.generation;
  for (const auto& [name, t] : m.weights.all()) {
    auto values = std::make_shared<std::vector<float>>(t.to_f32());  // [numel]
    TensorRef ref = t;
    ref.dtype = DType::F32;
    ref.data = reinterpret_cast<const std::byte*>(values->data());
    ref.nbytes = values->size() * sizeof(float);
    out.weights.add(std::move(ref), values);
  }
  return out;
}

// Logits for every position of `tokens` (one prefill step from position 0).
inline Logits reference_logits(const LoadedModel& model, const std::vector<int32_t>& tokens) {
  auto backend = make_reference_backend(widened_to_f32(model));
  const int64_t block_size = 16, blocks = (int64_t(tokens.size()) + block_size - 1) / block_size;
  backend->allocate_kv_cache(blocks, block_size);
  SequenceInput s;
  s.tokens = tokens;
  s.all_logits = true;
  for (int32_t b = 0; b < blocks; ++b) s.block_table.push_back(b);
  const ForwardOutput out = backend->forward(ForwardBatch{{s}});
  return {int64_t(tokens.size()), out.vocab_size, out.logits};
}

struct LogitsError {
  double relative_rms = 0;     // ||a - b|| / ||b - mean(b)|| over all positions (b's spread, not its offset)
  double max_abs = 0;          // max |a - b|
  double top1_agreement = 0;   // positions whose argmax agrees
  std::string describe() const {
    return cat("relative RMS ", relative_rms, ", max |diff| ", max_abs, ", top-1 agreement ", top1_agreement);
  }
};

inline LogitsError compare_logits(const Logits& a, const Logits& b) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.vocab == b.vocab);
  LogitsError e;
  double diff2 = 0, spread2 = 0;
  int agree = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* x = a.values.data() + r * a.vocab;
    const float* y = b.values.data() + r * b.vocab;
    double mean = 0;
    for (int64_t v = 0; v < a.vocab; ++v) mean += y[v];
    mean /= double(a.vocab);
    int64_t ax = 0, ay = 0;
    for (int64_t v = 0; v < a.vocab; ++v) {
      diff2 += (double(x[v]) - y[v]) * (double(x[v]) - y[v]);
      spread2 += (y[v] - mean) * (y[v] - mean);
      e.max_abs = std::max(e.max_abs, std::fabs(double(x[v]) - y[v]));
      if (x[v] > x[ax]) ax = v;
      if (y[v] > y[ay]) ay = v;
    }
    agree += ax == ay;
  }
  e.relative_rms = std::sqrt(diff2 / spread2);
  e.top1_agreement = double(agree) / double(a.rows);
  return e;
}

}  // namespace journey::test
