// journey-trace report: ONE self-contained HTML file for a dump, to explore the run the way
// llm-viz, Transformer Explainer or circuitsvis let you explore a model, but on the real numbers
// of this run. No network: CSS, script, the diagrams' SVG and the data are all inline.
//
// What the page holds (docs/tracer.md has the tour):
//   - a token strip: every prompt and generated token; selecting one makes every panel follow it;
//   - a step scrubber (prefill, then each decode step) and a layer selector that redraw the journey
//     diagram (one Graphviz layout per layer, its nodes relabelled per step by the page's script);
//   - attention: where the selected token looks, in every layer and head, and the full map of one;
//   - the next-token distribution at the selected position and the logit lens (the final norm and
//     LM head applied after every layer: the `logit_lens` stages `journey trace` records);
//   - the sampling pipeline of the step: raw logits -> penalties -> temperature -> top-k -> top-p
//     -> min-p, each labelled as logits or probabilities, the sampled token marked;
//   - the KV cache as blocks filling step by step (shared prefix blocks for server traces);
//   - with a comparison: every stage coloured by its error against the second dump, the first
//     divergence named (the verdict of `journey-trace diff`);
//   - every recorded tensor's statistics, collapsed, filterable.
// The script publishes what it drew in window.journeyReport (read by tests/tracer's browser test).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "dump_view.h"
#include "trace/compare.h"

namespace journey::tracer {

struct ReportOptions {
  int initial_layer = 0;     // the layer the page opens on
  int initial_step = 0;      // the step the page opens on
  int max_positions = 512;   // attention keeps at most this many positions (rows and columns)
  int top = 10;              // tokens shown per distribution
  const ComparisonResult* comparison = nullptr;  // report A --compare B: B's verdict on every stage
};

// The data the page's script draws from (also useful on its own; the page embeds it as JSON).
nlohmann::json report_data(const Dump& dump, const ReportOptions& options);
std::string render_report(const Dump& dump, const ReportOptions& options);

}  // namespace journey::tracer
