// The real tiny model end to end: stories260K (Karpathy's llama2.c, MIT), greedy from BOS.
// Expected ids are llama2.c's published run (run.c -t 0.0; see tests/data/models/stories260K/
// PROVENANCE.md and llama2.c's test_all.py): "Once upon a time, there was a little girl named Lily."
// Both shipped forms are checked: the HF conversion in data/ (half-split RoPE, permuted q/k) and
// the original llama2.c checkpoint (interleaved RoPE), which must agree token for token.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "assets/model.h"
#include "reference/reference_backend.h"

using namespace journey;

namespace {

std::vector<int32_t> greedy_from_bos(const std::string& path, int steps) {
  LoadedModel model = load_model(path);
  auto backend = make_reference_backend(model);
  backend->allocate_kv_cache(8, 4);
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> out;
  int32_t token = 1;  // BOS
  for (int pos = 0; pos < steps; ++pos) {
    ForwardBatch batch;
    batch.sequences.push_back({0, {token}, pos, table, false});
    ForwardOutput logits = backend->forward(batch);
    const float* row = logits.last_row(0);
    token = int32_t(std::max_element(row, row + logits.vocab_size) - row);
    out.push_back(token);
  }
  return out;
}

const std::vector<int32_t> kLlama2cGreedy = {403, 407, 261, 378, 432, 383, 286, 261,
                                             376, 298, 315, 421, 395, 317, 426, 338};

}  // namespace

TEST_CASE("stories260K (HF conversion in data/): greedy after BOS is llama2.c's published 'Once upon a time...'") {
  auto ids = greedy_from_bos(JOURNEY_SOURCE_DIR "/data/stories260K", 16);
  CHECK(ids.front() == 403);  // "Once"
  CHECK(ids == kLlama2cGreedy);
}

TEST_CASE("stories260K (original llama2.c checkpoint, interleaved RoPE) gives the same tokens") {
  auto ids = greedy_from_bos(JOURNEY_SOURCE_DIR "/tests/data/models/stories260K/stories260K.bin", 16);
  CHECK(ids == kLlama2cGreedy);
}

TEST_CASE("stories260K: prefill of the greedy text equals its token-by-token logits (argmax at every position)") {
  LoadedModel model = load_model(JOURNEY_SOURCE_DIR "/data/stories260K");
  auto backend = make_reference_backend(model);
  backend->allocate_kv_cache(8, 4);
  std::vector<int32_t> prompt = {1};
  prompt.insert(prompt.end(), kLlama2cGreedy.begin(), kLlama2cGreedy.end() - 1);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, {0, 1, 2, 3, 4, 5, 6, 7}, true});
  ForwardOutput out = backend->forward(batch);
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* row = out.row(int64_t(t));
    CHECK(int32_t(std::max_element(row, row + out.vocab_size) - row) == kLlama2cGreedy[t]);
  }
}
