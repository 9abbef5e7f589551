#include "report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "journey_graph.h"
#include "report_page.h"
#include "trace/stages.h"

namespace journey::tracer {
namespace {

using nlohmann::json;

// Four significant digits: enough to read, and keeps the page small.
double round_sig(double v, int digits = 4) {
  if (v == 0 || !std::isfinite(v)) return 0.0;
  const double scale = std::pow(10.0, digits - 1 - int(std::floor(std::log10(std::fabs(v)))));
  return std::round(v * scale) / scale;
}

std::string base64(const std::vector<uint8_t>& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(bytes[i]) << 16) | (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(bytes[i + 2]) : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// The ids of the `top` largest values of a row, largest first (ties: the lower id).
std::vector<int32_t> top_ids(const float* row, int64_t n, size_t top) {
  std::vector<int32_t> order(static_cast<size_t>(n));  // [n]
  for (int32_t i = 0; i < int32_t(n); ++i) order[size_t(i)] = i;
  const size_t k = std::min(top, order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  order.resize(k);
  return order;
}

// softmax of one row in double (for the distributions shown next to the logits).
std::vector<double> softmax_row(const float* row, int64_t n) {
  double max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, double(row[i]));
  std::vector<double> p(static_cast<size_t>(n));  // [n]
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[size_t(i)] = std::isfinite(row[i]) ? std::exp(double(row[i]) - max) : 0.0;
  for (double& v : p) v /= sum;
  return p;
}

class ReportBuilder {
 public:
  ReportBuilder(const Dump& dump, const ReportOptions& options) : dump_(dump), m_(dump.manifest()), opt_(options) {
    for (const auto& s : m_.steps) steps_.push_back(&s);
    std::sort(steps_.begin(), steps_.end(), [](auto* a, auto* b) { return a->step < b->step; });
  }

  json build() {
    json d;
    d["prompt"] = m_.prompt;
    d["template_text"] = m_.template_text;
    d["model"] = {{"path", m_.model.path}, {"architecture", m_.model.architecture}, {"hash", m_.model.hash}};
    d["command"] = m_.generated_by_command.empty() ? m_.generated_by_tool : m_.generated_by_command;
    d["settings"] = m_.settings;
    d["layers"] = dump_.num_layers();
    d["initial"] = {{"layer", opt_.initial_layer}, {"step", opt_.initial_step}};
    d["positions"] = positions();
    d["steps"] = steps();
    d["next"] = next_tokens();
    d["lens"] = logit_lens();
    d["attention"] = attention();
    d["stats"] = stats();
    if (opt_.comparison) d["compare"] = comparison(*opt_.comparison);
    if (m_.tensor_parallel) d["tensor_parallel"] = tensor_parallel();
    json vocab = json::object();
    for (int32_t id : ids_) vocab[std::to_string(id)] = dump_.piece(id);
    d["vocab"] = vocab;
    return d;
  }

 private:
  int32_t use(int32_t id) {
    ids_.insert(id);
    return id;
  }

  // A dump of one rank of a tensor-parallel group: which heads, KV heads, FFN columns and
  // vocabulary rows each rank held — this dump's, and on rank 0 the other ranks' dumps in
  // DIR/rank<r>/ (where `journey trace --tensor-parallel N` writes them).
  json tensor_parallel() {
    const ManifestTensorParallel& tp = *m_.tensor_parallel;
    json ranks = json::array();
    std::vector<RankDump> dumps;  // this dump, and on rank 0 every other rank's found beside it
    for (int r = 0; r < tp.world_size; ++r) {
      const std::filesystem::path other = dump_.dir() / ("rank" + std::to_string(r));
      if (r == tp.rank) {
        ranks.push_back({{"rank", r}, {"dump", "this one"}, {"shard", tp.shard}});
        dumps.push_back({r, &dump_, tp});
      } else if (tp.rank == 0 && std::filesystem::exists(other / "manifest.json")) {
        auto theirs = std::make_unique<Dump>(other);
        if (!theirs->manifest().tensor_parallel) continue;
        ranks.push_back({{"rank", r}, {"dump", "rank" + std::to_string(r) + "/"}, {"shard", theirs->manifest().tensor_parallel->shard}});
        dumps.push_back({r, theirs.get(), *theirs->manifest().tensor_parallel});
        other_ranks_.push_back(std::move(theirs));
      }
    }
    json out = {{"rank", tp.rank}, {"world_size", tp.world_size}, {"ranks", ranks}};
    if (json p = partials(dumps, tp.world_size); !p.is_null()) out["partials"] = std::move(p);
    return out;
  }

  // One rank's dump and what it held.
  struct RankDump {
    int rank;
    const Dump* dump;
    const ManifestTensorParallel& tp;
  };

  // How each layer's work was split: every rank's partial stage (its share before the all-reduce
  // or the gather) beside the combined stage of this dump. Per step, one row per (stage, layer):
  // [partial index, layer, [norm of each rank's share (null: not recorded)], norm of the combined,
  //  max |combined - shares combined| (null unless every rank's share is here)]. The check says
  // whether the combined tensor is exactly the recorded shares put together: summed (attn_out,
  // ffn_out; only the order of the f32 sum differs) or side by side (logits, along the vocabulary).
  json partials(const std::vector<RankDump>& dumps, int world_size) {
    struct Kind { const char* partial; const char* whole; bool summed; };
    static const Kind kKinds[] = {{"attn_out_partial", "attn_out", true}, {"ffn_out_partial", "ffn_out", true},
                                  {"logits_partial", "logits", false}};
    auto norm = [](const NpyArray& a) { return summarize(a).l2; };  // the tracer's one L2 norm
    json stages = json::array(), per_step = json::array();
    bool any = false;
    for (const auto& k : kKinds)
      stages.push_back({{"partial", k.partial}, {"whole", k.whole}, {"combine", k.summed ? "sum" : "gather"},
                        {"covers", covered_by(k.partial)}});
    for (const ManifestStep* s : steps_) {
      json rows = json::array();
      for (size_t ki = 0; ki < std::size(kKinds); ++ki) {
        const Kind& k = kKinds[ki];
        const bool global = !k.summed;
        for (int layer = global ? -1 : 0; layer < (global ? 0 : dump_.num_layers()); ++layer) {
          json norms = json::array();
          std::vector<const NpyArray*> shares;  // [ranks] in rank order, null where missing
          for (const RankDump& d : dumps) {
            const ManifestTensor* t = d.dump->entry(k.partial, layer, s->step);
            const NpyArray* a = t ? &d.dump->array(*t) : nullptr;
            shares.push_back(a);
            norms.push_back(a ? json(round_sig(norm(*a))) : json(nullptr));
          }
          if (std::all_of(shares.begin(), shares.end(), [](auto* a) { return a == nullptr; })) continue;
          any = true;
          const ManifestTensor* w = dump_.entry(k.whole, layer, s->step);
          const NpyArray* whole = w ? &dump_.array(*w) : nullptr;
          json check = nullptr;
          const bool complete = whole && int(dumps.size()) == world_size &&
                                std::none_of(shares.begin(), shares.end(), [](auto* a) { return a == nullptr; });
          if (complete) check = combine_error(*whole, shares, dumps, k.summed, k.partial);
          rows.push_back({int(ki), layer, norms, whole ? json(round_sig(norm(*whole))) : json(nullptr), check});
        }
      }
      per_step.push_back(rows);
    }
    if (!any) return nullptr;
    json ranks = json::array();
    for (const RankDump& d : dumps) ranks.push_back(d.rank);
    return {{"ranks", ranks}, {"stages", stages}, {"steps", per_step}};
  }

  // The key of the shard whose range a partial stage covers ("heads"), from the manifest; "" when
  // the manifest does not say (a dump written before the partial stages).
  std::string covered_by(const std::string& partial) const {
    const json& p = m_.tensor_parallel->partials;
    return p.is_object() && p.contains(partial) && p[partial].is_string() ? p[partial].get<std::string>() : "";
  }

  // max |whole - shares combined|, or a string saying why the shapes cannot be lined up.
  json combine_error(const NpyArray& whole, const std::vector<const NpyArray*>& shares,
                     const std::vector<RankDump>& dumps, bool summed, const std::string& partial) {
    const std::string covers = covered_by(partial);
    if (whole.dtype != NpyDType::F32) return "not f32";
    for (const NpyArray* a : shares)
      if (a->dtype != NpyDType::F32) return "not f32";
    if (summed) {
      for (const NpyArray* a : shares)
        if (a->shape != whole.shape) return "shapes differ";
      double max_error = 0;
      for (size_t i = 0; i < whole.f32.size(); ++i) {
        double sum = 0;
        for (const NpyArray* a : shares) sum += double(a->f32[i]);
        max_error = std::max(max_error, std::fabs(sum - double(whole.f32[i])));
      }
      return max_error;
    }
    // gathered: rank r's column j is the whole's column (its range's begin + j)
    if (whole.shape.size() != 2) return "shapes differ";
    const int64_t rows = whole.shape[0], V = whole.shape[1];
    double max_error = 0;
    for (size_t r = 0; r < shares.size(); ++r) {
      const json& shard = dumps[r].tp.shard;
      if (covers.empty() || !shard.contains(covers) || !shard[covers].is_array() || shard[covers].empty() ||
          !shard[covers][0].is_number_integer())
        return "no range for " + partial;
      const int64_t begin = shard[covers][0].get<int64_t>();
      const NpyArray& a = *shares[r];
      if (a.shape.size() != 2 || a.shape[0] != rows || begin < 0 || begin + a.shape[1] > V) return "shapes differ";
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < a.shape[1]; ++j)
          max_error = std::max(max_error, std::fabs(double(a.f32[size_t(i * a.shape[1] + j)]) -
                                                    double(whole.f32[size_t(i * V + begin + j)])));
    }
    return max_error;
  }

  // Every position of the run: [id, generated (0/1), the step that fed it (-1: never fed, the
  // last sampled token), the step that sampled it (-1: a prompt token)].
  json positions() {
    json out = json::array();
    for (const auto& t : m_.tokens) out.push_back({use(t.id), 0, -1, -1});
    for (const ManifestStep* s : steps_)
      if (s->sampled && !s->positions.empty()) {
        const size_t p = size_t(s->positions.back() + 1);
        while (out.size() <= p) out.push_back({0, 1, -1, -1});
        out[p] = {use(s->sampled->id), p < m_.tokens.size() ? 0 : 1, -1, s->step};
      }
    for (const ManifestStep* s : steps_)
      for (int64_t p : s->positions)
        if (p >= 0 && size_t(p) < out.size() && out[size_t(p)][2] == -1) out[size_t(p)][2] = s->step;
    num_positions_ = out.size();
    return out;
  }

  // Per step: what it fed, what it sampled, the sampling pipeline on a fixed set of tokens, the KV blocks.
  json steps() {
    int64_t block_size = 0;
    if (m_.settings.contains("kv_cache") && m_.settings["kv_cache"].contains("block_size"))
      block_size = m_.settings["kv_cache"]["block_size"].get<int64_t>();
    json out = json::array();
    for (const ManifestStep* s : steps_) {
      json step = {{"step", s->step}, {"kind", s->kind}, {"positions", s->positions}};
      if (s->sampled) {
        json top = json::array();
        for (const auto& alt : s->sampled->top) top.push_back({use(alt.id), round_sig(alt.prob)});
        step["sampled"] = {{"id", use(s->sampled->id)}, {"prob", round_sig(s->sampled->prob)}, {"top", top}};
      }
      step["pipeline"] = pipeline(*s);
      if (json g = grammar_view(*s); !g.is_null()) step["grammar"] = std::move(g);
      if (const ManifestTensor* blocks = dump_.entry("kv_blocks", -1, s->step)) {
        const auto& table = dump_.array(*blocks).i32;
        const int64_t slots = s->positions.empty() ? 0 : s->positions.back() + 1;
        step["kv"] = {{"block_table", table}, {"slots_used", slots},
                      {"block_size", block_size > 0 ? block_size
                                                    : (table.empty() ? 0 : (slots + int64_t(table.size()) - 1) / int64_t(table.size()))}};
      }
      if (!s->kv_cache.is_null()) step["server"] = s->kv_cache;  // journey serve --trace-dir: shared blocks, batch
      out.push_back(step);
    }
    return out;
  }

  // The sampler's stages at one step, each on the same tokens: the top of the raw logits, the
  // sampled token and the top of what was finally sampled from. Labels say logits or probabilities.
  json pipeline(const ManifestStep& s) {
    struct Stage { const char* name; const char* label; const char* kind; const float* row; int64_t n; };
    std::vector<Stage> stages;
    if (const ManifestTensor* t = dump_.entry("logits", -1, s.step); t && !t->shape.empty()) {
      const auto& a = dump_.array(*t).f32;
      const int64_t V = t->shape.back();
      stages.push_back({"logits", "raw logits", "logit", a.data() + a.size() - size_t(V), V});
    }
    static const std::pair<const char*, const char*> kSampler[] = {
        {"probs_penalized", "after penalties"}, {"probs_temperature", "temperature, softmax"},
        {"probs_top_k", "top-k"}, {"probs_top_p", "top-p"}, {"probs_min_p", "min-p: sampled from"}};
    for (const auto& [name, label] : kSampler)
      if (const ManifestTensor* t = dump_.entry(name, -1, s.step)) {
        const auto& a = dump_.array(*t).f32;
        stages.push_back({name, label, std::string(name) == "probs_penalized" ? "logit" : "prob", a.data(),
                          int64_t(a.size())});
      }
    if (stages.empty()) return json::array();
    std::vector<int32_t> tokens = top_ids(stages.front().row, stages.front().n, size_t(opt_.top));
    auto add = [&](int32_t id) { if (std::find(tokens.begin(), tokens.end(), id) == tokens.end()) tokens.push_back(id); };
    if (s.sampled) add(s.sampled->id);
    for (int32_t id : top_ids(stages.back().row, stages.back().n, 4)) add(id);
    json out = json::array();
    for (const Stage& st : stages) {
      json values = json::array();
      for (int32_t id : tokens) values.push_back(id < st.n ? round_sig(st.row[id]) : 0.0);
      int64_t kept = 0;
      for (int64_t i = 0; i < st.n; ++i) kept += std::string(st.kind) == "prob" ? st.row[i] > 0 : std::isfinite(st.row[i]);
      out.push_back({{"stage", st.name}, {"label", st.label}, {"kind", st.kind}, {"kept", kept}, {"values", values}});
    }
    json ids = json::array();
    for (int32_t id : tokens) ids.push_back(use(id));
    return {{"tokens", ids}, {"stages", out}};
  }

  // Structured output at one step (Stage::grammar_mask, a bitmask in i32 words): how many ids the
  // grammar allowed, the raw logits' top tokens with whether each was allowed (what the model
  // wanted), and the top allowed tokens by logit (what the grammar let it choose from).
  json grammar_view(const ManifestStep& s) {
    const ManifestTensor* m = dump_.entry("grammar_mask", -1, s.step);
    if (!m) return nullptr;
    const auto& words = dump_.array(*m).i32;
    auto allowed = [&](int64_t id) { return id >= 0 && size_t(id / 32) < words.size() && ((uint32_t(words[size_t(id / 32)]) >> (id % 32)) & 1u); };
    int64_t count = 0;
    for (int32_t w : words) count += __builtin_popcount(uint32_t(w));
    json out = {{"allowed", count}, {"vocab", int64_t(words.size()) * 32}};
    const ManifestTensor* t = dump_.entry("logits", -1, s.step);
    if (!t || t->shape.empty()) return out;
    const auto& a = dump_.array(*t).f32;
    const int64_t V = t->shape.back();
    out["vocab"] = V;
    const float* row = a.data() + a.size() - size_t(V);
    json wanted = json::array(), permitted = json::array();
    for (int32_t id : top_ids(row, V, 8)) wanted.push_back({use(id), round_sig(row[id]), allowed(id)});
    std::vector<float> masked(row, row + V);  // [V] the logits the sampler saw
    for (int64_t i = 0; i < V; ++i)
      if (!allowed(i)) masked[size_t(i)] = -std::numeric_limits<float>::infinity();
    for (int32_t id : top_ids(masked.data(), V, 8))
      if (allowed(id)) permitted.push_back({use(id), round_sig(row[id])});
    out["wanted"] = wanted;
    out["permitted"] = permitted;
    return out;
  }

  // The rows of a per-step tensor [T, ...] belong to the step's positions; a tensor of one row in a
  // step of T tokens is the last position's (decode logits, or a prefill traced for the last row).
  std::vector<int64_t> row_positions(const ManifestStep& s, int64_t rows) const {
    if (int64_t(s.positions.size()) == rows) return s.positions;
    if (rows == 1 && !s.positions.empty()) return {s.positions.back()};
    return {};
  }

  // The model's next-token distribution at every position with logits: [[id, p], ...].
  json next_tokens() {
    json out = json::array();
    out.get_ref<json::array_t&>().resize(num_positions_, nullptr);
    for (const ManifestStep* s : steps_) {
      const ManifestTensor* t = dump_.entry("logits", -1, s->step);
      if (!t || t->shape.size() != 2) continue;
      const auto& a = dump_.array(*t).f32;
      const int64_t V = t->shape[1];
      const auto rows = row_positions(*s, t->shape[0]);
      for (size_t r = 0; r < rows.size(); ++r) {
        if (rows[r] < 0 || size_t(rows[r]) >= num_positions_) continue;
        const float* row = a.data() + r * size_t(V);
        const std::vector<double> p = softmax_row(row, V);
        json top = json::array();
        for (int32_t id : top_ids(row, V, size_t(opt_.top))) top.push_back({use(id), round_sig(p[size_t(id)])});
        out[size_t(rows[r])] = top;
      }
    }
    return out;
  }

  // The logit lens at every position: per layer [[id, p], ...] (null where not recorded).
  json logit_lens() {
    const int L = dump_.num_layers();
    json out = json::array();
    out.get_ref<json::array_t&>().resize(num_positions_, nullptr);
    bool any = false;
    for (const ManifestStep* s : steps_)
      for (int layer = 0; layer < L; ++layer) {
        const ManifestTensor* ids = dump_.entry("logit_lens", layer, s->step);
        const ManifestTensor* probs = dump_.entry("logit_lens_probs", layer, s->step);
        if (!ids || !probs || ids->shape != probs->shape || ids->shape.size() != 2) continue;
        const auto& id_values = dump_.array(*ids).i32;
        const auto& p_values = dump_.array(*probs).f32;
        const int64_t K = ids->shape[1];
        const auto rows = row_positions(*s, ids->shape[0]);
        for (size_t r = 0; r < rows.size(); ++r) {
          if (rows[r] < 0 || size_t(rows[r]) >= num_positions_) continue;
          json& at = out[size_t(rows[r])];
          if (at.is_null()) at = json::array(), at.get_ref<json::array_t&>().resize(size_t(L), nullptr);
          json top = json::array();
          for (int64_t k = 0; k < K; ++k)
            top.push_back({use(id_values[r * size_t(K) + size_t(k)]), round_sig(p_values[r * size_t(K) + size_t(k)])});
          at[size_t(layer)] = top;
          any = true;
        }
      }
    return any ? out : json(nullptr);
  }

  // Attention weights of every layer and head for every position, as bytes (weight x 255) in one
  // base64 string: the row of position p (its weights over positions 0..p) of layer l, head h
  // starts at ((l * H + h) * N(N+1)/2) + p(p+1)/2.
  json attention() {
    const int L = dump_.num_layers();
    int64_t H = 0;
    std::vector<int> first_heads;  // the head filter of the first attn_weights (empty: all heads)
    for (const auto& t : m_.tensors)
      if (t.stage == "attn_weights" && t.shape.size() == 3) {
        H = t.shape[0];
        first_heads = t.heads;
        break;
      }
    std::vector<int> head_ids = first_heads;
    if (H == 0) return nullptr;
    if (head_ids.empty())
      for (int h = 0; h < H; ++h) head_ids.push_back(h);
    const int64_t N = std::min<int64_t>(int64_t(num_positions_), opt_.max_positions);
    const int64_t tri = N * (N + 1) / 2;
    std::vector<uint8_t> bytes(size_t(L * H * tri), 0);  // [L, H, tri]
    std::vector<int> layers_present;
    for (int layer = 0; layer < L; ++layer) {
      bool present = false;
      for (const ManifestStep* s : steps_) {
        const ManifestTensor* t = dump_.entry("attn_weights", layer, s->step);
        if (!t || t->shape.size() != 3 || t->shape[0] != H || t->heads != first_heads) continue;  // cannot line up
        const auto& a = dump_.array(*t).f32;
        const int64_t T = t->shape[1], P = t->shape[2];
        const auto rows = row_positions(*s, T);
        for (int64_t r = 0; r < int64_t(rows.size()); ++r) {
          const int64_t p = rows[size_t(r)];
          if (p < 0 || p >= N) continue;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t c = 0; c <= p && c < P; ++c) {
              const float w = a[size_t((h * T + r) * P + c)];
              bytes[size_t((layer * H + h) * tri + p * (p + 1) / 2 + c)] =
                  uint8_t(std::lround(std::clamp(double(w), 0.0, 1.0) * 255.0));
            }
          present = true;
        }
      }
      if (present) layers_present.push_back(layer);
    }
    return {{"heads", head_ids}, {"positions", N}, {"truncated", int64_t(num_positions_) > N},
            {"layers", layers_present}, {"weights", base64(bytes)}};
  }

