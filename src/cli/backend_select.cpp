#include "cli/backend_select.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/process_memory.h"
#include "reference/reference_backend.h"
#if defined(JOURNEY_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace journey::cli {

namespace {

DType kv_dtype_from_flag(const std::string& name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    if (name == dtype_name(t)) return t;
  fail("--kv-cache-dtype: expected f32, f16, bf16 or q8_0, found \"", name, "\"");
}

// "\rloading weights  45%  1.0 / 2.2 GB  3.2 s" on stderr, only on a terminal and only once loading
// has taken a second; the line is cleared when done.
struct ProgressLine {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool shown = false;
  bool terminal = isatty(STDERR_FILENO) != 0;
  void update(int64_t done, int64_t total) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!terminal || elapsed < 1.0 || total <= 0) return;
    std::fprintf(stderr, "\rloading weights %3d%%  %.2f / %.2f GB  %.1f s ", int(100 * done / total), double(done) / 1e9,
                 double(total) / 1e9, elapsed);
    std::fflush(stderr);
    shown = true;
  }
  ~ProgressLine() {
    if (shown) std::fprintf(stderr, "\r%60s\r", "");
  }
};

}  // namespace

void add_backend_flags(CLI::App* cmd, BackendFlags& flags) {
  cmd->add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                  "KV cache type on --device cpu: f32, f16 or bf16 (half the memory), q8_0 (~0.27x)")
      ->capture_default_str();
  cmd->add_flag("--no-mmap", flags.no_mmap,
                "copy the weights into memory instead of using them in place in the file's memory map");
}

std::string load_line(const LoadInfo& info) {
  char line[256];
  const double gb = 1e9;
  if (info.in_place_bytes + info.copied_bytes > 0)
    std::snprintf(line, sizeof line, "loaded in %.1f s: %.2f GB of weights used in place, %.2f GB copied; resident %.2f GB",
                  info.seconds, double(info.in_place_bytes) / gb, double(info.copied_bytes) / gb,
                  double(info.resident_bytes) / gb);
  else
    std::snprintf(line, sizeof line, "loaded in %.1f s; resident %.2f GB", info.seconds, double(info.resident_bytes) / gb);
  return line;
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads) {
  return make_backend(model, device, BackendFlags{.threads = threads});
}

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, const BackendFlags& flags,
                                      LoadInfo* info) {
  const DType kv = kv_dtype_from_flag(flags.kv_cache_dtype);
  if (device != "cpu" && kv != DType::F32)
    fail("--kv-cache-dtype ", flags.kv_cache_dtype, ": only --device cpu keeps its KV cache in another type than f32 (",
         device, " keeps f32)");
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Backend> backend;
  if (device == "reference") {
    backend = make_reference_backend(model);
  } else if (device == "cpu") {
    ProgressLine progress;
    CpuLoadReport report;
    CpuOptions options{.threads = flags.threads, .kv_dtype = kv, .copy_weights = flags.no_mmap};
    options.on_load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    options.report = &report;
    backend = make_cpu_backend(model, options);
    if (info) info->in_place_bytes = report.bytes_in_place, info->copied_bytes = report.bytes_copied;
  } else if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#if defined(JOURNEY_HAVE_CUDA)
    CudaOptions options;  // bf16 weights unless "cuda:f32" / "cuda:f16"
    const std::string type = device == "cuda" ? "bf16" : device.substr(5);
    if (type == "f32") options.dtype = DType::F32;
    else if (type == "f16") options.dtype = DType::F16;
    else if (type != "bf16") fail("--device ", device, ": the weight type after \"cuda:\" must be bf16, f16 or f32");
    if (cuda_device_count() == 0) fail("--device ", device, ": no CUDA device visible (cudaGetDeviceCount found none)");
    backend = make_cuda_backend(model, options);
#else
    fail("--device ", device, ": journey was built without CUDA (JOURNEY_CUDA=OFF); rebuild with -DJOURNEY_CUDA=ON");
#endif
  } else {
    fail("--device: expected reference, cpu, cuda, cuda:bf16, cuda:f16 or cuda:f32, found \"", device, "\"");
  }
  if (info) {
    info->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    info->resident_bytes = process_memory().resident;
    for (const FileRole& f : model.files)
      if (f.role == "weights") info->file_bytes += int64_t(f.bytes);
  }
  return backend;
}

const char* device_flag_help() {
#if defined(JOURNEY_HAVE_CUDA)
  return "where to run: cpu (fast, the default), reference (the literal path the chapters teach), cuda (bf16 "
         "weights on GPU 0), cuda:f16 or cuda:f32";
#else
  return "where to run: cpu (fast, the default) or reference (the literal path the chapters teach); this build has "
         "no CUDA (cuda needs -DJOURNEY_CUDA=ON)";
#endif
}

}  // namespace journey::cli
