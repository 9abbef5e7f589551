// AWQ's scale search on journey's calibration traces (see awq_search.h). The blocks whose output error
// is measured are computed with the reference ops (src/reference/ops.h), the same f32 arithmetic the
// literal forward pass uses.
#include "quant/awq_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/backend.h"
#include "core/error.h"
#include "core/shape.h"
#include "quant/awq.h"
#include "reference/ops.h"
#include "trace/dump_sink.h"
#include "trace/filters.h"
#include "trace/manifest.h"
#include "trace/npy.h"

namespace journey::quant {
namespace {

constexpr const char* kCalibrationStages[] = {"attn_norm", "attn_context", "ffn_norm", "act"};

int64_t head_dim_of(const ModelConfig& c) { return c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads; }

// The width each calibration stage must have.
int64_t stage_width(const ModelConfig& c, const std::string& stage) {
  if (stage == "attn_context") return c.num_heads * head_dim_of(c);
  if (stage == "act") return c.intermediate_size;
  return c.hidden_size;
}

double mean_squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    sum += d * d;
  }
  return a.empty() ? 0.0 : sum / double(a.size());
}

std::vector<float> linear(const std::vector<float>& x /*[N, in]*/, const std::vector<float>& w /*[out, in]*/, int64_t N,
                          int64_t in, int64_t out) {
  std::vector<float> y(static_cast<size_t>(N * out));  // [N, out]
  reference::linear(y.data(), x.data(), w.data(), nullptr, N, in, out);
  return y;
}

// AutoAWQ's module2inspect = self_attn: o_proj(attention(rope(x Wq), rope(x Wk), x Wv)), each
// calibration sequence attending to itself at positions 0, 1, ...
std::vector<float> attention_block(const std::vector<float>& x /*[N, E]*/, const std::vector<float>& wq,
                                   const std::vector<float>& wk, const std::vector<float>& wv,
                                   const std::vector<float>& wo, const ModelConfig& c, std::span<const int64_t> row_begin) {
  const int64_t E = c.hidden_size, H = c.num_heads, KVH = c.num_kv_heads, D = head_dim_of(c);
  const int64_t N = int64_t(x.size()) / E;
  std::vector<float> q = linear(x, wq, N, E, H * D);    // [N, H, D]
  std::vector<float> k = linear(x, wk, N, E, KVH * D);  // [N, KVH, D]
  std::vector<float> v = linear(x, wv, N, E, KVH * D);  // [N, KVH, D]
  std::vector<float> context(static_cast<size_t>(N * H * D));        // [N, H*D]
  for (size_t s = 0; s + 1 < row_begin.size(); ++s) {
    const int64_t r0 = row_begin[s], T = row_begin[s + 1] - r0;
    std::vector<int64_t> positions(static_cast<size_t>(T));  // [T]
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = t;
    reference::rope(q.data() + r0 * H * D, positions.data(), T, H, D, c.rope_theta, c.rope_layout);
    reference::rope(k.data() + r0 * KVH * D, positions.data(), T, KVH, D, c.rope_theta, c.rope_layout);
    reference::attention(context.data() + r0 * H * D, q.data() + r0 * H * D, k.data() + r0 * KVH * D,
                         v.data() + r0 * KVH * D, T, 0, H, KVH, D, nullptr, nullptr);
  }
  return linear(context, wo, N, H * D, E);  // [N, E]
}

// AutoAWQ's module2inspect = mlp: down(silu(x Wgate) * (x Wup)).
std::vector<float> mlp_block(const std::vector<float>& x /*[N, E]*/, const std::vector<float>& wg,
                             const std::vector<float>& wu, const std::vector<float>& wd, const ModelConfig& c) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, N = int64_t(x.size()) / E;
  const std::vector<float> gate = linear(x, wg, N, E, F);  // [N, F]
  const std::vector<float> up = linear(x, wu, N, E, F);    // [N, F]
  std::vector<float> act(static_cast<size_t>(N * F));                   // [N, F]
  reference::swiglu(act.data(), gate.data(), up.data(), N * F);
  return linear(act, wd, N, F, E);
}

