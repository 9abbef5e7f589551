// journey-trace report: ONE self-contained HTML file for a dump (no network: CSS, script, the
// diagram's SVG and the data as JSON are all inline). Parts: the journey diagram, the tokens with
// their pieces, attention heatmaps per layer and head, the next-token distribution at each step,
// the KV-cache blocks per step, and a statistics table of every recorded tensor.
// The page's script writes what it drew into #status (read by the headless-browser test).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "dump_view.h"

namespace journey::tracer {

struct ReportOptions {
  int expanded_layer = 0;   // the layer the diagram expands
  int max_positions = 128;  // attention heatmaps keep at most this many rows and columns
};

// The data the page's script draws from (also useful on its own).
nlohmann::json report_data(const Dump& dump, const ReportOptions& options);
std::string render_report(const Dump& dump, const ReportOptions& options);

}  // namespace journey::tracer
