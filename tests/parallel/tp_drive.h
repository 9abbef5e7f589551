// The calls a server makes, in one fixed order, on any backend, and the comparison of two runs of
// them: shared by the tensor-parallel exactness tests of the CPU backend (tp_exactness.cpp) and of
// the CUDA backend (tp_cuda_exactness.cpp), so both hold their group to the same calls.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/error.h"
#include "core/numeric.h"

namespace journey::tp_test {

// The models both exactness tests split (relative to the source tree): the shipped model and the
// tiny Llama / Qwen2 / Qwen3 goldens.
inline const char* const kModels[] = {"data/stories260K", "tests/golden/models/tiny-llama",
                                      "tests/golden/models/tiny-qwen2", "tests/golden/models/tiny-qwen3"};

// What one backend produced: each call's logits and the greedy tokens it chose.
struct Run {
  std::vector<std::string> calls;               // [C] what each call was
  std::vector<std::vector<float>> logits;       // [C][rows * V]
  std::vector<int64_t> vocab;                   // [C]
  std::vector<int32_t> greedy;                  // tokens chosen by argmax along the way
};

inline int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

// The calls a server makes, in one fixed order. Block size 4, scrambled block tables.
inline Run drive(Backend& backend, const ModelConfig& c) {
  Run run;
  auto record = [&](const std::string& call, const ForwardOutput& out) {
    run.calls.push_back(call);
    run.logits.push_back(out.logits);
    run.vocab.push_back(out.vocab_size);
    return out;
  };
  backend.allocate_kv_cache(24, 4);
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 7; ++i) prompt.push_back(int32_t((i * 37 + 11) % c.vocab_size));
  const std::vector<int32_t> table_a = {9, 2, 14, 5, 0, 11};  // [6] blocks of sequence A: 24 positions
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table_a, /*all_logits=*/true});
  ForwardOutput out = record("prefill of 7 tokens", backend.forward(batch));
  int64_t position = int64_t(prompt.size());
  int32_t next = argmax(out.last_row(0), out.vocab_size);
  for (int step = 0; step < 8; ++step, ++position) {
    run.greedy.push_back(next);
    batch.sequences[0] = {0, {next}, position, table_a, false};
    out = record("decode step " + std::to_string(step + 1), backend.forward(batch));
    next = argmax(out.last_row(0), out.vocab_size);
  }
  // copy-on-write: sequence A's blocks copied into other blocks, then decoding from the copies
  const std::vector<int32_t> table_copy = {3, 17, 8, 20, 1, 23};  // [6]
  for (size_t b = 0; b < 4; ++b) backend.copy_kv_block(table_a[b], table_copy[b]);
  for (int step = 0; step < 3; ++step, ++position) {
    run.greedy.push_back(next);
    batch.sequences[0] = {0, {next}, position, table_copy, false};
    out = record("decode from copied blocks " + std::to_string(step + 1), backend.forward(batch));
    next = argmax(out.last_row(0), out.vocab_size);
  }
  // one batched step: sequence A decodes while sequence B prefills 5 tokens of its own
  const std::vector<int32_t> table_b = {12, 6};  // [2]
  batch.sequences = {{0, {next}, position, table_copy, false},
                     {1, {1, 5, 9, 13, int32_t(17 % c.vocab_size)}, 0, table_b, true}};
  out = record("batched decode + prefill", backend.forward(batch));
  run.greedy.push_back(argmax(out.last_row(0), out.vocab_size));
  run.greedy.push_back(argmax(out.last_row(1), out.vocab_size));
  return run;
}

inline std::string side_by_side(const float* ours, const float* reference, int64_t V) {
  int64_t worst = 0;
  for (int64_t i = 0; i < V; ++i)
    if (std::fabs(ours[i] - reference[i]) > std::fabs(ours[worst] - reference[worst])) worst = i;
  return cat("largest difference at vocabulary id ", worst, ": ", ours[worst], " (tensor parallel) vs ",
             reference[worst], "; first values ", ours[0], " ", ours[1], " ", ours[2], " vs ", reference[0], " ",
             reference[1], " ", reference[2]);
}

// Compares every row of every call; prints the first mismatch. Returns the worst NMSE seen.
inline bool compare(const Run& tp, const Run& other, const char* other_name, double nmse_bound, double max_abs_bound,
             const std::string& model, double& worst_nmse) {
  worst_nmse = 0;
  // calls in order: the first call whose logits differ is where the runs parted (later calls may
  // feed different tokens)
  for (size_t call = 0; call < tp.calls.size(); ++call) {
    const int64_t V = other.vocab[call];
    if (tp.vocab[call] != V || tp.logits[call].size() != other.logits[call].size()) {
      std::printf("FAIL %s, %s: logits of [%zu / %lld] vs [%zu / %lld] values\n", model.c_str(), tp.calls[call].c_str(),
                  tp.logits[call].size(), static_cast<long long>(tp.vocab[call]), other.logits[call].size(),
                  static_cast<long long>(V));
      return false;
    }
    for (size_t row = 0; row * size_t(V) < other.logits[call].size(); ++row) {
      const float* ours = tp.logits[call].data() + row * size_t(V);
      const float* theirs = other.logits[call].data() + row * size_t(V);
      const double e = nmse({ours, size_t(V)}, {theirs, size_t(V)});
      float peak = 1, diff = 0;
      for (int64_t i = 0; i < V; ++i) peak = std::max(peak, std::fabs(theirs[i])), diff = std::max(diff, std::fabs(ours[i] - theirs[i]));
      worst_nmse = std::max(worst_nmse, e);
      if (!(e <= nmse_bound) || !(diff <= max_abs_bound * peak)) {
        std::printf("FAIL %s, %s, row %zu: against the %s run NMSE %.3g (bound %.3g), max |diff| %.3g (bound %.3g)\n  %s\n",
                    model.c_str(), tp.calls[call].c_str(), row, other_name, e, nmse_bound, double(diff),
                    max_abs_bound * peak, side_by_side(ours, theirs, V).c_str());
        return false;
      }
    }
  }
  if (tp.greedy != other.greedy) {  // every logits row within bounds, yet another argmax: a near-tie
    auto list = [](const std::vector<int32_t>& tokens) {
      std::string text;
      for (int32_t t : tokens) text.append(" ").append(std::to_string(t));
      return text;
    };
    const std::string a = list(tp.greedy), b = list(other.greedy);
    std::printf("FAIL %s: greedy tokens differ from the %s run:\n  tensor parallel:%s\n  %s:%s\n", model.c_str(),
                other_name, a.c_str(), other_name, b.c_str());
    return false;
  }
  return true;
}

}  // namespace journey::tp_test
