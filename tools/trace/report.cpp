#include "report.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "journey_graph.h"
#include "trace/compare.h"
#include "trace/stages.h"

namespace journey::tracer {
namespace {

using nlohmann::json;

double round_sig(double v, int digits = 4) {
  if (v == 0 || !std::isfinite(v)) return std::isfinite(v) ? 0.0 : 0.0;
  const double scale = std::pow(10.0, digits - 1 - int(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

// The piece fed at each position: prompt tokens, then each step's sampled token one position later.
std::vector<std::string> pieces_by_position(const Dump& dump) {
  const Manifest& m = dump.manifest();
  std::vector<std::string> pieces;
  for (const auto& t : m.tokens) pieces.push_back(t.piece);
  for (const auto& s : m.steps)
    if (s.sampled) pieces.push_back(s.sampled->piece);
  return pieces;
}

json attention_data(const Dump& dump, const ReportOptions& options) {
  const Manifest& m = dump.manifest();
  json layers = json::array();
  for (int layer = 0; layer < dump.num_layers(); ++layer) {
    std::vector<const ManifestTensor*> entries;  // attn_weights of this layer, by step
    for (const auto& t : m.tensors)
      if (t.stage == "attn_weights" && t.layer == layer && t.shape.size() == 3) entries.push_back(&t);
    if (entries.empty()) continue;
    std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->step < b->step; });
    const int64_t heads = entries.front()->shape[0];
    std::vector<int> head_ids = entries.front()->heads;
    if (head_ids.empty())
      for (int h = 0; h < heads; ++h) head_ids.push_back(h);
    int64_t cols = 0;
    for (auto* e : entries) cols = std::max(cols, e->shape[2]);
    cols = std::min<int64_t>(cols, options.max_positions);
    json rows = json::array();
    std::vector<std::vector<double>> per_head(static_cast<size_t>(heads));  // [heads][rows * cols]
    bool truncated = false;
    for (auto* e : entries) {
      if (e->shape[0] != heads || e->heads != entries.front()->heads) continue;  // cannot line up
      const NpyArray& a = dump.array(*e);
      const int64_t T = e->shape[1], P = e->shape[2];
      const ManifestStep* step = nullptr;
      for (const auto& s : m.steps)
        if (s.step == e->step) step = &s;
      for (int64_t t = 0; t < T; ++t) {
        if (int64_t(rows.size()) >= options.max_positions) { truncated = true; break; }
        const int64_t position = (step && int64_t(step->positions.size()) == T) ? step->positions[size_t(t)] : P - T + t;
        rows.push_back({{"step", e->step}, {"position", position}});
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t c = 0; c < cols; ++c)
            per_head[size_t(h)].push_back(c < P ? round_sig(a.f32[size_t((h * T + t) * P + c)]) : 0.0);
      }
      if (P > cols) truncated = true;
    }
    json heads_json = json::array();
    for (int64_t h = 0; h < heads; ++h) heads_json.push_back({{"head", head_ids[size_t(h)]}, {"values", per_head[size_t(h)]}});
    layers.push_back({{"layer", layer}, {"rows", rows}, {"cols", cols}, {"heads", heads_json}, {"truncated", truncated}});
  }
  return layers;
}

json steps_data(const Dump& dump) {
  const Manifest& m = dump.manifest();
  int64_t block_size = 0;
  if (m.settings.contains("kv_cache") && m.settings["kv_cache"].contains("block_size"))
    block_size = m.settings["kv_cache"]["block_size"].get<int64_t>();
  json steps = json::array();
  for (const auto& s : m.steps) {
    json step = {{"step", s.step}, {"kind", s.kind}, {"positions", s.positions}};
    if (s.sampled) {
      json top = json::array();
      for (const auto& alt : s.sampled->top) top.push_back({{"id", alt.id}, {"piece", alt.piece}, {"prob", alt.prob}});
      step["sampled"] = {{"id", s.sampled->id}, {"piece", s.sampled->piece}, {"prob", s.sampled->prob}, {"top", top}};
    }
    // The distribution actually sampled from: the last probs_* stage recorded in this step.
    for (auto it = kStages.rbegin(); it != kStages.rend(); ++it) {
      const std::string stage(it->name);
      if (stage.rfind("probs", 0) != 0) continue;
      const ManifestTensor* t = dump.entry(stage, -1, s.step);
      if (!t) continue;
      const auto& p = dump.array(*t).f32;
      std::vector<int32_t> order(p.size());
      for (size_t i = 0; i < p.size(); ++i) order[i] = int32_t(i);
      const size_t k = std::min<size_t>(10, order.size());
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      json top = json::array();
      for (size_t i = 0; i < k; ++i)
        if (p[order[i]] > 0) top.push_back({{"id", order[i]}, {"piece", dump.piece(order[i])}, {"prob", p[order[i]]}});
      step["processed"] = {{"stage", stage}, {"top", top}};
      break;
    }
    if (const ManifestTensor* blocks = dump.entry("kv_blocks", -1, s.step)) {
      const auto& table = dump.array(*blocks).i32;
      const int64_t slots = s.positions.empty() ? 0 : s.positions.back() + 1;
      step["kv"] = {{"block_table", table}, {"slots_used", slots},
                    {"block_size", block_size > 0 ? block_size : (table.empty() ? 0 : (slots + int64_t(table.size()) - 1) / int64_t(table.size()))}};
    }
    steps.push_back(step);
  }
  return steps;
}

json stats_data(const Dump& dump) {
  json rows = json::array();
  std::vector<const ManifestTensor*> order;
  for (const auto& t : dump.manifest().tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return journey_order_key(a->stage, a->layer, a->step) < journey_order_key(b->stage, b->layer, b->step);
  });
  for (const ManifestTensor* t : order) {
    const TensorSummary& s = dump.summary(*t);
    rows.push_back({{"name", t->name}, {"step", t->step}, {"shape", shape_string(t->shape)}, {"dtype", t->dtype},
                    {"min", round_sig(s.min)}, {"max", round_sig(s.max)}, {"mean", round_sig(s.mean)},
                    {"rms", round_sig(s.rms)}, {"masked", s.neg_inf}, {"nonfinite", s.nan_or_pos_inf}});
  }
  return rows;
}

// Inline SVG: drop the XML declaration and DOCTYPE that only a standalone file needs.
std::string inline_svg(std::string svg) {
  const size_t start = svg.find("<svg");
  return start == std::string::npos ? svg : svg.substr(start);
}

// JSON inside <script>: "</" would end the element early.
std::string script_safe(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += "<\\";
    else out += text[i];
  }
  return out;
}

