// The sink behind `journey trace --out DIR` and the golden tests: every wanted tensor becomes one
// .npy file in DIR, and finish() writes DIR/manifest.json listing them (docs/dump-format.md).
// The caller marks step boundaries (set_step) because a backend's forward() does not know whether
// it runs a prefill or the n-th decode step, and fills the model/prompt/token fields of manifest().
#pragma once
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "trace/filters.h"
#include "trace/manifest.h"
#include "trace/sink.h"

namespace journey {

class DumpSink : public TraceSink {
 public:
  // Creates out_dir if needed. Files of an earlier dump with the same names are overwritten.
  explicit DumpSink(std::filesystem::path out_dir, TraceFilters filters = {});

  // Start step `step` ("prefill" or "decode") feeding tokens at `positions`. Until the first call
  // the sink records into step 0, a prefill.
  void set_step(int step, std::string kind, std::vector<int64_t> positions);
  // What was sampled at the end of the current step (the "sampled" stage lives in the manifest).
  void set_sampled(ManifestSampled sampled);

  // Cheap: answered from the filters (and a per-(stage, layer) cache), never touches tensors.
  bool wants(Stage stage, int layer) const override;
  void record(Stage stage, int layer, const TraceTensor& tensor) override;
  void record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) override;

  // Fill model, settings, prompt, template text and tokens here before finish().
  Manifest& manifest() { return manifest_; }
  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& directory() const { return dir_; }
  int current_step() const { return step_; }

  // Write manifest.json. May be called again after more steps (it rewrites the file). With a
  // `piece` function (the tokenizer's), the manifest's pieces name every notable token: the top
  // kNotableTop of each logits and probability row and every logit-lens id.
  void finish(const std::function<std::string(int32_t)>& piece = {});
  static constexpr int kNotableTop = 16;

 private:
  ManifestStep& current_step_entry();
  ManifestTensor& add_entry(Stage stage, int layer, std::vector<int64_t> shape, const char* dtype);

  std::filesystem::path dir_;
  TraceFilters filters_;
  Manifest manifest_;
  int step_ = 0;
  static constexpr int kCachedLayers = 512;
  std::set<int32_t> notable_ids_;  // ids worth naming in the manifest's pieces
  mutable std::vector<int8_t> stage_cache_;  // [stages * (kCachedLayers + 1)]: -1 unknown, 0/1 answer
};

}  // namespace journey
