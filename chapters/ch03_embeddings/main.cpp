// Chapter 3 — token ids become vectors.
// Runs the model on a short prompt with a sink that captures the "embeddings" stage, shows the
// vectors, and checks that each one is exactly the row of embed_tokens its token id selects.
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

static double norm(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  return std::sqrt(sum);
}

static double cosine(const float* a, const float* b, int64_t n) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += double(a[i]) * b[i];
  return dot / (norm(a, n) * norm(b, n));
}

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_reference_backend(model);
  const int64_t E = model.config.hidden_size;

  const std::vector<int> ids = tokenizer->encode("The cat and the dog", /*add_special=*/true);
  backend->allocate_kv_cache(/*num_blocks=*/1, /*block_size=*/int64_t(ids.size()));
  CaptureSink sink;
  sink.want(Stage::embeddings);
  backend->forward(ForwardBatch{{SequenceInput{0, {ids.begin(), ids.end()}, 0, {0}, false}}}, &sink);
  const CapturedTensor& embeddings = sink.get(Stage::embeddings);  // [T, E]

  std::cout << "# Chapter 3: embeddings (hidden size " << E << ")\n\n";
  std::printf("%-10s %5s  %-44s %s\n", "piece", "id", "first 6 of the vector", "norm");
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* row = embeddings.data.data() + t * E;
    std::printf("%-10s %5d  [", tokenizer->piece(ids[t]).c_str(), ids[t]);
    for (int i = 0; i < 6; ++i) std::printf("%+.3f%s", row[i], i < 5 ? " " : "");
    std::printf("]  %.3f\n", norm(row, E));
  }

  // The same token always gets the same vector: "the"/"The" differ, the two "a"-like tokens match.
  std::cout << "\ncosine similarity between the token vectors:\n       ";
  for (size_t j = 0; j < ids.size(); ++j) std::printf("%7d", ids[j]);
  std::cout << "\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    std::printf("%7d", ids[i]);
    for (size_t j = 0; j < ids.size(); ++j)
      std::printf("%7.2f", cosine(embeddings.data.data() + i * E, embeddings.data.data() + j * E, E));
    std::cout << "\n";
  }

  // The check: the embedding is a plain row lookup in the weight matrix [V, E].
  const std::vector<float> table = model.weights.get("model.embed_tokens.weight").to_f32();  // [V, E]
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < E; ++i)
      if (embeddings.data[t * E + i] != table[size_t(ids[t]) * E + i]) {
        std::cerr << "MISMATCH at token " << t << " dim " << i << "\n";
        return 1;
      }
  std::cout << "\nevery vector is exactly row <id> of model.embed_tokens.weight\n";
  return 0;
} catch (const journey::Error& e) {
  std::cerr << "ch03: " << e.what() << "\n";
  return 1;
}