// s = mean|x|^alpha, clamped at 1e-4 and normalized by sqrt(max(s) min(s)) (AutoAWQ, duo_scaling off).
std::vector<float> scales_for(const std::vector<double>& x_mean, double alpha) {
  std::vector<float> s(x_mean.size());  // [in]
  for (size_t i = 0; i < s.size(); ++i) s[i] = std::max(float(std::pow(x_mean[i], alpha)), 1e-4f);
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  const float norm = std::sqrt(*hi * *lo);
  for (float& v : s) {
    v /= norm;
    if (!std::isfinite(v)) v = 1.0f;  // AutoAWQ: scales that overflow are set to 1
  }
  return s;
}

std::vector<double> mean_abs_per_channel(const std::vector<float>& x /*[N, in]*/, int64_t in) {
  std::vector<double> mean(size_t(in), 0.0);  // [in]
  const int64_t N = int64_t(x.size()) / in;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < in; ++i) mean[size_t(i)] += std::abs(double(x[size_t(t * in + i)]));
  for (double& m : mean) m /= double(std::max<int64_t>(N, 1));
  return mean;
}

// One linear of a group: its weights, shape, and whether it will be INT4.
struct Member {
  std::vector<float>* weight;  // [out, in]
  int64_t out;
  bool quantized;
};

// The grid search of one group. `block(candidates)` computes the inspected output with the members'
// weights replaced by `candidates` (same order).
template <typename Block>
AwqScaleSearch search_group(std::string group, std::string error_of, const std::vector<Member>& members,
                            const std::vector<float>& x, int64_t in, const std::vector<float>& reference_out,
                            const Block& block, const AwqSearchOptions& o) {
  AwqScaleSearch result;
  result.group = std::move(group);
  result.error_of = std::move(error_of);
  const std::vector<double> x_mean = mean_abs_per_channel(x, in);
  result.output_power = mean_squared_error(reference_out, std::vector<float>(reference_out.size(), 0.0f));
  const int grid = o.search ? o.grid : 1;
  double best_error = std::numeric_limits<double>::infinity();
  for (int r = 0; r < grid; ++r) {
    const double alpha = double(r) / double(o.grid);
    const std::vector<float> s = scales_for(x_mean, alpha);  // [in]; alpha 0: every scale is 1
    std::vector<std::vector<float>> candidates;
    for (const Member& m : members)
      candidates.push_back(m.quantized ? awq_fake_quantize(*m.weight, m.out, in, s, o.group) : *m.weight);
    const double error = mean_squared_error(block(candidates), reference_out);
    result.errors.push_back(error);
    if (r == 0) result.rtn_error = error;
    if (error < best_error) {  // the first minimum wins, as in AutoAWQ
      best_error = error;
      result.best = r;
      result.scales = s;
    }
  }
  result.searched = o.search;
  result.alpha = double(result.best) / double(o.grid);
  result.awq_error = best_error;
  if (!o.search) result.scales.clear();
  return result;
}

AwqScaleSearch not_searched(std::string group, std::string error_of, std::string why) {
  AwqScaleSearch s;
  s.group = std::move(group);
  s.error_of = std::move(error_of);
  s.skipped = std::move(why);
  return s;
}

void scale_columns(std::vector<float>& w /*[out, in]*/, int64_t in, const std::vector<float>& s) {
  for (size_t r = 0; r < w.size() / size_t(in); ++r)
    for (int64_t i = 0; i < in; ++i) w[r * size_t(in) + size_t(i)] *= s[size_t(i)];
}

void divide_rows(std::vector<float>& w /*[out, in]*/, int64_t in, const std::vector<float>& s /*[out]*/) {
  for (size_t r = 0; r < s.size(); ++r)
    for (int64_t i = 0; i < in; ++i) w[r * size_t(in) + size_t(i)] /= s[r];
}

}  // namespace

