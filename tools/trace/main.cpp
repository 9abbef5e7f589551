// journey-trace: read what `journey trace` (or tools/trace/reference.py) dumped.
//
//   journey-trace render DIR [--out FILE.svg|.png|.dot] [--layer N] [--step N]
//   journey-trace report DIR [--out report.html] [--layer N] [--step N] [--compare DIR_B]
//   journey-trace diff DIR_A DIR_B [--svg FILE] [--only-failures] [--tolerance-profile auto|f32|bf16|f16]
//                     [--tolerance-scale X]
//   journey-trace golden DIR --against tests/golden/NAME [--svg FILE]
//
// Exit status: 0 = done / every stage within tolerance, 1 = a stage diverges, 2 = an error
// (unreadable dump, bad arguments: the message names the file and what is wrong; a mistyped
// command or option names the nearest valid one), 3 = an internal error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <fstream>
#include <iostream>

#include "cli/usage.h"
#include "core/error.h"
#include "dump_view.h"
#include "journey_graph.h"
#include "report.h"
#include "trace/compare.h"

namespace journey::tracer {
namespace {

// "0-3,5": the steps of a dump as ranges, for messages.
std::string ranges(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    out += cat(out.empty() ? "" : ",", values[i], j > i ? cat("-", values[j]) : std::string());
    i = j;
  }
  return out;
}

// --layer and --step must name a layer and a step the dump has.
void check_layer_and_step(const Dump& dump, int layer, int step) {
  const int layers = dump.num_layers();
  if (layer < 0 || layer >= layers)
    fail("--layer ", layer, " is outside the model's layers: ", dump.dir().string(), " has layers 0-", layers - 1);
  const std::vector<int> steps = dump.steps();
  if (std::find(steps.begin(), steps.end(), step) == steps.end())
    fail("--step ", step, " is not in ", dump.dir().string(), ": its steps are ", ranges(steps),
         " (0 = the prefill, then one per decode step)");
}

int run_render(const std::string& dir, std::string out, int layer, int step) {
  Dump dump(dir);
  check_layer_and_step(dump, layer, step);
  if (out.empty()) out = (std::filesystem::path(dir) / "journey.svg").string();
  GraphOptions options;
  options.expanded_layer = layer;
  options.step = step;
  render_journey_to_file(dump, options, out);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int run_report(const std::string& dir, std::string out, int layer, int step, const std::string& compare) {
  Dump dump(dir);
  check_layer_and_step(dump, layer, step);
  if (out.empty()) out = (std::filesystem::path(dir) / "report.html").string();
  ReportOptions options;
  options.initial_layer = layer;
  options.initial_step = step;
  std::optional<ComparisonResult> comparison;
  if (!compare.empty()) {
    comparison = compare_dumps(dir, compare);
    options.comparison = &*comparison;
  }
  const std::string html = render_report(dump, options);
  std::ofstream file(out, std::ios::binary);
  file << html;
  if (!file) fail("cannot write ", out);
  std::printf("wrote %s (%zu bytes, self-contained)\n", out.c_str(), html.size());
  if (comparison)
    std::printf("%s\n", comparison->ok() ? "SAME: every stage within tolerance"
                                         : cat("DIVERGED: first at ", comparison->first()->name, " (step ",
                                               comparison->first()->step, ")").c_str());
  return 0;
}

// The argmax agreement of every logits comparison: the one number a reader checks first.
std::string argmax_lines(const ComparisonResult& result) {
  std::string out;
  for (const auto& c : result.tensors)
    if (c.stage == "logits" && c.argmax_rows > 0)
      out += cat("logits step ", c.step, ": argmax agrees on ", c.argmax_rows - c.argmax_disagree, "/", c.argmax_rows,
                 " rows\n");
  return out;
}

// The diagram of `ours` with each node coloured by how its tensor compares; it shows the step and
// the layer of the first divergence (step 0 and layer 0 when there is none).
void write_diff_svg(const ComparisonResult& result, const std::filesystem::path& out) {
  Dump ours(result.ours);
  GraphOptions options;
  const TensorComparison* first = result.first();
  options.step = first ? first->step : 0;
  options.expanded_layer = first && first->layer >= 0 ? first->layer : 0;
  for (size_t i = 0; i < result.tensors.size(); ++i) {
    const auto& c = result.tensors[i];
    if (c.step != options.step) continue;
    NodeMark mark = NodeMark::Ok;
    if (result.first_divergence == i) mark = NodeMark::FirstDivergence;
    else if (c.status == CompareStatus::MissingInOurs) mark = NodeMark::Missing;
    else if (c.fails()) mark = NodeMark::Diverged;
    else if (c.status == CompareStatus::OnlyInOurs) mark = NodeMark::None;
    options.marks[c.name] = mark;
  }
  options.title = cat("diff ", result.ours.filename().string(), " vs ", result.golden.filename().string(), ": ",
                      first ? cat("first divergence ", first->name, " at step ", first->step) : std::string("all within tolerance"));
  render_journey_to_file(ours, options, out);
}

int run_compare(const std::string& ours, const std::string& golden, const std::string& svg, bool only_failures,
                double tolerance_scale, const std::string& profile, const char* verdict_ok) {
  CompareOptions options;
  options.tolerance_scale = tolerance_scale;
  if (profile != "auto") {
    options.profile = tolerance_profile_from_name(profile);
    if (!options.profile) fail("--tolerance-profile: expected auto, f32, bf16 or f16, found \"", profile, "\"");
  }
  ComparisonResult result = compare_dumps(ours, golden, options);
  std::cout << format_comparison(result, only_failures) << argmax_lines(result);
  if (!svg.empty()) {
    write_diff_svg(result, svg);
    std::cout << "wrote " << svg << "\n";
  }
  if (result.ok()) {
    std::cout << verdict_ok << "\n";
    return 0;
  }
  std::cout << "DIVERGED: first at " << result.first()->name << " (step " << result.first()->step << ")\n";
  return 1;
}

}  // namespace
}  // namespace journey::tracer

