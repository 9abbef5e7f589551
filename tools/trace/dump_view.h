// A trace dump opened for reading by the tracer: the manifest plus the tensors, read on demand and
// summarized (min/max/mean/RMS, non-finite counts, largest values) for the diagram and the report.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trace/manifest.h"
#include "trace/npy.h"

namespace journey::tracer {

struct TensorSummary {
  int64_t numel = 0;
  int64_t finite = 0, neg_inf = 0, nan_or_pos_inf = 0;
  double min = 0, max = 0, mean = 0;
  double rms = 0;                    // sqrt(mean(x^2)) over the finite entries
  double l2 = 0;                     // sqrt(sum(x^2)) over the finite entries
  std::vector<std::pair<int64_t, double>> top;  // [<= 3] largest finite values of the last row, (index, value)
};

TensorSummary summarize(const NpyArray& array);

class Dump {
 public:
  // Reads DIR/manifest.json (journey::Error naming the file on anything wrong).
  explicit Dump(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }

  // The tensor entry for (stage, layer, step), or nullptr.
  const ManifestTensor* entry(const std::string& stage, int layer, int step) const {
    return manifest_.find(stage, layer, step);
  }
  // Read a listed tensor (cached). Throws journey::Error when the file is missing or damaged.
  const NpyArray& array(const ManifestTensor& entry) const;
  const TensorSummary& summary(const ManifestTensor& entry) const;

  int num_layers() const;           // from the config, else from the highest traced layer + 1
  std::vector<int> steps() const;   // step numbers listed in the manifest, ascending
  std::string piece(int32_t id) const;  // a token's piece as the manifest knows it ("#id" otherwise)

 private:
  std::filesystem::path dir_;
  Manifest manifest_;
  std::map<int32_t, std::string> pieces_;
  mutable std::map<std::string, NpyArray> arrays_;        // by file
  mutable std::map<std::string, TensorSummary> summaries_;  // by file
};

}  // namespace journey::tracer