// ---- calibration dumps ----------------------------------------------------------------------------

AwqCalibration AwqCalibration::open(const std::vector<std::filesystem::path>& dumps, const ModelConfig& config,
                                    const std::filesystem::path& model_path) {
  if (dumps.empty()) fail("AWQ: no calibration dumps given (record them with journey trace of the float model)");
  AwqCalibration cal;
  cal.config_ = config;
  cal.row_begin_ = {0};
  const std::string model_hash = model_fingerprint(model_path);
  for (const std::filesystem::path& dir : dumps) {
    const std::string where = cat("calibration dump ", dir.string());
    const Manifest m = read_manifest(dir / "manifest.json");
    if (m.model.hash != model_hash)
      fail(where, ": recorded from the model ", m.model.path, " (", m.model.hash, "), not from ", model_path.string(), " (",
           model_hash, "); AWQ searches its scales on the float model's own activations");
    Dump dump{dir, {}};
    int64_t next_position = 0;
    for (const ManifestStep& step : m.steps) {
      for (int64_t p : step.positions)
        if (p != next_position++)
          fail(where, ": step ", step.step, " feeds position ", p, " where ", next_position - 1,
               " was expected; calibration needs every step of one sequence (trace without --steps)");
      dump.steps.push_back(step.step);
      for (int64_t l = 0; l < config.num_layers; ++l)
        for (const char* stage : kCalibrationStages) {
          const ManifestTensor* t = m.find(stage, int(l), step.step);
          if (!t)
            fail(where, ": no ", tensor_name(stage, int(l)), " at step ", step.step,
                 "; record with --stages attn_norm,attn_context,ffn_norm,act, every layer and every step (no --layers or --steps)");
          const std::vector<int64_t> expected = {int64_t(step.positions.size()), stage_width(config, stage)};
          if (t->shape != expected || t->dtype != "f32")
            fail(where, ": ", t->name, " at step ", step.step, " is ", t->dtype, " ", shape_string(t->shape), ", expected f32 ",
                 shape_string(expected), " for this model");
        }
    }
    if (next_position == 0) fail(where, ": the dump holds no steps");
    cal.tokens_ += next_position;
    cal.row_begin_.push_back(cal.tokens_);
    cal.dumps_.push_back(std::move(dump));
  }
  return cal;
}

AwqLayerInputs AwqCalibration::layer(int64_t l) const {
  AwqLayerInputs in;
  in.rows = tokens_;
  std::vector<float>* targets[] = {&in.attn_norm, &in.attn_context, &in.ffn_norm, &in.act};
  for (const Dump& dump : dumps_)
    for (int step : dump.steps)
      for (size_t i = 0; i < 4; ++i) {
        const std::filesystem::path file = dump.dir / tensor_file_name(kCalibrationStages[i], int(l), step);
        const NpyArray a = read_npy(file);
        const int64_t width = stage_width(config_, kCalibrationStages[i]);
        if (a.dtype != NpyDType::F32 || a.shape.size() != 2 || a.shape[1] != width)
          fail(file.string(), ": expected f32 [T, ", width, "], found ", shape_string(a.shape));
        targets[i]->insert(targets[i]->end(), a.f32.begin(), a.f32.end());
      }
  for (size_t i = 0; i < 4; ++i)
    if (int64_t(targets[i]->size()) != tokens_ * stage_width(config_, kCalibrationStages[i]))
      fail("calibration: layer ", l, " stage ", kCalibrationStages[i], " holds ", targets[i]->size(),
           " values, the manifests promised ", tokens_, " rows (a dump changed while it was read?)");
  return in;
}

