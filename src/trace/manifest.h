// manifest.json: the table of contents of a trace dump (docs/dump-format.md). It says which model
// and settings produced the dump, what the prompt and its tokens were, what each step fed and
// sampled, and lists every tensor file with its stage, layer, step, shape and dtype. The C++ engine
// and tools/trace/reference.py both write it; the tracer, the diff and the golden tests read it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"

namespace journey {

inline constexpr const char* kTraceFormat = "journey-trace";
inline constexpr int kTraceVersion = 1;

struct ManifestToken {
  int32_t id = 0;
  std::string piece;
};

struct ManifestAlternative {
  int32_t id = 0;
  std::string piece;
  double prob = 0.0;
};

struct ManifestSampled {
  int32_t id = 0;
  std::string piece;
  double prob = 0.0;
  std::vector<ManifestAlternative> top;  // most probable first
};

struct ManifestStep {
  int step = 0;
  std::string kind;                 // "prefill" or "decode"
  std::vector<int64_t> positions;   // [T] positions of the tokens fed in this step
  std::optional<ManifestSampled> sampled;
  // Served requests only (journey serve --trace-dir): the sequence's KV-cache facts at this step
  // (block size, slots used, prefix-cache hits, shared blocks; docs/serving.md). Null: absent.
  nlohmann::json kv_cache = nullptr;
};

struct ManifestTensor {
  std::string name;                 // "L3.q" for layer stages, "logits" for global ones
  std::string stage;                // stage name from stages.def
  int layer = -1;                   // -1 for global stages
  int step = 0;
  std::vector<int64_t> shape;
  std::string dtype = "f32";        // "f32" or "i32"
  std::string file;                 // relative to the dump directory
  std::vector<int> heads;           // head filter applied to this tensor; empty = all heads
};

// What one stage of the dump is, copied from stages.def so that a reader needs nothing else:
// its axes (outermost first), where in the code it is made, and what it holds.
struct ManifestStage {
  std::string name;                 // "q"
  std::string scope;                // "layer" or "global"
  std::vector<std::string> axes;    // {"T", "H", "D"}
  std::string made_in;              // "src/cpu/cpu_backend.cpp forward(): linear(attn_norm, q_proj)"
  std::string description;          // one line
};

struct ManifestModel {
  std::string path;
  std::string architecture;
  nlohmann::json config = nlohmann::json::object();  // config.json as read (or the fields that matter)
  std::string hash;                                   // model_fingerprint(): "sha256:<hex>"
};

// A dump written by one rank of a tensor-parallel group (`mpirun -np N journey trace ...
// --tensor-parallel N`): rank 0's dump holds the stages every rank agrees on (the residual stream,
// the all-reduced attn_out and ffn_out, the gathered logits) and its own heads' and FFN columns'
// partial stages; rank r's dump (DIR/rank<r>/) the same stages of its part. `shard` says which part:
// {"heads": [begin, end), "kv_heads": [...], "ffn_columns": [...], "vocabulary": [...]} (end excluded).
// `partials` names, for each *_partial stage (this rank's share before the all-reduce or gather),
// the key of `shard` whose range it covers: {"attn_out_partial": "heads", ...}.
struct ManifestTensorParallel {
  int rank = 0;
  int world_size = 1;
  nlohmann::json shard = nlohmann::json::object();
  nlohmann::json partials = nlohmann::json::object();
  // how the collectives travelled: "MPI (Open MPI v4.1.4)", "NCCL 2.27.3 (...)", "host-staged over
  // MPI (...) (...)"; empty (not written) when unknown, as in dumps made before it was recorded
  std::string transport;
};

struct Manifest {
  std::string format = kTraceFormat;
  int version = kTraceVersion;
  std::string generated_by_tool;     // "journey trace", "reference.py", ...
  std::string generated_by_command;  // the command line that regenerates this dump
  ManifestModel model;
  nlohmann::json settings = nlohmann::json::object();
  std::string prompt;
  std::string template_text;
  std::vector<ManifestToken> tokens;
  std::vector<ManifestStep> steps;
  std::vector<ManifestTensor> tensors;
  std::vector<ManifestStage> stages;  // every stage the tensors use, in journey order (describe_stages)
  // The piece of every token id a reader may want to show beyond the prompt and the sampled
  // tokens: the top entries of each logits/probability row and the logit lens's ids. Lets the
  // report name tokens without the tokenizer. Empty when the writer had no tokenizer.
  std::map<int32_t, std::string> pieces;
  std::optional<ManifestTensorParallel> tensor_parallel;  // absent: one process held the whole model

  // The entry for (stage, layer, step), or nullptr.
  const ManifestTensor* find(const std::string& stage, int layer, int step) const;
};

// The dump name of a stage: "L3.q" for layer stages, the bare name for global ones.
std::string tensor_name(const std::string& stage, int layer);
// The file a tensor is stored in: "s000.L3.q.npy", "s001.logits.npy" (the step, then the name).
std::string tensor_file_name(const std::string& stage, int layer, int step);

// The stages entry of a manifest: one ManifestStage per stage used by manifest.tensors (and
// "sampled" when a step sampled), in journey order, from stages.def. `backend` ("reference",
// "cpu", "cuda"; empty when unknown) names the file whose forward() makes the model's stages.
std::vector<ManifestStage> describe_stages(const Manifest& manifest, const std::string& backend);

nlohmann::json manifest_to_json(const Manifest& manifest);
// where: the file the JSON came from, for messages.
Manifest manifest_from_json(const nlohmann::json& json, const std::string& where);

void write_manifest(const std::filesystem::path& path, const Manifest& manifest);
// Reads and validates format/version; throws journey::Error naming the file and the field.
Manifest read_manifest(const std::filesystem::path& path);

// The model fingerprint stored in manifests: sha256 over the bytes of config.json followed by one
// line "<file name> <size in bytes>\n" per *.safetensors file in name order. Cheap (weights are not
// read) and changes whenever the configuration or a weight file changes size. For a model that is
// a single file (llama2.c, GGUF) the line for that file replaces config.json. tools/trace/reference.py
// computes the same value.
std::string model_fingerprint(const std::filesystem::path& model_path);

// The manifest's model entry for the model at `path` with this config: the path, the architecture,
// the config fields the forward pass depends on, and model_fingerprint(path). The one writer of
// that entry, for `journey trace` and for requests traced by `journey serve`.
ManifestModel manifest_model(const std::filesystem::path& path, const ModelConfig& config);

}  // namespace journey
