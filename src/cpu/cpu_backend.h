// The fast CPU backend: the same forward pass, stages and Backend interface as the literal
// reference (src/reference), with everything that exists only for speed — SIMD kernels chosen at
// run time (cpu/gemm.h), weights and activations in huge pages (cpu/huge_pages.h), products of one
// input in one thread region (cpu::linear_shared_input), attention split across sequences or heads.
// It is what `journey generate|chat|serve|bench` run by default (`--device cpu`); the reference
// is what it is checked against, op by op and stage by stage (tests/backends).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "assets/model.h"
#include "backend/backend.h"
#include "cpu/ops.h"

namespace journey {

class Communicator;

// What loading did, for the load line of the CLI and for tests.
// Where the weight matrices live while the backend multiplies them.
//   Copy:    copied once into anonymous 2 MiB pages (one WeightArena, cpu/huge_pages.h), the file's
//            pages given back (llama.cpp's --no-mmap). Resident memory is still the file's size.
//   InPlace: used where the file's memory map holds them (page cache, no copy; llama.cpp's default).
//   Auto:    Copy where Linux hands out transparent huge pages, else InPlace. Measured on the 2-core
//            Xeon VM (docs/performance.md, "Where the weights live"): the 1.1B Q8_0 file decodes at
//            27.7 tok/s copied against 19.2 in place, though the kernel maps the file's page cache
//            in 2 MiB folios too; a plain 2-thread read streams 32 GB/s from the copy, 26.5 from the map.
enum class WeightPlacement { Auto, InPlace, Copy };
const char* weight_placement_name(WeightPlacement placement);  // "auto", "in place", "copied"

// What loading did, for the load line of the CLI and for tests.
struct CpuLoadReport {
  WeightPlacement placement = WeightPlacement::Auto;  // what Auto resolved to (InPlace or Copy)
  int64_t bytes_in_place = 0;  // weight bytes multiplied where the file's memory map holds them
  int64_t bytes_copied = 0;    // weight bytes copied (Copy, misaligned matrices, f32 copies of norms and biases)
  int64_t bytes_grouped = 0;   // of those copied, matrices regrouped by 8 rows (CpuOptions::row_groups)
  int64_t bytes_block_sums = 0;  // Q8_0 block sums made for batched decode (CpuOptions::q8_0_block_sums)
  double seconds = 0;          // building the backend, including bringing the weights into memory
};

// The weight types whose matrices are regrouped by 8 rows at load (CpuOptions::row_groups), from
// JOURNEY_ROW_GROUPS: unset or "on" the measured default, Q4_0 and, on AMD CPUs with AVX512-VNNI, Q4_K; "off" none; or a list of
// types with row groups ("q4_0,q8_0,q4_k": kernels::has_row_groups). Another value is an error
// (journey::Error) naming it and the choices.
std::vector<DType> default_row_groups();
// Whether Q8_0 matrices get their block sums (CpuOptions::q8_0_block_sums), from
// JOURNEY_Q8_0_BLOCK_SUMS: unset or "on" yes, "off" no (1/17 of the Q8_0 bytes less memory, batched
// decode of Q8_0 slower); another value is an error (journey::Error) naming it.
bool default_q8_0_block_sums();

struct CpuOptions {
  int threads = 0;  // threads for the matrix products and attention; 0 = all cores
  // The KV pool's type: f32, f16 or bf16 (half the memory) or q8_0 (34 bytes per 32 values).
  DType kv_dtype = DType::F32;
  WeightPlacement weights = WeightPlacement::Auto;  // --mmap: InPlace, --no-mmap: Copy
  // Linear weights of these types copied at load are regrouped by 8 rows for the one-token decode
  // dot where the CPU has it for the type (kernels.h, has_row_group_dot: AVX512-VNNI all three, AVX2
  // Q4_0 and Q4_K); empty keeps every matrix as stored. By default Q4_0, and Q4_K on AMD with
  // AVX512-VNNI: one-token decode of Q4_K_M 0-36 % faster on the Zen 4 VM (the gain where its memory
  // outruns the stored kernel), at a cost of 0-10 % in prefill and ~11 % in a 16-stream step (when
  // Q4_K's token lanes put the rows back first: they read the groups since 2026-12-06, not measured
  // again), and 5-11 % slower on the Xeon VM; Q8_0's grouped decode gained nothing on either, so it
  // is opt-in (docs/performance.md, "Q4_K rows in groups by default", "The Xeon VM again"). AVX2's
  // row groups cost batched decode and prefill the rows put back first: "The Zen 3 VM a third time".
  std::vector<DType> row_groups = default_row_groups();
  // Q8_0 linear matrices as stored get the sum of each block's quants ([rows, in / 32] int16, 1/17
  // of their bytes) where the CPU has kernels::dot_tokens_q8_0_sums (AVX512-VNNI): batched decode
  // (2-16 tokens) then runs a third fewer instructions per block, with the same bits. false: none.
  bool q8_0_block_sums = default_q8_0_block_sums();
  // Called while the weights' pages are brought into memory: bytes done, bytes in all.
  LoadProgress on_load_progress = nullptr;
  CpuLoadReport* report = nullptr;  // filled when given
  // Tensor parallelism (parallel/shard.h): with a communicator of size n > 1 this backend holds
  // rank communicator->rank()'s shard of the model (its heads, KV heads, FFN columns, vocabulary
  // rows, and a KV pool for its KV heads only), all-reduces after the attention output and the FFN
  // down projection, and gathers the logits to rank 0 (the other ranks' logits are their
  // vocabulary slice). Null: the whole model in this process. Not owned; must outlive the backend.
  Communicator* communicator = nullptr;
};

// The fast ops, as one table of functions: the forward pass calls its ops through it. make_cpu_backend() fills it with
// cpu::'s kernels; tests hand make_cpu_backend a copy with one entry replaced to plant a bug and
// check that the op test and the stage-by-stage diff find it (tests/backends). Production code
// never passes one.
struct CpuOps {
  decltype(&cpu::embedding_gather) embedding_gather = &cpu::embedding_gather;
  decltype(&cpu::rms_norm) rms_norm = &cpu::rms_norm;
  decltype(&cpu::rope) rope = &cpu::rope;
  decltype(&cpu::linear) linear = &cpu::linear;
  decltype(&cpu::linear_shared_input) linear_shared_input = &cpu::linear_shared_input;
  decltype(&cpu::softmax) softmax = &cpu::softmax;
  decltype(&cpu::swiglu) swiglu = &cpu::swiglu;
  decltype(&cpu::residual_add) residual_add = &cpu::residual_add;
  decltype(&cpu::attention) attention = &cpu::attention;
  decltype(&cpu::kv_cache_write) kv_cache_write = &cpu::kv_cache_write;
  decltype(&cpu::paged_attention) paged_attention = &cpu::paged_attention;
};

// Takes the model's weight matrices as stored (in place in the file's memory map, which the backend
// keeps alive, so `model` may be released afterwards; norms and biases widened to f32), checks
// every tensor's shape, type and size against the config, and brings the weights' pages into
// memory; throws journey::Error naming the tensor on a mismatch.
std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options = {});
// The same backend running `ops` instead of cpu::'s kernels (tests only: see CpuOps).
std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options, const CpuOps& ops);

}  // namespace journey
