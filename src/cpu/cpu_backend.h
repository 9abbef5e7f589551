// The fast CPU backend: the same forward pass, stages and Backend interface as the literal
// reference (src/reference), with everything that exists only for speed — SIMD kernels chosen at
// run time (cpu/gemm.h), weights and activations in huge pages (cpu/huge_pages.h), products of one
// input in one thread region (cpu::linear_shared_input), attention split across sequences or heads.
// It is what `journey generate|chat|serve|bench` run by default (`--device cpu`); the reference
// is what it is checked against, op by op and stage by stage (tests/backends).
#pragma once
#include <memory>

#include "assets/model.h"
#include "backend/backend.h"
#include "cpu/ops.h"

namespace journey {

struct CpuOptions {
  int threads = 0;  // threads for the matrix products and attention; 0 = all cores
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

// Widens the model's weights to f32 (the model may be released afterwards) and checks every
// tensor's shape against the config; throws journey::Error naming the tensor on a mismatch.
std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options = {});
// The same backend running `ops` instead of cpu::'s kernels (tests only: see CpuOps).
std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options, const CpuOps& ops);

}  // namespace journey
