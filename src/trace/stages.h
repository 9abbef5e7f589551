// Stage identifiers generated from the one list in stages.def.
#pragma once
#include <array>
#include <optional>
#include <string_view>

namespace journey {

enum class StageScope { Global, Layer };

enum class Stage : int {
#define JOURNEY_STAGE(id, name, scope, axes, made_by, doc) id,
#include "trace/stages.def"
#undef JOURNEY_STAGE
};

struct StageInfo {
  Stage stage;
  std::string_view name;
  StageScope scope;
  std::string_view axes;     // "T,H,D": axis letters, outermost first (stages.def explains them)
  std::string_view made_by;  // "forward: linear(attn_norm, q_proj)" or "src/...: function"
  std::string_view doc;      // what it holds, one line
};

inline constexpr std::array kStages = {
#define JOURNEY_STAGE(id, name, scope, axes, made_by, doc) StageInfo{Stage::id, name, StageScope::scope, axes, made_by, doc},
#include "trace/stages.def"
#undef JOURNEY_STAGE
};

inline constexpr const StageInfo& stage_info(Stage s) { return kStages[static_cast<int>(s)]; }
inline constexpr std::string_view stage_name(Stage s) { return stage_info(s).name; }

inline std::optional<Stage> stage_from_name(std::string_view name) {
  for (const auto& info : kStages)
    if (info.name == name) return info.stage;
  return std::nullopt;
}

}  // namespace journey
