#include "journey_graph.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"
#include "trace/stages.h"

namespace journey::tracer {
namespace {

// cgraph's API predates const: it takes char* for names and values it only reads.
char* mut(const std::string& s) { return const_cast<char*>(s.c_str()); }
char* mut(const char* s) { return const_cast<char*>(s); }

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += '?';
        else out += c;
    }
  }
  return out;
}

// At most max_chars characters (UTF-8 aware), with an ellipsis when cut.
std::string clip(const std::string& s, size_t max_chars) {
  size_t chars = 0, i = 0;
  while (i < s.size()) {
    if (chars == max_chars) return s.substr(0, i) + "…";
    unsigned char c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ++chars;
  }
  return s;
}

std::string num(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e4)) std::snprintf(buf, sizeof buf, "%.2e", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

const char* mark_colour(NodeMark mark) {
  switch (mark) {
    case NodeMark::Ok: return "#c8ecc8";
    case NodeMark::Diverged: return "#ffc89e";
    case NodeMark::FirstDivergence: return "#ff6b6b";
    case NodeMark::Missing: return "#d0d0d0";
    case NodeMark::None: break;
  }
  return nullptr;
}

// Background colour of a stage by what kind of work it is (when no comparison colours it).
const char* stage_colour(const std::string& stage) {
  if (stage.find("norm") != std::string::npos) return "#eeeeee";
  if (stage.rfind("attn", 0) == 0 || stage == "q" || stage == "k" || stage == "v" || stage.find("rope") != std::string::npos)
    return "#dbe9ff";
  if (stage == "gate" || stage == "up" || stage == "act" || stage == "ffn_out") return "#fff3c4";
  if (stage.rfind("probs", 0) == 0 || stage == "logits" || stage == "sampled") return "#f0e0ff";
  return "#f7f7f7";
}

// Worse marks win when several tensors share one node (a collapsed layer).
int severity(NodeMark m) {
  switch (m) {
    case NodeMark::None: return 0;
    case NodeMark::Ok: return 1;
    case NodeMark::Missing: return 2;
    case NodeMark::Diverged: return 3;
    case NodeMark::FirstDivergence: return 4;
  }
  return 0;
}

class Builder {
 public:
  Builder(const Dump& dump, const GraphOptions& options) : dump_(dump), opt_(options) {
    Agdesc_t directed = Agdirected;
    graph_ = agopen(mut("journey"), directed, nullptr);
    set(graph_, "rankdir", "TB");
    set(graph_, "nodesep", "0.25");
    set(graph_, "ranksep", "0.3");
    set(graph_, "fontname", "Helvetica");
    set(graph_, "labelloc", "t");
    agattr(graph_, AGNODE, mut("shape"), mut("plaintext"));
    agattr(graph_, AGNODE, mut("fontname"), mut("Helvetica"));
    agattr(graph_, AGNODE, mut("fontsize"), mut("10"));
    agattr(graph_, AGEDGE, mut("color"), mut("#555555"));
    agattr(graph_, AGEDGE, mut("style"), mut("solid"));
    agattr(graph_, AGEDGE, mut("arrowsize"), mut("0.6"));
  }
  ~Builder() {
    if (graph_) agclose(graph_);
  }
  Agraph_t* graph() { return graph_; }

  void build();

 private:
  static void set(void* obj, const char* name, const std::string& value) {
    agsafeset(obj, mut(name), mut(value), mut(""));
  }

  // A node whose label is a small HTML table: a bold title and lines below it.
  Agnode_t* node(Agraph_t* g, const std::string& id, const std::string& title, std::vector<std::string> lines,
                 const char* fill, bool bold_border = false, bool changes_per_step = true) {
    if (opt_.fixed_lines > 0 && changes_per_step) lines.resize(size_t(opt_.fixed_lines), "·");
    Agnode_t* n = agnode(g, mut(id), 1);
    std::string html = cat("<TABLE BORDER=\"", bold_border ? 2 : 1, "\" CELLBORDER=\"0\" CELLSPACING=\"0\" CELLPADDING=\"2\" BGCOLOR=\"",
                           fill, "\" STYLE=\"ROUNDED\"><TR><TD><B>", html_escape(title), "</B></TD></TR>");
    for (const auto& line : lines) html += cat("<TR><TD><FONT POINT-SIZE=\"9\">", html_escape(line), "</FONT></TD></TR>");
    html += "</TABLE>";
    char* label = agstrdup_html(graph_, mut(html));
    agsafeset(n, mut("label"), label, mut(""));
    agstrfree(graph_, label);
    return n;
  }

  Agedge_t* edge(Agnode_t* a, Agnode_t* b, const char* style = nullptr, const char* label = nullptr) {
    if (!a || !b) return nullptr;
    Agedge_t* e = agedge(graph_, a, b, nullptr, 1);
    if (style) set(e, "style", style);
    if (label) {
      set(e, "label", label);
      set(e, "fontsize", "8");
      set(e, "fontname", "Helvetica");
    }
    return e;
  }

  NodeMark mark_of(const std::string& name) const {
    auto it = opt_.marks.find(name);
    return it == opt_.marks.end() ? NodeMark::None : it->second;
  }

  std::vector<std::string> tensor_lines(const ManifestTensor& t) const;
  Agnode_t* stage_node(Agraph_t* g, const std::string& stage, int layer);
  Agnode_t* collapsed_layer(int layer);

  const Dump& dump_;
  const GraphOptions& opt_;
  Agraph_t* graph_ = nullptr;
};

std::vector<std::string> Builder::tensor_lines(const ManifestTensor& t) const {
  std::vector<std::string> lines;
  std::string shape = shape_string(t.shape);
  if (t.dtype != "f32") shape += " " + t.dtype;
  if (!t.heads.empty()) shape += cat(" (", t.heads.size(), " heads kept)");
  lines.push_back(shape);
  const TensorSummary& s = dump_.summary(t);
  lines.push_back(cat("rms ", num(s.rms), " · min ", num(s.min), " · max ", num(s.max)));
  if (s.neg_inf > 0) lines.push_back(cat(s.neg_inf, " masked (-inf)"));
  if (s.nan_or_pos_inf > 0) lines.push_back(cat(s.nan_or_pos_inf, " NaN/+inf !"));
  if (t.stage == "logits" || t.stage.rfind("probs", 0) == 0) {
    std::string top = "top:";
    for (const auto& [index, value] : s.top) top += cat(" ", clip(dump_.piece(int32_t(index)), 10), " ", num(value));
    lines.push_back(top);
    if (t.stage.rfind("probs", 0) == 0 && t.stage != "probs_penalized") {  // penalized: still logits
      int64_t nonzero = 0;
      for (float v : dump_.array(t).f32) nonzero += v > 0;
      lines.push_back(cat(nonzero, " tokens with p > 0"));
    }
  } else if (t.stage != "token_ids" && t.stage != "kv_blocks" && t.stage != "template_text" && !s.top.empty()) {
    std::string top = "last row top:";
    for (const auto& [index, value] : s.top) top += cat(" ", num(value));
    lines.push_back(top);
  }
  return lines;
}

Agnode_t* Builder::stage_node(Agraph_t* g, const std::string& stage, int layer) {
  const std::string name = tensor_name(stage, layer);
  const ManifestTensor* t = dump_.entry(stage, layer, opt_.step);
  const NodeMark mark = mark_of(name);
  const char* fill = mark_colour(mark) ? mark_colour(mark) : (t ? stage_colour(stage) : "#ffffff");
  std::vector<std::string> lines = t ? tensor_lines(*t) : std::vector<std::string>{"not recorded"};
  if (mark == NodeMark::FirstDivergence) lines.insert(lines.begin(), "FIRST DIVERGENCE");
  return node(g, "n_" + name, name, lines, fill, mark == NodeMark::FirstDivergence);
}

Agnode_t* Builder::collapsed_layer(int layer) {
  // Colour: the worst mark among this layer's tensors.
  NodeMark worst = NodeMark::None;
  const std::string prefix = cat("L", layer, ".");
  for (const auto& [name, mark] : opt_.marks)
    if (name.rfind(prefix, 0) == 0 && severity(mark) > severity(worst)) worst = mark;
  std::vector<std::string> lines;
  int recorded = 0;
  for (const auto& t : dump_.manifest().tensors) recorded += (t.layer == layer && t.step == opt_.step);
  lines.push_back(cat(recorded, " tensors recorded"));
  if (const ManifestTensor* out = dump_.entry("layer_out", layer, opt_.step)) {
    const TensorSummary& s = dump_.summary(*out);
    lines.push_back(cat("layer_out ", shape_string(out->shape), " rms ", num(s.rms)));
  }
  if (worst == NodeMark::FirstDivergence) lines.insert(lines.begin(), "FIRST DIVERGENCE inside");
  const char* fill = mark_colour(worst) ? mark_colour(worst) : "#e8eef8";
  return node(graph_, cat("layer_", layer), cat("layer ", layer), lines, fill, worst == NodeMark::FirstDivergence);
}

void Builder::build() {
  const Manifest& m = dump_.manifest();
  const int step = opt_.step;
  const ManifestStep* step_entry = nullptr;
  for (const auto& s : m.steps)
    if (s.step == step) step_entry = &s;
  const bool prefill = !step_entry || step_entry->kind == "prefill";

  std::string title = opt_.title.empty() ? cat("journey of \"", clip(m.prompt, 60), "\"") : opt_.title;
  title += cat(" — ", m.model.architecture.empty() ? std::string("model") : m.model.architecture, " ",
               std::filesystem::path(m.model.path).filename().string(), " — step ", step, prefill ? " (prefill)" : " (decode)");
  set(graph_, "label", html_escape(title));

  // Text, template, tokens.
  Agnode_t* text = node(graph_, "text", "text", {cat("\"", clip(m.prompt, 48), "\"")}, "#ffffff", false, false);
  Agnode_t* tmpl;
  if (!m.template_text.empty())
    tmpl = node(graph_, "template", "chat template", {clip(m.template_text, 60), cat(m.template_text.size(), " bytes")},
                "#ffffff", false, false);
  else
    tmpl = node(graph_, "template", "template", {"none: the prompt as is, BOS added"}, "#ffffff", false, false);
  edge(text, tmpl);

  std::vector<std::string> token_lines;
  if (prefill) {
    token_lines.push_back(cat(m.tokens.size(), " prompt tokens"));
    std::string line;
    for (size_t i = 0; i < m.tokens.size() && i < 10; ++i)
      line += cat(i ? " | " : "", m.tokens[i].id, " ", clip(m.tokens[i].piece, 12));
    if (m.tokens.size() > 10) line += " | …";
    token_lines.push_back(line);
  } else if (const ManifestTensor* ids = dump_.entry("token_ids", -1, step)) {
    const NpyArray& a = dump_.array(*ids);
    std::string line = "feeds:";
    for (int32_t id : a.i32) line += cat(" ", id, " ", clip(dump_.piece(id), 12));
    token_lines.push_back(line);
  }
  if (step_entry && !step_entry->positions.empty())
    token_lines.push_back(cat("positions ", step_entry->positions.front(), "…", step_entry->positions.back()));
  const NodeMark ids_mark = mark_of("token_ids");
  Agnode_t* tokens = node(graph_, "tokens", "tokens", token_lines,
                          mark_colour(ids_mark) ? mark_colour(ids_mark) : "#ffffff");
  edge(tmpl, tokens, nullptr, "tokenizer");

  Agnode_t* embeddings = stage_node(graph_, "embeddings", -1);
  edge(tokens, embeddings, nullptr, "lookup");

  // Layers: collapsed nodes, one expanded cluster.
  const int layers = dump_.num_layers();
  const int expanded = std::clamp(opt_.expanded_layer, 0, std::max(0, layers - 1));
  Agnode_t* previous = embeddings;
  for (int layer = 0; layer < layers; ++layer) {
    if (layer != expanded) {
      Agnode_t* n = collapsed_layer(layer);
      edge(previous, n);
      previous = n;
      continue;
    }
    Agraph_t* cluster = agsubg(graph_, mut(cat("cluster_layer_", layer)), 1);
    set(cluster, "label", cat("layer ", layer, " (expanded)"));
    set(cluster, "style", "rounded,dashed");
    set(cluster, "color", "#7a8fb8");
    set(cluster, "fontname", "Helvetica");
    auto S = [&](const char* stage) { return stage_node(cluster, stage, layer); };
    const bool has_qk_norm = dump_.entry("q_norm", layer, step) != nullptr ||
                             (m.model.config.contains("qk_norm") && m.model.config["qk_norm"].is_boolean() &&
                              m.model.config["qk_norm"].get<bool>());
    Agnode_t* attn_norm = S("attn_norm");
    Agnode_t *q = S("q"), *k = S("k"), *v = S("v");
    edge(previous, attn_norm);
    edge(attn_norm, q), edge(attn_norm, k), edge(attn_norm, v);
    Agnode_t *q_in = q, *k_in = k;
    if (has_qk_norm) {
      Agnode_t *qn = S("q_norm"), *kn = S("k_norm");
      edge(q, qn), edge(k, kn);
      q_in = qn, k_in = kn;
    }
    Agnode_t *q_rope = S("q_rope"), *k_rope = S("k_rope");
    edge(q_in, q_rope), edge(k_in, k_rope);
    // The KV cache: this step's k and v are written, every cached position is read back.
    std::vector<std::string> kv_lines;
    if (const ManifestTensor* blocks = dump_.entry("kv_blocks", -1, step)) {
      const NpyArray& a = dump_.array(*blocks);
      std::string table = "block table:";
      for (size_t i = 0; i < a.i32.size() && i < 12; ++i) table += cat(" ", a.i32[i]);
      kv_lines.push_back(table);
    }
    if (step_entry && !step_entry->positions.empty())
      kv_lines.push_back(cat(step_entry->positions.back() + 1, " slots used"));
    if (kv_lines.empty()) kv_lines.push_back("paged K/V of all positions");
    Agnode_t* kv = node(cluster, "kv_cache", "KV cache", kv_lines, "#e6f7f2");
    edge(k_rope, kv, "dashed", "write");
    edge(v, kv, "dashed", "write");
    Agnode_t* scores = S("attn_scores");
    edge(q_rope, scores);
    edge(kv, scores, "dashed", "K");
    Agnode_t* weights = S("attn_weights");
    edge(scores, weights, nullptr, "softmax");
    Agnode_t* context = S("attn_context");
    edge(weights, context);
    edge(kv, context, "dashed", "V");
    Agnode_t* attn_out = S("attn_out");
    edge(context, attn_out);
    Agnode_t* resid = S("resid_attn");
    edge(attn_out, resid);
    edge(previous, resid, "dotted", "residual");
    Agnode_t* ffn_norm = S("ffn_norm");
    edge(resid, ffn_norm);
    Agnode_t *gate = S("gate"), *up = S("up");
    edge(ffn_norm, gate), edge(ffn_norm, up);
    Agnode_t* act = S("act");
    edge(gate, act, nullptr, "silu"), edge(up, act);
    Agnode_t* ffn_out = S("ffn_out");
    edge(act, ffn_out);
    Agnode_t* layer_out = S("layer_out");
    edge(ffn_out, layer_out);
    edge(resid, layer_out, "dotted", "residual");
    previous = layer_out;
  }

  Agnode_t* final_norm = stage_node(graph_, "final_norm", -1);
  edge(previous, final_norm);
  Agnode_t* logits = stage_node(graph_, "logits", -1);
  edge(final_norm, logits, nullptr, "LM head");

  // Sampling: the processors' settings, the distributions recorded, the token drawn.
  std::vector<std::string> sampling_lines;
  if (m.settings.contains("sampling")) {
    const auto& s = m.settings["sampling"];
    if (s.value("greedy", false)) sampling_lines.push_back("greedy (argmax)");
    else {
      std::string line;
      for (const char* key : {"temperature", "top_k", "top_p", "min_p"})
        if (s.contains(key)) line += cat(line.empty() ? "" : " · ", key, " ", s[key].dump());
      sampling_lines.push_back(line);
    }
  }
  NodeMark sampling_mark = NodeMark::None;
  for (const auto& info : kStages) {
    const std::string stage(info.name);
    if (stage.rfind("probs", 0) != 0) continue;
    if (severity(mark_of(stage)) > severity(sampling_mark)) sampling_mark = mark_of(stage);
    if (const ManifestTensor* t = dump_.entry(stage, -1, step); t && stage != "probs_penalized") {
      int64_t nonzero = 0;
      for (float p : dump_.array(*t).f32) nonzero += p > 0;
      sampling_lines.push_back(cat(stage, ": ", nonzero, " tokens with p > 0"));
    }
  }
  if (step_entry && step_entry->sampled)
    sampling_lines.push_back(cat("sampled \"", clip(step_entry->sampled->piece, 16), "\" (id ", step_entry->sampled->id,
                                 ") p = ", num(step_entry->sampled->prob)));
  Agnode_t* sampling = node(graph_, "sampling", "sampling", sampling_lines,
                            mark_colour(sampling_mark) ? mark_colour(sampling_mark) : "#f0e0ff");
  edge(logits, sampling);

  std::vector<std::string> out_lines;
  std::string generated;
  for (const auto& s : m.steps)
    if (s.sampled) generated += cat(generated.empty() ? "" : " | ", clip(s.sampled->piece, 12));
  out_lines.push_back(generated.empty() ? std::string("(nothing sampled)") : clip(generated, 80));
  if (m.settings.contains("generated_text") && m.settings["generated_text"].is_string())
    out_lines.push_back(cat("\"", clip(m.settings["generated_text"].get<std::string>(), 60), "\""));
  Agnode_t* output = node(graph_, "output", "output tokens", out_lines, "#ffffff", false, false);
  edge(sampling, output);
}

struct GvcContext {
  GVC_t* gvc = gvContext();
  ~GvcContext() { gvFreeContext(gvc); }
};

}  // namespace

