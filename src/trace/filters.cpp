#include "trace/filters.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace journey {
namespace {

std::vector<std::string_view> split_commas(std::string_view spec) {
  std::vector<std::string_view> items;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = spec.substr(begin, end - begin);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    items.push_back(item);
    begin = end + 1;
  }
  return items;
}

int parse_nonnegative(std::string_view text, std::string_view what, std::string_view item) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0)
    fail(what, ": '", item, "' is not a non-negative integer or a range like 0-3");
  return value;
}

}  // namespace

bool IndexSet::contains(int value) const {
  if (ranges.empty()) return true;
  for (auto [first, last] : ranges)
    if (value >= first && value <= last) return true;
  return false;
}

std::vector<int> IndexSet::list(int upper_bound) const {
  std::vector<int> out;
  for (int i = 0; i < upper_bound; ++i)
    if (contains(i)) out.push_back(i);
  return out;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point for the last '*'.
  size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

int heads_axis(Stage stage) {
  switch (stage) {
    case Stage::attn_scores:
    case Stage::attn_weights: return 0;  // [H, T, P]
    case Stage::q:
    case Stage::q_norm:
    case Stage::q_rope: return 1;        // [T, H, D]
    default: return -1;
  }
}

bool TraceFilters::stage_matches(Stage stage, int layer) const {
  if (stage_patterns.empty()) return true;
  const std::string_view bare = stage_name(stage);
  const std::string full = layer >= 0 ? cat("L", layer, ".", bare) : std::string(bare);
  for (const auto& pattern : stage_patterns)
    if (glob_match(pattern, bare) || glob_match(pattern, full)) return true;
  return false;
}

bool TraceFilters::wants(Stage stage, int layer, int step) const {
  if (!steps.contains(step)) return false;
  if (layer >= 0 && !layers.contains(layer)) return false;
  return stage_matches(stage, layer);
}

IndexSet parse_index_set(std::string_view spec, std::string_view what) {
  IndexSet set;
  if (spec.empty() || spec == "all" || spec == "*") return set;
  for (std::string_view item : split_commas(spec)) {
    if (item.empty()) fail(what, ": empty item in '", spec, "'");
    size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      int v = parse_nonnegative(item, what, item);
      set.ranges.push_back({v, v});
    } else {
      int first = parse_nonnegative(item.substr(0, dash), what, item);
      int last = parse_nonnegative(item.substr(dash + 1), what, item);
      if (last < first) fail(what, ": range '", item, "' ends before it starts");
      set.ranges.push_back({first, last});
    }
  }
  return set;
}

TraceFilters parse_filters(std::string_view stages, std::string_view layers, std::string_view heads,
                           std::string_view steps) {
  TraceFilters filters;
  if (!stages.empty() && stages != "all" && stages != "*") {
    for (std::string_view item : split_commas(stages)) {
      if (item.empty()) fail("--stages: empty item in '", stages, "'");
      // A pattern that matches nothing is almost always a typo; say so rather than trace nothing.
      // Layer-qualified patterns are tried against layer 0..999 names through a wildcard layer.
      bool matches_something = false;
      for (const auto& info : kStages) {
        std::string bare(info.name);
        if (glob_match(item, bare)) matches_something = true;
        if (info.scope == StageScope::Layer) {
          for (int layer : {0, 1, 9, 10, 99, 123})
            if (glob_match(item, cat("L", layer, ".", bare))) matches_something = true;
          // "L7.q": accept any concrete layer number.
          if (item.size() > 1 && item[0] == 'L') {
            size_t dot = item.find('.');
            if (dot != std::string_view::npos && glob_match(item.substr(dot + 1), bare) &&
                item.substr(1, dot - 1).find_first_not_of("0123456789*?") == std::string_view::npos)
              matches_something = true;
          }
        }
      }
      if (!matches_something) {
        std::string known;
        for (const auto& info : kStages) known += cat(known.empty() ? "" : ", ", info.name);
        fail("--stages: '", item, "' matches no stage (stages: ", known, "; layer stages also as L<i>.<name>)");
      }
      filters.stage_patterns.emplace_back(item);
    }
  }
  filters.layers = parse_index_set(layers, "--layers");
  filters.heads = parse_index_set(heads, "--heads");
  filters.steps = parse_index_set(steps, "--steps");
  return filters;
}

}  // namespace journey
