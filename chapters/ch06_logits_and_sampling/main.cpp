// Chapter 6 — logits and sampling.
// Takes the logits for the token after "Once upon a time, there was a little", and shows the top candidates as the
// sampling knobs change: temperature reshapes the distribution, top-k / top-p / min-p cut its tail.
// Checks that every processed distribution still sums to 1 and that greedy picks the argmax.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <span>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "reference/reference_backend.h"
#include "sampling/processors.h"
#include "sampling/sampler.h"
#include "text/tokenizer.h"

using namespace journey;

// Prints the n most likely tokens of a distribution [V] and how many tokens remain possible.
static bool show(const Tokenizer& tokenizer, const char* label, std::span<const float> probs, int n = 6) {
  double total = 0;
  int alive = 0;
  for (float p : probs) { total += p; alive += p > 0; }
  std::printf("%-26s", label);
  for (int32_t id : top_n_ids(probs, n))
    if (probs[id] > 0) std::printf(" %10s %.3f", ("'" + tokenizer.decode({id}) + "'").c_str(), probs[id]);
  std::printf("   (%d tokens possible)\n", alive);
  return std::abs(total - 1.0) < 1e-4;
}

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_reference_backend(model);

  const std::vector<int> ids = tokenizer->encode("Once upon a time, there was a little", /*add_special=*/true);
  backend->allocate_kv_cache(1, int64_t(ids.size()));
  const ForwardOutput out = backend->forward(ForwardBatch{{SequenceInput{0, {ids.begin(), ids.end()}, 0, {0}, false}}});
  const std::span<const float> logits(out.last_row(0), size_t(out.vocab_size));  // [V]

  std::cout << "# Chapter 6: what comes after \"Once upon a time, there was a little\"?\n\n";
  bool ok = true;
  for (double temperature : {0.5, 1.0, 1.5}) {
    std::vector<float> scaled(logits.begin(), logits.end());
    apply_temperature(scaled, temperature);
    const std::vector<float> probs = softmax(scaled);
    char label[64];
    std::snprintf(label, sizeof label, "temperature %.1f", temperature);
    ok = show(*tokenizer, label, probs) && ok;
  }
  std::vector<float> probs = softmax(logits);
  std::vector<float> top_k = probs;
  keep_top_k(top_k, 3);
  ok = show(*tokenizer, "T=1, top-k 3", top_k) && ok;
  std::vector<float> top_p = probs;
  keep_top_p(top_p, 0.9);
  ok = show(*tokenizer, "T=1, top-p 0.9", top_p) && ok;
  std::vector<float> min_p = probs;
  keep_min_p(min_p, 0.1);
  ok = show(*tokenizer, "T=1, min-p 0.1", min_p) && ok;

  // Sampling with a seed is reproducible; greedy is the argmax.
  std::cout << "\nfive draws at T=1, seed 42:  ";
  SamplingParams params;
  params.seed = 42;
  Sampler sampler(params, std::span<const int32_t>(ids.data(), ids.size()));
  for (int i = 0; i < 5; ++i) std::cout << "'" << tokenizer->decode({sampler.sample(logits).id}) << "' ";
  SamplingParams greedy_params;
  greedy_params.temperature = 0;
  Sampler greedy(greedy_params, {});
  const int32_t greedy_id = greedy.sample(logits).id;
  std::cout << "\ngreedy (temperature 0):      '" << tokenizer->decode({greedy_id}) << "'\n";
  ok = ok && greedy_id == argmax(logits);
  if (!ok) std::cerr << "MISMATCH: a distribution does not sum to 1 or greedy is not the argmax\n";
  return ok ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch06: " << e.what() << "\n";
  return 1;
}
