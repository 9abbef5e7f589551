// journey inspect [MODEL_PATH] [--json]: what is in a model directory or file. The facts come from
// assets/inspect.h; this file only prints them.
#include <cstdio>
#include <iostream>

#include "assets/inspect.h"
#include "cli/commands.h"
#include "core/error.h"

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

  std::printf("\nParameters  %s (stored in %s)\n", with_commas(r.parameters).c_str(), human_bytes(r.stored_bytes).c_str());
  std::printf("\nMemory the weights need\n");
  std::printf("  %-22s %12s\n", "f32", human_bytes(r.bytes_f32).c_str());
  std::printf("  %-22s %12s\n", "bf16 / f16", human_bytes(r.bytes_bf16).c_str());
  std::printf("  %-22s %12s\n", "int8 (q8_0)", human_bytes(r.bytes_q8_0).c_str());
  std::printf("  %-22s %12s\n", "int4 (q4_0)", human_bytes(r.bytes_q4_0).c_str());
  if (!r.notes.empty()) {
    std::printf("\nNotes\n");
    for (const auto& n : r.notes) std::printf("  - %s\n", n.c_str());
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show what a model holds: files, architecture, tensors, sizes");
  auto model_path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("model", *model_path, "model directory or file (default: the shipped stories260K)");
  cmd->add_flag("--json", *as_json, "print the report as JSON");
  cmd->callback([model_path, as_json] {
    const std::string path = model_path->empty() ? std::string(default_model_path()) : *model_path;
    const InspectReport report = inspect_model(path);
    if (*as_json) std::cout << to_json(report).dump(2) << "\n";
    else print_report(report);
  });
}

}  // namespace journey::cli