int main(int argc, char** argv) {
  using namespace journey::tracer;
  CLI::App app{"journey-trace — draw, report and compare trace dumps written by `journey trace`"};
  app.require_subcommand(1);
  app.footer("exit status: 0 done or every stage within tolerance; 1 a stage diverges; 2 an error (bad arguments,\n"
             "             an unreadable dump: the message names it); 3 an internal error (a bug)");
  int status = 0;

  std::string render_dir, render_out;
  int render_layer = 0, render_step = 0;
  auto* render = app.add_subcommand("render", "the journey as a diagram (SVG, PNG or dot)");
  render->add_option("dir", render_dir, "dump directory")->required();
  render->add_option("--out", render_out, "output file: .svg, .png or .dot (default DIR/journey.svg)");
  render->add_option("--layer", render_layer, "layer drawn stage by stage")->capture_default_str();
  render->add_option("--step", render_step, "step summarized (0 = prefill)")->capture_default_str();
  render->callback([&] { status = run_render(render_dir, render_out, render_layer, render_step); });

  std::string report_dir, report_out, report_compare;
  int report_layer = 0, report_step = 0;
  auto* report = app.add_subcommand("report", "one self-contained, interactive HTML report");
  report->add_option("dir", report_dir, "dump directory")->required();
  report->add_option("--out", report_out, "output file (default DIR/report.html)");
  report->add_option("--layer", report_layer, "layer shown first")->capture_default_str();
  report->add_option("--step", report_step, "step shown first (0 = prefill)")->capture_default_str();
  report->add_option("--compare", report_compare,
                     "a second dump of the same run (another backend or dtype): colour every stage by its error");
  report->callback([&] { status = run_report(report_dir, report_out, report_layer, report_step, report_compare); });

  std::string diff_a, diff_b, diff_svg, diff_profile = "auto";
  bool diff_only_failures = false;
  double diff_scale = 1.0;
  auto* diff = app.add_subcommand("diff", "compare two dumps stage by stage; exit 1 when a stage diverges");
  diff->add_option("dir_a", diff_a, "the dump under test")->required();
  diff->add_option("dir_b", diff_b, "the dump it is compared with (the reference)")->required();
  diff->add_option("--svg", diff_svg, "also draw the diagram with nodes coloured by divergence");
  diff->add_flag("--only-failures", diff_only_failures, "list only the failing tensors");
  diff->add_option("--tolerance-profile", diff_profile,
                    "tolerances for A's weight type against B's f32: auto (from the manifests), f32, bf16, f16")
      ->capture_default_str();
  diff->add_option("--tolerance-scale", diff_scale, "multiply every tolerance")->capture_default_str();
  diff->callback([&] {
    status = run_compare(diff_a, diff_b, diff_svg, diff_only_failures, diff_scale, diff_profile,
                         "SAME: every stage within tolerance");
  });

  std::string golden_dir, golden_against, golden_svg;
  auto* golden = app.add_subcommand("golden", "compare a dump with a golden (tests/golden/NAME) as the tests do");
  golden->add_option("dir", golden_dir, "the dump under test")->required();
  golden->add_option("--against", golden_against, "golden dump directory, e.g. tests/golden/stories260K")->required();
  golden->add_option("--svg", golden_svg, "also draw the diagram with nodes coloured by divergence");
  golden->callback([&] {
    status = run_compare(golden_dir, golden_against, golden_svg, /*only_failures=*/true, 1.0, "f32",
                         "GOLDEN OK: every stage of the golden is matched within tolerance");
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return journey::cli::report_parse_error(app, e, "journey-trace", argc, argv);
  } catch (const journey::Error& e) {
    std::cerr << "journey-trace: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "journey-trace: internal error: " << e.what() << "\n";
    return journey::cli::kExitInternal;
  }
  return status;
}
