// journey inspect [MODEL_PATH] [--json] [--memory SIZE]... [--seq-len N]: what is in a model
// directory or file, and what it needs to run: the weights at each precision, the KV cache per
// token, and how many sequences of a given length fit in each memory budget. A directory with only
// config.json is enough for the plan. The facts come from assets/inspect.h; this file prints them.
#include <cstdio>
#include <iostream>

#include "assets/inspect.h"
#include "cli/commands.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

namespace journey::cli {
namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string with_commas(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Decimal units, as model cards and GPU spec sheets use them ("7B in bf16 is about 14 GB").
std::string decimal_gb(uint64_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.2f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

struct PlanArgs {
  std::vector<std::string> budgets;  // as typed: "24GiB", "80GB"
  int64_t seq_len = 0;               // 0: the model's context length
};

void print_plan(const InspectReport& r, const PlanArgs& plan) {
  const ModelConfig& c = r.config;
  const int64_t seq_len = plan.seq_len > 0 ? plan.seq_len : c.max_position_embeddings;
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / std::max<int64_t>(1, c.num_heads);
  std::printf("\nMemory plan (weights in bf16/f16, KV cache in f16: how vLLM and llama.cpp serve by default)\n");
  std::printf("  %-30s %s = %s x 2 bytes (%s)\n", "weights", decimal_gb(r.bytes_bf16).c_str(),
              with_commas(r.parameters).c_str(), human_bytes(r.bytes_bf16).c_str());
  std::printf("  %-30s %s bytes = 2 (K, V) x %lld layers x %lld KV heads x %lld head dim x 2 bytes\n", "KV cache per token",
              with_commas(int64_t(r.kv_bytes_per_token_f16)).c_str(), (long long)c.num_layers, (long long)c.num_kv_heads,
              (long long)head_dim);
  std::printf("  %-30s %s (%s)\n", cat("one sequence of ", seq_len, " tokens").c_str(),
              decimal_gb(r.kv_bytes_per_token_f16 * uint64_t(seq_len)).c_str(),
              human_bytes(r.kv_bytes_per_token_f16 * uint64_t(seq_len)).c_str());
  std::vector<std::string> budgets = plan.budgets;
  if (budgets.empty()) budgets = {"24GB", "80GB"};  // a consumer GPU, a datacenter GPU
  for (const std::string& text : budgets) {
    const MemoryFit fit = fit_in_memory(parse_memory_size(text), r.bytes_bf16, r.kv_bytes_per_token_f16, seq_len);
    if (!fit.weights_fit)
      std::printf("  %-30s the weights alone need %s: they do not fit (try int8 %s or int4 %s)\n",
                  cat("in ", text).c_str(), decimal_gb(fit.weights).c_str(), decimal_gb(r.bytes_q8_0).c_str(),
                  decimal_gb(r.bytes_q4_0).c_str());
    else
      std::printf("  %-30s %s sequences of %lld tokens (%s left for the KV cache after the weights)\n",
                  cat("in ", text).c_str(), with_commas(fit.sequences).c_str(), (long long)seq_len,
                  decimal_gb(fit.left_for_kv).c_str());
  }
}

void print_report(const InspectReport& r) {
  const ModelConfig& c = r.config;
  std::printf("Model   %s\nFormat  %s\n\n", r.path.string().c_str(), std::string(format_name(r.format)).c_str());

  std::printf("Files\n");
  for (const auto& f : r.files)
    std::printf("  %-36s %-18s %12s\n", f.path.filename().string().c_str(), f.role.c_str(), human_bytes(f.bytes).c_str());

  auto row = [](const char* key, const std::string& value) { std::printf("  %-22s %s\n", key, value.c_str()); };
  auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
  std::printf("\nArchitecture\n");
  row("model type", c.architecture);
  row("layers", std::to_string(c.num_layers));
  row("hidden size", std::to_string(c.hidden_size));
  row("attention heads", std::to_string(c.num_heads));
  row("KV heads", std::to_string(c.num_kv_heads) + (c.num_kv_heads < c.num_heads ? " (grouped-query attention)" : ""));
  row("head dim", std::to_string(c.head_dim));
  row("FFN size", std::to_string(c.intermediate_size));
  row("vocab size", std::to_string(c.vocab_size));
  row("context length", std::to_string(c.max_position_embeddings));
  char theta[32];
  std::snprintf(theta, sizeof theta, "%g", c.rope_theta);
  row("rope theta", theta);
  row("rope layout", c.rope_layout == RopeLayout::HalfSplit ? "half-split (i pairs with i + head_dim/2)" : "interleaved (2i pairs with 2i+1)");
  char eps[32];
  std::snprintf(eps, sizeof eps, "%g", c.rms_norm_eps);
  row("rms norm eps", eps);
  row("tied embeddings", yes_no(c.tie_word_embeddings));
  row("q/k/v biases", yes_no(c.attention_bias));
  row("q/k norm", yes_no(c.qk_norm));
  if (!c.torch_dtype.empty()) row("declared dtype", c.torch_dtype);
  std::string eos;
  for (int id : r.generation.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  row("bos / eos ids", (r.generation.bos_token_id ? std::to_string(*r.generation.bos_token_id) : "-") + " / " + (eos.empty() ? "-" : eos));

  std::printf("\nTensors (%zu)\n", r.tensors.size());
  std::printf("  %-48s %-14s %-6s %12s\n", "name", "shape", "dtype", "bytes");
  for (const auto& t : r.tensors)
    std::printf("  %-48s %-14s %-6s %12s\n", t.name.c_str(), shape_str(t.shape).c_str(),
                std::string(dtype_name(t.dtype)).c_str(), with_commas(int64_t(t.bytes)).c_str());

  std::printf("\nParameters  %s (%s %s)\n", with_commas(r.parameters).c_str(),
              r.config_only ? "would be stored in" : "stored in", human_bytes(r.stored_bytes).c_str());
  std::printf("\nMemory the weights need\n");
  std::printf("  %-22s %12s %12s\n", "f32 (4 bytes)", human_bytes(r.bytes_f32).c_str(), decimal_gb(r.bytes_f32).c_str());
  std::printf("  %-22s %12s %12s\n", "bf16 / f16 (2 bytes)", human_bytes(r.bytes_bf16).c_str(), decimal_gb(r.bytes_bf16).c_str());
  std::printf("  %-22s %12s %12s\n", "int8 (q8_0)", human_bytes(r.bytes_q8_0).c_str(), decimal_gb(r.bytes_q8_0).c_str());
  std::printf("  %-22s %12s %12s\n", "int4 (q4_0)", human_bytes(r.bytes_q4_0).c_str(), decimal_gb(r.bytes_q4_0).c_str());
  if (!r.notes.empty()) {
    std::printf("\nNotes\n");
    for (const auto& n : r.notes) std::printf("  - %s\n", n.c_str());
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show what a model holds and needs: files, architecture, tensors, sizes, "
                                            "a memory plan (a directory with only config.json is enough)");
  auto model_path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto plan = std::make_shared<PlanArgs>();
  cmd->add_option("model", *model_path, "model directory or file (default: the shipped stories260K)");
  cmd->add_flag("--json", *as_json, "print the report as JSON");
  cmd->add_option("--memory", plan->budgets, "memory budget to plan for (repeatable; e.g. 24GB, 80GiB; default 24GB and 80GB)")
      ->allow_extra_args(false);
  cmd->add_option("--seq-len", plan->seq_len, "tokens per sequence in the plan (default: the model's context length)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([model_path, as_json, plan] {
    const std::string path = model_path->empty() ? std::string(default_model_path()) : *model_path;
    const InspectReport report = inspect_model(path);
    if (*as_json) {
      nlohmann::ordered_json j = to_json(report);
      const int64_t seq_len = plan->seq_len > 0 ? plan->seq_len : report.config.max_position_embeddings;
      nlohmann::ordered_json fits = nlohmann::ordered_json::array();
      for (const std::string& text : plan->budgets.empty() ? std::vector<std::string>{"24GB", "80GB"} : plan->budgets) {
        const MemoryFit f = fit_in_memory(parse_memory_size(text), report.bytes_bf16, report.kv_bytes_per_token_f16, seq_len);
        fits.push_back({{"budget", text}, {"budget_bytes", f.budget}, {"weights_bytes", f.weights},
                        {"kv_bytes_per_sequence", f.kv_per_sequence}, {"weights_fit", f.weights_fit},
                        {"sequences", f.sequences}});
      }
      j["memory_plan"] = {{"weights_dtype", "bf16"}, {"kv_dtype", "f16"}, {"seq_len", seq_len}, {"fits", fits}};
      std::cout << j.dump(2) << "\n";
    } else {
      print_report(report);
      print_plan(report, *plan);
    }
  });
}

}  // namespace journey::cli