std::string journey_dot(const Dump& dump, const GraphOptions& options) {
  Builder builder(dump, options);
  builder.build();
  GvcContext context;
  char* data = nullptr;
  unsigned int length = 0;
  // "canon" writes the graph back in the dot language without laying it out.
  if (gvRenderData(context.gvc, builder.graph(), "canon", &data, &length) != 0 || !data)
    fail("Graphviz could not write the journey graph as dot");
  std::string out(data, length);
  gvFreeRenderData(data);
  return out;
}

std::string render_journey(const Dump& dump, const GraphOptions& options, const std::string& format) {
  if (format != "svg" && format != "png") fail("journey-trace render: unknown format \"", format, "\" (svg or png)");
  Builder builder(dump, options);
  builder.build();
  GvcContext context;
  if (gvLayout(context.gvc, builder.graph(), "dot") != 0)
    fail("Graphviz could not lay out the journey graph (is the dot layout plugin installed?)");
  char* data = nullptr;
  unsigned int length = 0;
  const int rc = gvRenderData(context.gvc, builder.graph(), format.c_str(), &data, &length);
  gvFreeLayout(context.gvc, builder.graph());
  if (rc != 0 || !data || length == 0)
    fail("Graphviz could not render the journey as ", format, " (is its render plugin installed?)");
  std::string out(data, length);
  gvFreeRenderData(data);
  return out;
}

void render_journey_to_file(const Dump& dump, const GraphOptions& options, const std::filesystem::path& out) {
  const std::string ext = out.extension().string();
  std::string bytes;
  if (ext == ".svg") bytes = render_journey(dump, options, "svg");
  else if (ext == ".png") bytes = render_journey(dump, options, "png");
  else if (ext == ".dot" || ext == ".gv") bytes = journey_dot(dump, options);
  else fail("journey-trace render: ", out.string(), ": the extension must be .svg, .png or .dot");
  std::ofstream file(out, std::ios::binary);
  file.write(bytes.data(), std::streamsize(bytes.size()));
  if (!file) fail("cannot write ", out.string());
}

}  // namespace journey::tracer