std::vector<std::filesystem::path> record_awq_calibration(Backend& backend, const std::filesystem::path& model_path,
                                                          const std::vector<std::vector<int32_t>>& windows,
                                                          const std::filesystem::path& out_dir) {
  std::vector<std::filesystem::path> dirs;
  const TraceFilters filters = parse_filters("attn_norm,attn_context,ffn_norm,act", "", "", "");
  for (size_t w = 0; w < windows.size(); ++w) {
    const std::vector<int32_t>& tokens = windows[w];
    const int64_t T = int64_t(tokens.size());
    char name[32];
    std::snprintf(name, sizeof name, "calib-%03zu", w);
    DumpSink sink(out_dir / name, filters);
    std::vector<int64_t> positions(static_cast<size_t>(T));  // [T]
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = t;
    sink.set_step(0, "prefill", positions);
    if (backend.kv_num_blocks() * backend.kv_block_size() < T) backend.allocate_kv_cache((T + 15) / 16, 16);
    SequenceInput seq{0, tokens, 0, {}, false};
    for (int64_t b = 0; b < (T + backend.kv_block_size() - 1) / backend.kv_block_size(); ++b) seq.block_table.push_back(int32_t(b));
    ForwardBatch batch;
    batch.sequences.push_back(std::move(seq));
    backend.forward(batch, &sink);
    Manifest& m = sink.manifest();
    m.generated_by_tool = "journey quantize --type awq (calibration)";
    m.model = manifest_model(model_path, backend.config());
    m.settings = {{"backend", backend.name()}, {"purpose", "AWQ calibration"}};
    for (int32_t id : tokens) m.tokens.push_back({id, ""});
    sink.finish();
    dirs.push_back(sink.directory());
  }
  return dirs;
}

// ---- the search -----------------------------------------------------------------------------------

AwqQuantizable awq_quantizable(const ModelConfig& c, int64_t group) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, D = head_dim_of(c);
  auto ok = [group](int64_t in, int64_t out) { return group > 0 && in % group == 0 && out % 8 == 0; };
  return AwqQuantizable{ok(E, c.num_heads * D), ok(E, c.num_kv_heads * D), ok(E, c.num_kv_heads * D),
                        ok(c.num_heads * D, E), ok(E, F),           ok(E, F),
                        ok(F, E)};
}

std::vector<float> awq_fake_quantize(std::span<const float> weight, int64_t out, int64_t in, std::span<const float> scales,
                                     int64_t group) {
  std::vector<float> scaled(weight.begin(), weight.end());  // [out, in] W diag(s)
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) scaled[size_t(o * in + i)] *= scales[size_t(i)];
  std::vector<float> back = dequantize_awq_linear(quantize_awq_linear(scaled.data(), out, in, group));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) back[size_t(o * in + i)] /= scales[size_t(i)];
  return back;
}