  // Statistics of every recorded tensor: names in journey order, and per step one row per name
  // [shape, min, max, mean, rms, masked (-inf), NaN/+inf] (0 where the step does not hold it).
  json stats() {
    std::vector<const ManifestTensor*> order;
    for (const auto& t : m_.tensors) order.push_back(&t);
    std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
      return journey_order_key(a->stage, a->layer, 0) < journey_order_key(b->stage, b->layer, 0);
    });
    std::vector<std::string> names;
    std::map<std::string, size_t> index;
    for (const ManifestTensor* t : order)
      if (index.emplace(t->name, names.size()).second) names.push_back(t->name);
    std::map<int, json> per_step;
    for (const ManifestStep* s : steps_) {
      json rows = json::array();
      rows.get_ref<json::array_t&>().resize(names.size(), 0);
      per_step[s->step] = rows;
    }
    for (const ManifestTensor* t : order) {
      if (!per_step.count(t->step)) continue;
      const TensorSummary& s = dump_.summary(*t);
      per_step[t->step][index[t->name]] = {shape_string(t->shape) + (t->dtype == "f32" ? "" : " " + t->dtype),
                                           round_sig(s.min), round_sig(s.max), round_sig(s.mean), round_sig(s.rms),
                                           s.neg_inf, s.nan_or_pos_inf};
    }
    json steps = json::array();
    for (const ManifestStep* s : steps_) steps.push_back(per_step[s->step]);
    return {{"names", names}, {"steps", steps}};
  }

  // report A --compare B: B's verdict per tensor and step, [status, nmse, max_abs] (status as in
  // compare_status_name), the first divergence, and what each dump is.
  json comparison(const ComparisonResult& r) {
    std::map<int, size_t> step_index;
    for (size_t i = 0; i < steps_.size(); ++i) step_index[steps_[i]->step] = i;
    json per_step = json::array();
    for (size_t i = 0; i < steps_.size(); ++i) per_step.push_back(json::object());
    for (const auto& c : r.tensors) {
      auto it = step_index.find(c.step);
      if (it == step_index.end()) continue;
      per_step[it->second][c.name] = {std::string(compare_status_name(c.status)), round_sig(c.nmse), round_sig(c.max_abs)};
    }
    // What each dump is (compare_dumps' labels: backend and weight type) and the tolerance profile.
    json out = {{"a", cat(r.ours_label, " — ", r.ours.string())},
                {"b", cat(r.golden_label, " — ", r.golden.string())},
                {"profile", cat(tolerance_profile_name(r.profile), " tolerances (", r.profile_source, ")")},
                {"ok", r.ok()},
                {"steps", per_step}};
    if (const TensorComparison* first = r.first())
      out["first"] = {{"name", first->name}, {"stage", first->stage}, {"layer", first->layer}, {"step", first->step},
                      {"status", std::string(compare_status_name(first->status))}, {"detail", first->detail},
                      {"text", format_divergence(*first)}};
    return out;
  }

  const Dump& dump_;
  const Manifest& m_;
  const ReportOptions& opt_;
  std::vector<const ManifestStep*> steps_;
  std::set<int32_t> ids_;
  size_t num_positions_ = 0;
  std::vector<std::unique_ptr<Dump>> other_ranks_;  // rank 0's report: the other ranks' dumps (DIR/rank<r>/)
};