const char* kPage = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>journey trace report</title>
<style>
body{font-family:Helvetica,Arial,sans-serif;margin:1.2em 2em;color:#222;max-width:1400px}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-bottom:2px;margin-top:1.6em}
.meta{color:#555;font-size:.9em} code{background:#f3f3f3;padding:0 3px}
#diagram{overflow:auto;border:1px solid #ddd;max-height:900px} #diagram svg{max-width:none}
.tok{display:inline-block;border:1px solid #aac;border-radius:4px;margin:2px;padding:2px 5px;font-family:monospace;background:#eef2ff}
.tok.gen{background:#f0ffe8;border-color:#9c9} .tok small{color:#777;display:block;font-size:.7em}
.controls{margin:.5em 0} .controls label{margin-right:1em}
.heads{display:flex;flex-wrap:wrap;gap:8px} .heads figure{margin:0;cursor:pointer;text-align:center;font-size:.75em}
.heads figure.sel canvas{outline:3px solid #e66}
.bars{display:flex;flex-wrap:wrap;gap:18px} .dist{width:330px;font-size:.8em}
.bar{display:flex;align-items:center;margin:1px 0} .bar span.l{width:90px;overflow:hidden;white-space:nowrap;font-family:monospace}
.bar div.b{height:12px;background:#7a5cc7;margin-right:4px} .bar.pick div.b{background:#e0683c}
.kv{font-size:.8em;margin:4px 0;display:flex;align-items:center;gap:6px}
.block{display:inline-flex;border:1px solid #4a9;margin-right:4px;flex-direction:column;align-items:center}
.block .cells{display:flex} .cell{width:9px;height:14px;border-right:1px solid #cde}
.cell.used{background:#4a9}
table{border-collapse:collapse;font-size:.8em} td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}
#status{font-size:.8em;color:#080}
</style></head><body>
<h1 id="title">journey trace</h1>
<div class="meta" id="meta"></div>
<p id="status" data-state="loading">drawing…</p>
<h2>1. The journey</h2>
<div id="diagram">@@SVG@@</div>
<h2>2. Tokens</h2>
<div id="template"></div>
<div id="tokens"></div>
<h2>3. Attention</h2>
<div class="controls"><label>layer <select id="layer"></select></label><label>head <select id="head"></select></label>
<span class="meta">rows: the token fed at each position (prefill rows, then one per decode step); columns: positions attended</span></div>
<canvas id="heatmap" width="520" height="520"></canvas>
<div class="heads" id="heads"></div>
<h2>4. Next-token distributions</h2>
<div class="meta">orange: the token sampled. Left bars: the model's raw softmax (top alternatives); right: the distribution sampled from after the processors (last probs_* stage), when recorded.</div>
<div class="bars" id="bars"></div>
<h2>5. KV cache</h2>
<div class="meta">sequence 0: its block table at each step (physical block ids), filled cells = slots holding K/V.</div>
<div id="kv"></div>
<h2>6. Every recorded tensor</h2>
<div class="controls"><label>filter <input id="filter" placeholder="e.g. L0. or logits"></label></div>
<table id="stats"><thead><tr><th>tensor</th><th>step</th><th>shape</th><th>dtype</th><th>min</th><th>max</th><th>mean</th><th>rms</th><th>masked</th><th>NaN/inf</th></tr></thead><tbody></tbody></table>
<script type="application/json" id="data">@@DATA@@</script>
<script>
(function(){
const D = JSON.parse(document.getElementById('data').textContent);
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
$('title').textContent = 'journey of "' + D.prompt + '"';
$('meta').innerHTML = 'model <code>' + esc(D.model.path) + '</code> (' + esc(D.model.architecture) + ', ' + esc(D.model.hash) +
  ') · generated by <code>' + esc(D.generated_by) + '</code> · ' + D.steps.length + ' steps · ' + D.stats.length + ' tensors';
// Tokens.
$('template').innerHTML = D.template_text ? '<p>chat template rendered:</p><pre>' + esc(D.template_text) + '</pre>'
                                          : '<p class="meta">no chat template: the prompt as is, BOS added by the tokenizer</p>';
let html = '';
D.tokens.forEach((t, i) => html += '<span class="tok">' + esc(t.piece) + '<small>' + t.id + ' @' + i + '</small></span>');
D.steps.forEach(s => { if (s.sampled) html += '<span class="tok gen">' + esc(s.sampled.piece) + '<small>' + s.sampled.id +
  ' p=' + s.sampled.prob.toFixed(3) + '</small></span>'; });
$('tokens').innerHTML = html;
const pieces = D.pieces_by_position;
// Attention heatmaps.
let heatmaps = 0, inked = 0;
function colour(v){ const x = Math.max(0, Math.min(1, Math.sqrt(v))); const r = Math.round(255 - 225*x), g = Math.round(255 - 170*x), b = Math.round(255 - 60*x); return 'rgb('+r+','+g+','+b+')'; }
function draw(canvas, L, h, labels){
  const rows = L.rows.length, cols = L.cols, vals = L.heads[h].values;
  const ctx = canvas.getContext('2d');
  const pad = labels ? 70 : 0;
  const cell = Math.max(1, Math.floor(Math.min((canvas.width - pad) / cols, (canvas.height - pad) / rows)));
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let r = 0; r < rows; ++r) for (let c = 0; c < cols; ++c) {
    ctx.fillStyle = colour(vals[r*cols + c]); ctx.fillRect(pad + c*cell, pad + r*cell, cell, cell);
  }
  if (labels) {
    ctx.fillStyle = '#333'; ctx.font = Math.min(12, cell) + 'px monospace'; ctx.textBaseline = 'middle';
    for (let r = 0; r < rows; ++r) { const p = L.rows[r].position; ctx.textAlign = 'right'; ctx.fillText((pieces[p] || '') + ' ' + p, pad - 3, pad + r*cell + cell/2); }
    for (let c = 0; c < cols; ++c) { ctx.save(); ctx.translate(pad + c*cell + cell/2, pad - 3); ctx.rotate(-Math.PI/2); ctx.textAlign = 'left'; ctx.fillText(pieces[c] || '', 0, 0); ctx.restore(); }
  }
  ++heatmaps;
  const px = ctx.getImageData(pad, pad, Math.max(1, cols*cell), Math.max(1, rows*cell)).data;
  for (let i = 0; i < px.length; i += 4) if (px[i] < 200) { ++inked; break; }
}
function show(){
  const L = D.attention[+$('layer').value]; if (!L) return;
  const h = +$('head').value;
  draw($('heatmap'), L, h, true);
  const box = $('heads'); box.innerHTML = '';
  L.heads.forEach((H, i) => {
    const f = document.createElement('figure'); if (i === h) f.className = 'sel';
    const c = document.createElement('canvas'); c.width = 120; c.height = 120; f.appendChild(c);
    const cap = document.createElement('figcaption'); cap.textContent = 'head ' + H.head; f.appendChild(cap);
    f.onclick = () => { $('head').value = i; show(); };
    box.appendChild(f); draw(c, L, i, false);
  });
}
if (D.attention.length) {
  D.attention.forEach((L, i) => $('layer').add(new Option('layer ' + L.layer + (L.truncated ? ' (truncated)' : ''), i)));
  const fillHeads = () => { const L = D.attention[+$('layer').value]; $('head').innerHTML = '';
    L.heads.forEach((H, i) => $('head').add(new Option('head ' + H.head, i))); };
  fillHeads();
  $('layer').onchange = () => { fillHeads(); show(); }; $('head').onchange = show;
  show();
} else { $('heads').innerHTML = '<p class="meta">no attn_weights in this dump (trace with --stages including L*.attn_weights)</p>'; }
// Distributions.
let dists = 0;
function barList(title, top, pick){
  let s = '<div><b>' + esc(title) + '</b>';
  const max = Math.max(...top.map(t => t.prob), 1e-9);
  top.forEach(t => s += '<div class="bar' + (t.id === pick ? ' pick' : '') + '"><span class="l">' + esc(t.piece) +
    '</span><div class="b" style="width:' + Math.round(160 * t.prob / max) + 'px"></div>' + t.prob.toFixed(4) + '</div>');
  return s + '</div>';
}
let bars = '';
D.steps.forEach(s => {
  if (!s.sampled && !s.processed) return;
  const pick = s.sampled ? s.sampled.id : -1;
  bars += '<div class="dist"><b>step ' + s.step + ' (' + s.kind + ')</b>' + (s.sampled ? ' → <code>' + esc(s.sampled.piece) + '</code>' : '');
  if (s.sampled && s.sampled.top.length) bars += barList('raw softmax', s.sampled.top, pick);
  if (s.processed && s.processed.top.length) bars += barList(s.processed.stage, s.processed.top, pick);
  bars += '</div>'; ++dists;
});
$('bars').innerHTML = bars || '<p class="meta">no sampled tokens recorded</p>';
// KV cache.
let kvSteps = 0, kvHtml = '';
D.steps.forEach(s => {
  if (!s.kv) return; ++kvSteps;
  let row = '<div class="kv"><span style="width:130px">step ' + s.step + ' (' + s.kind + '), ' + s.kv.slots_used + ' slots</span>';
  s.kv.block_table.forEach((b, i) => {
    let cells = '';
    for (let j = 0; j < s.kv.block_size; ++j) cells += '<div class="cell' + (i*s.kv.block_size + j < s.kv.slots_used ? ' used' : '') + '"></div>';
    row += '<div class="block"><div class="cells">' + cells + '</div>block ' + b + '</div>';
  });
  kvHtml += row + '</div>';
});
$('kv').innerHTML = kvHtml || '<p class="meta">no kv_blocks stage in this dump</p>';
// Statistics.
function fillStats(){
  const f = $('filter').value; let s = '';
  D.stats.forEach(r => { if (f && r.name.indexOf(f) < 0) return;
    s += '<tr><td>' + esc(r.name) + '</td><td>' + r.step + '</td><td>' + r.shape + '</td><td>' + r.dtype + '</td><td>' + r.min +
         '</td><td>' + r.max + '</td><td>' + r.mean + '</td><td>' + r.rms + '</td><td>' + r.masked + '</td><td>' + r.nonfinite + '</td></tr>'; });
  document.querySelector('#stats tbody').innerHTML = s;
}
$('filter').oninput = fillStats; fillStats();
const svg = document.querySelector('#diagram svg');
const diagramNodes = svg ? svg.querySelectorAll('g.node').length : 0;
const st = $('status');
st.textContent = 'rendered: diagram nodes=' + diagramNodes + ' heatmaps=' + heatmaps + ' inked=' + inked + ' distributions=' + dists +
                 ' kv_steps=' + kvSteps + ' stats_rows=' + D.stats.length;
st.dataset.state = 'ready';
})();
</script>
</body></html>
)HTML";

}  // namespace

json report_data(const Dump& dump, const ReportOptions& options) {
  const Manifest& m = dump.manifest();
  json tokens = json::array();
  for (const auto& t : m.tokens) tokens.push_back({{"id", t.id}, {"piece", t.piece}});
  return {{"prompt", m.prompt},
          {"template_text", m.template_text},
          {"model", {{"path", m.model.path}, {"architecture", m.model.architecture}, {"hash", m.model.hash}}},
          {"generated_by", m.generated_by_command.empty() ? m.generated_by_tool : m.generated_by_command},
          {"settings", m.settings},
          {"tokens", tokens},
          {"pieces_by_position", pieces_by_position(dump)},
          {"steps", steps_data(dump)},
          {"attention", attention_data(dump, options)},
          {"stats", stats_data(dump)}};
}

std::string render_report(const Dump& dump, const ReportOptions& options) {
  GraphOptions graph;
  graph.expanded_layer = options.expanded_layer;
  const std::string svg = inline_svg(render_journey(dump, graph, "svg"));
  const std::string data =
      script_safe(report_data(dump, options).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  // Cut the template at its markers first, so that text inside the SVG or the data can never be
  // mistaken for a marker.
  const std::string page = kPage;
  const size_t svg_at = page.find("@@SVG@@"), data_at = page.find("@@DATA@@");
  if (svg_at == std::string::npos || data_at == std::string::npos || data_at < svg_at)
    fail("the report template lost its @@SVG@@/@@DATA@@ markers");
  return page.substr(0, svg_at) + svg + page.substr(svg_at + 7, data_at - svg_at - 7) + data + page.substr(data_at + 8);
}

}  // namespace journey::tracer