std::vector<AwqScaleSearch> search_and_apply_awq_scales(AwqLayerWeights& w, const ModelConfig& c,
                                                        const AwqLayerInputs& x, std::span<const int64_t> row_begin,
                                                        const AwqQuantizable& qz, const AwqSearchOptions& o) {
  if (c.attention_bias || c.qk_norm)
    fail("AWQ: ", c.architecture, " layers (q/k/v biases or q/k norms) are not supported; llama and mistral are");
  const int64_t E = c.hidden_size, F = c.intermediate_size, H = c.num_heads, KVH = c.num_kv_heads, D = head_dim_of(c);
  std::vector<AwqScaleSearch> found;

  // 1. input_layernorm -> q, k, v: the error of the whole attention block
  {
    const std::vector<float> float_out = attention_block(x.attn_norm, w.q, w.k, w.v, w.o, c, row_begin);
    const std::vector<Member> members = {{&w.q, H * D, qz.q}, {&w.k, KVH * D, qz.k}, {&w.v, KVH * D, qz.v}};
    auto block = [&](const std::vector<std::vector<float>>& m) {
      return attention_block(x.attn_norm, m[0], m[1], m[2], w.o, c, row_begin);
    };
    if (qz.q || qz.k || qz.v) found.push_back(search_group("q_proj,k_proj,v_proj", "self_attn", members, x.attn_norm, E, float_out, block, o));
    else found.push_back(not_searched("q_proj,k_proj,v_proj", "self_attn", cat("not quantized: ", E, " inputs are not whole groups of ", o.group)));
  }
  // 2. v_proj -> o_proj: only without GQA, where v's outputs are o's inputs one to one
  {
    const std::vector<float> float_out = linear(x.attn_context, w.o, x.rows, H * D, E);
    const std::vector<Member> members = {{&w.o, E, qz.o}};
    auto block = [&](const std::vector<std::vector<float>>& m) { return linear(x.attn_context, m[0], x.rows, H * D, E); };
    if (!qz.o) {
      found.push_back(not_searched("o_proj", "o_proj", cat("not quantized: ", H * D, " inputs are not whole groups of ", o.group)));
    } else if (H != KVH) {
      // still quantized (plain RTN); its error is reported, as AutoAWQ leaves it unscaled too
      AwqSearchOptions rtn = o;
      rtn.search = false;
      found.push_back(search_group("o_proj", "o_proj", members, x.attn_context, H * D, float_out, block, rtn));
      found.back().skipped = cat("GQA (", H, " query heads, ", KVH, " KV heads): v_proj's ", KVH * D,
                                 " outputs are not o_proj's ", H * D, " inputs, so no scale can be folded into v_proj (AutoAWQ skips it too)");
    } else {
      found.push_back(search_group("o_proj", "o_proj", members, x.attn_context, H * D, float_out, block, o));
    }
  }
  // 3. post_attention_layernorm -> gate, up: the error of the whole MLP
  {
    const std::vector<float> float_out = mlp_block(x.ffn_norm, w.gate, w.up, w.down, c);
    const std::vector<Member> members = {{&w.gate, F, qz.gate}, {&w.up, F, qz.up}};
    auto block = [&](const std::vector<std::vector<float>>& m) { return mlp_block(x.ffn_norm, m[0], m[1], w.down, c); };
    if (qz.gate || qz.up) found.push_back(search_group("gate_proj,up_proj", "mlp", members, x.ffn_norm, E, float_out, block, o));
    else found.push_back(not_searched("gate_proj,up_proj", "mlp", cat("not quantized: ", F, " outputs or ", E, " inputs do not fit")));
  }
  // 4. up_proj -> down_proj
  {
    const std::vector<float> float_out = linear(x.act, w.down, x.rows, F, E);
    const std::vector<Member> members = {{&w.down, E, qz.down}};
    auto block = [&](const std::vector<std::vector<float>>& m) { return linear(x.act, m[0], x.rows, F, E); };
    if (qz.down) found.push_back(search_group("down_proj", "down_proj", members, x.act, F, float_out, block, o));
    else found.push_back(not_searched("down_proj", "down_proj", cat("not quantized: ", F, " inputs are not whole groups of ", o.group)));
  }

  // Apply every scale at once (AutoAWQ's apply_scale): the op before divides, the linears multiply.
  for (AwqScaleSearch& s : found) {
    if (s.scales.empty()) continue;
    if (s.group == "q_proj,k_proj,v_proj") {
      for (int64_t i = 0; i < E; ++i) w.attn_norm[size_t(i)] /= s.scales[size_t(i)];
      for (auto* m : {&w.q, &w.k, &w.v}) scale_columns(*m, E, s.scales);
    } else if (s.group == "o_proj" && s.skipped.empty()) {
      divide_rows(w.v, E, s.scales);
      scale_columns(w.o, H * D, s.scales);
    } else if (s.group == "gate_proj,up_proj") {
      for (int64_t i = 0; i < E; ++i) w.ffn_norm[size_t(i)] /= s.scales[size_t(i)];
      for (auto* m : {&w.gate, &w.up}) scale_columns(*m, E, s.scales);
    } else if (s.group == "down_proj") {
      divide_rows(w.up, E, s.scales);
      scale_columns(w.down, F, s.scales);
    }
  }
  return found;
}

}  // namespace journey::quant