// Inline SVG: drop the XML declaration and DOCTYPE that only a standalone file needs.
std::string inline_svg(std::string svg) {
  const size_t start = svg.find("<svg");
  return start == std::string::npos ? svg : svg.substr(start);
}

// JSON inside <script>: every "<" written as \u003c (still the same JSON), so that no text of the
// run ("</script>", "<!--") can end or change the element.
std::string script_safe(const std::string& json_text) {
  std::string out;
  out.reserve(json_text.size());
  for (char c : json_text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

}  // namespace

json report_data(const Dump& dump, const ReportOptions& options) { return ReportBuilder(dump, options).build(); }

std::string render_report(const Dump& dump, const ReportOptions& options) {
  // One layout per layer (that layer expanded), laid out with the prefill's labels; the page
  // rewrites the node lines for the step on show.
  std::string diagrams;
  const int layers = std::max(1, dump.num_layers());
  const std::vector<int> steps = dump.steps();
  for (int layer = 0; layer < layers; ++layer) {
    GraphOptions graph;
    graph.expanded_layer = layer;
    graph.step = steps.empty() ? 0 : steps.front();
    graph.fixed_lines = 3;
    diagrams += cat("<div class=\"diagram\" data-layer=\"", layer, "\"", layer == options.initial_layer ? "" : " hidden", ">",
                    inline_svg(render_journey(dump, graph, "svg")), "</div>\n");
  }
  const std::string data =
      script_safe(report_data(dump, options).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  // Cut the page at its markers first, so that text inside the SVG or the data can never be
  // mistaken for a marker.
  const std::string page = kReportPage;
  const size_t svg_at = page.find("@@DIAGRAMS@@"), data_at = page.find("@@DATA@@");
  if (svg_at == std::string::npos || data_at == std::string::npos || data_at < svg_at)
    fail("the report page lost its @@DIAGRAMS@@/@@DATA@@ markers");
  return page.substr(0, svg_at) + diagrams + page.substr(svg_at + 12, data_at - svg_at - 12) + data +
         page.substr(data_at + 8);
}

}  // namespace journey::tracer
