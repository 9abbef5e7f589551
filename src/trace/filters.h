// Which parts of a run a trace keeps. A full trace of a real model is large (every layer, every
// head, every step), so the user narrows it: stages by glob ("L*.attn_weights,logits", "q*"),
// layers ("0,4" or "0-3"), heads of the per-head stages, steps ("0-3"). An empty spec keeps all.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "trace/stages.h"

namespace journey {

// Inclusive ranges of non-negative integers; empty = everything.
struct IndexSet {
  std::vector<std::pair<int, int>> ranges;  // [first, last]
  bool all() const { return ranges.empty(); }
  bool contains(int value) const;
  std::vector<int> list(int upper_bound) const;  // members in [0, upper_bound)
};

struct TraceFilters {
  std::vector<std::string> stage_patterns;  // globs over "L3.q" and "q"; empty = every stage
  IndexSet layers;                          // applies to layer stages only
  IndexSet heads;                           // applies to heads_axis() stages only
  IndexSet steps;

  // Does a stage pattern match this stage at this layer (before the layer filter)?
  bool stage_matches(Stage stage, int layer) const;
  bool wants(Stage stage, int layer, int step) const;
};

// Parse the four specs. Throws journey::Error naming the spec ("--layers"), the bad item and why:
// unknown stage names (a pattern that matches no stage at all), "3-1", "x", negative numbers.
TraceFilters parse_filters(std::string_view stages, std::string_view layers, std::string_view heads,
                           std::string_view steps);
IndexSet parse_index_set(std::string_view spec, std::string_view what);

// Shell-style glob: '*' any run, '?' one character.
bool glob_match(std::string_view pattern, std::string_view text);

// The axis that indexes query heads in a stage's tensor, or -1: attention stages are [H, T, P],
// per-head query stages are [T, H, D]. Only these are cut by the heads filter.
int heads_axis(Stage stage);

}  // namespace journey
