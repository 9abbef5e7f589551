// trace_planted_bug MODEL OUT_DIR: what `journey trace MODEL "Once upon a time" --out OUT_DIR
// --max-tokens 4 --temperature 0` writes, but run on the fast CPU backend with a bug planted in its
// RoPE kernel (it pairs dimensions the other layout's way). Test-only: production code has no
// switch that plants a bug, so the CLI tests of `journey-trace diff` and `golden` get their buggy
// dump from this program.
#include <cstdio>

#include "assets/model.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/stop.h"
#include "engine/traced_generation.h"
#include "text/tokenizer.h"
#include "trace/dump_sink.h"

using namespace journey;

static void rope_with_swapped_layout(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D,
                                     double theta, RopeLayout layout) {
  cpu::rope(x, positions, T, heads, D, theta, layout == RopeLayout::HalfSplit ? RopeLayout::Interleaved : RopeLayout::HalfSplit);
}

int main(int argc, char** argv) try {
  if (argc != 3) fail("usage: trace_planted_bug MODEL OUT_DIR");
  const LoadedModel model = load_model(argv[1]);
  const auto tokenizer = load_tokenizer(argv[1]);
  CpuOps planted;
  planted.rope = rope_with_swapped_layout;
  auto backend = make_cpu_backend(model, CpuOptions{.threads = 1}, planted);

  const std::string prompt = "Once upon a time";
  const std::vector<int> ids = tokenizer->encode(prompt, /*add_special=*/true, /*parse_special=*/false);
  GenerationRequest request;
  request.prompt_ids.assign(ids.begin(), ids.end());
  request.sampling.temperature = 0.0;
  request.sampling.logprobs = 5;
  request.stop.max_tokens = 4;
  request.stop.eos_ids = collect_eos_ids(model.generation, model.config, *tokenizer);
  DumpSink sink(argv[2]);
  generate_traced(*backend, *tokenizer, request, sink);
  Manifest& m = sink.manifest();
  m.generated_by_tool = "tests/tracer/trace_planted_bug";
  m.model = manifest_model(model.path, backend->config());
  m.prompt = prompt;
  for (int id : ids) m.tokens.push_back({id, tokenizer->piece(id)});
  m.settings = {{"backend", "cpu with a planted RoPE bug"}, {"dtype", "f32"}};
  sink.finish([&](int32_t id) { return tokenizer->piece(id); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trace_planted_bug: error: %s\n", e.what());
  return 1;
}
