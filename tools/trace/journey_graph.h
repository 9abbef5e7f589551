// The journey as a diagram: text -> template -> tokens -> embedding -> layers (one expanded into
// its stages, the others collapsed) -> final norm -> logits -> sampling -> output tokens, each node
// with its shape and a small summary of the recorded tensor. Built with Graphviz's cgraph and laid
// out by its dot engine (gvc); rendered to SVG (also inlined into the HTML report) or PNG.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "dump_view.h"

namespace journey::tracer {

// How a node is coloured when the diagram shows a comparison (journey-trace diff --svg).
enum class NodeMark { None, Ok, Diverged, FirstDivergence, Missing };

struct GraphOptions {
  int step = 0;            // which step's tensors the nodes summarize (0 = prefill)
  int expanded_layer = 0;  // the layer drawn stage by stage
  std::map<std::string, NodeMark> marks;  // by tensor name ("L0.q_rope", "logits") at `step`
  std::string title;       // empty: "journey of <prompt>"
  // > 0: every node gets exactly this many lines under its title (cut, or padded with "·"), so
  // that the report's script can rewrite a node's lines for another step without a new layout.
  int fixed_lines = 0;
};

// The graph in Graphviz's own language (for debugging and tests).
std::string journey_dot(const Dump& dump, const GraphOptions& options);
// Laid out with dot and rendered; format "svg" or "png". Throws journey::Error on a Graphviz failure.
std::string render_journey(const Dump& dump, const GraphOptions& options, const std::string& format);
// Writes the rendering; the format comes from the extension (.svg, .png, .dot).
void render_journey_to_file(const Dump& dump, const GraphOptions& options, const std::filesystem::path& out);

}  // namespace journey::tracer
