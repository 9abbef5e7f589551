// Chapter 9 — the KV cache in blocks (PagedAttention) and prefix sharing.
// Part 1 admits three sequences into a small block pool with the real BlockManager and draws their
// block tables: two of them start with the same 32-token prompt and share its blocks.
// Part 2 runs the real model through LLMEngine twice on the same prompt and shows the second
// request served from the prefix cache with the same greedy answer.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "engine/block_manager.h"
#include "engine/llm_engine.h"
#include "cpu/cpu_backend.h"
#include "text/tokenizer.h"

using namespace journey;

static void draw(const BlockManager& blocks, const std::vector<const Sequence*>& seqs) {
  for (const Sequence* s : seqs) {
    std::printf("  seq %lld (%3lld tokens) block table:", (long long)s->id, (long long)s->num_tokens());
    for (int32_t b : s->block_table) std::printf(" %2d", b);
    std::printf("\n");
  }
  std::printf("  pool (ref counts):");
  for (int32_t b = 0; b < blocks.num_blocks(); ++b) std::printf(" %d", blocks.ref_count(b));
  const BlockManagerStats st = blocks.stats();
  std::printf("\n  used %lld of %lld blocks, %lld of %lld allocated slots hold a token\n", (long long)st.used_blocks,
              (long long)st.num_blocks, (long long)st.filled_slots, (long long)st.allocated_slots);
}

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const auto tokenizer = load_tokenizer(model_path);
  bool ok = true;

  // ---- Part 1: block tables for three sequences ----
  const int64_t block_size = 8;
  BlockManager blocks(/*num_blocks=*/16, block_size);
  const std::vector<int> shared = tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside.", true);
  auto make = [&](int64_t id, std::vector<int> tokens) {
    Sequence s;
    s.id = id;
    s.tokens.assign(tokens.begin(), tokens.end());
    s.num_prompt_tokens = s.num_tokens();
    s.max_total_tokens = s.num_tokens() + 8;
    return s;
  };
  std::vector<int> with_suffix = shared;
  for (int id : tokenizer->encode(" One day she saw a cat.")) with_suffix.push_back(id);
  Sequence a = make(0, shared), b = make(1, tokenizer->encode("Tom had a red ball.", true)), c = make(2, with_suffix);

  std::vector<BlockCopy> copies;
  std::cout << "# Chapter 9: paged KV cache, block size " << block_size << "\n\nseq 0 and seq 1 admitted and computed:\n";
  for (Sequence* s : {&a, &b}) {
    blocks.allocate(*s, 0, copies);
    s->num_computed_tokens = s->num_tokens();  // the forward pass would write their K/V now
    blocks.mark_computed(*s);
  }
  draw(blocks, {&a, &b});
  const int64_t cached = blocks.cached_prefix_tokens(c);
  blocks.allocate(c, 0, copies);
  std::printf("\nseq 2 starts with seq 0's prompt: %lld of its %lld tokens come from the prefix cache\n",
              (long long)cached, (long long)c.num_tokens());
  draw(blocks, {&a, &b, &c});
  const int64_t shared_blocks = int64_t(shared.size()) / block_size;  // only FULL blocks are shared
  for (int64_t i = 0; i < shared_blocks; ++i)
    ok = ok && c.block_table[i] == a.block_table[i] && blocks.ref_count(a.block_table[i]) == 2;
  ok = ok && cached == shared_blocks * block_size;

  // ---- Part 2: the same through the engine with the real model ----
  const LoadedModel model = load_model(model_path);
  auto backend = make_cpu_backend(model, CpuOptions{.threads = 1});
  EngineConfig config;
  config.block_size = 16;
  config.num_kv_blocks = 64;
  LLMEngine engine(*backend, config, tokenizer.get());
  std::vector<std::string> answers;
  for (int round = 0; round < 2; ++round) {
    EngineRequest request;
    request.prompt.assign(shared.begin(), shared.end());
    request.params.temperature = 0;
    request.max_tokens = 20;
    engine.add_request(request);
    std::string text;
    int64_t cached_tokens = 0;
    while (engine.has_unfinished())
      for (const RequestOutput& out : engine.step()) { text += out.text; cached_tokens = out.cached_prompt_tokens; }
    std::printf("\nengine request %d: %lld of %zu prompt tokens from the prefix cache ->%s\n", round,
                (long long)cached_tokens, shared.size(), text.c_str());
    answers.push_back(text);
    if (round == 1) ok = ok && cached_tokens > 0;
  }
  const EngineStats stats = engine.stats();
  std::printf("prefix cache: %lld hits of %lld prompt tokens looked up; blocks in use now: %lld\n",
              (long long)stats.kv.prefix_hits, (long long)stats.kv.prefix_queries, (long long)stats.kv.used_blocks);
  ok = ok && answers[0] == answers[1] && stats.kv.used_blocks == 0;
  if (!ok) std::cerr << "MISMATCH: blocks were not shared as expected, or the cached answer differs\n";
  return ok ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch09: " << e.what() << "\n";
  return 1;
}
