// The run-time choice among the compiled variants of the kernels (kernels.h): every variant is in
// every binary, each built with its own instruction-set flags, and the CPU picks one here.
#include "cpu/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>  // getauxval(AT_HWCAP): HWCAP_ASIMDDP
#endif

namespace journey::cpu {

namespace kernels {
// Each kernels_ISA.cpp defines its table (kernels_impl.inc) in its own namespace.
namespace generic {
const KernelTable& kernel_table();
double peak_loop(int kind, int64_t iterations, float* sink);
}  // namespace generic
#if defined(__x86_64__) || defined(__i386__)
#define JOURNEY_KERNELS_X86 1
namespace avx2 {
const KernelTable& kernel_table();
double peak_loop(int kind, int64_t iterations, float* sink);
}  // namespace avx2
namespace avx512 {
const KernelTable& kernel_table();
double peak_loop(int kind, int64_t iterations, float* sink);
}  // namespace avx512
namespace avx512bf16 {
double peak_loop(int kind, int64_t iterations, float* sink);
void pack_token_pairs(const float* x, int64_t T, int64_t in, uint16_t* packed, int64_t tile_begin, int64_t tile_end);
size_t bf16_panel_rows_scratch_bytes(int64_t T);
void bf16_panel_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
                     const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
                     void* scratch, bool row_groups);
}  // namespace avx512bf16
namespace amx {
double peak_loop(int kind, int64_t iterations, float* sink);
size_t amx_rows_scratch_bytes(int64_t in);
void amx_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
              const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
              void* scratch, bool row_groups);
}  // namespace amx
#endif
#if defined(__aarch64__) && defined(__linux__)
#define JOURNEY_KERNELS_NEON 1
namespace neon {  // kernels_neon.cpp: the generic table with sdot integer dots
const KernelTable& kernel_table();
double peak_loop(int kind, int64_t iterations, float* sink);
}  // namespace neon
#endif

bool supports(Isa isa) {
  switch (isa) {
    case Isa::Generic: return true;
#ifdef JOURNEY_KERNELS_X86
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && supports(Isa::Avx2);
#endif
#ifdef JOURNEY_KERNELS_NEON
    case Isa::NeonDot: return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    default: return false;
  }
}

namespace {

// The kernel levels JOURNEY_CPU_ISA may name, lowest first; the last is the default (no cap).
constexpr const char* kIsaLevels[] = {"generic", "avx2", "avx512-vnni", "avx512-bf16", "amx"};
constexpr int kNoCap = 4;

int parse_isa_cap() {
  const char* value = std::getenv("JOURNEY_CPU_ISA");
  if (value == nullptr || *value == '\0') return kNoCap;
  for (int level = 0; level <= kNoCap; ++level)
    if (std::string_view(value) == kIsaLevels[level]) return level;
  fail("JOURNEY_CPU_ISA='", value, "' is not a kernel level; expected one of generic, avx2, avx512-vnni, avx512-bf16, amx ",
       "(or unset: the best this CPU has)");
}

// Read once; kernel_choice() (called by make_cpu_backend before any parallel region) is the first
// reader, so a bad value is an error there and not inside a thread.
int isa_cap() {
  static const int cap = parse_isa_cap();
  return cap;
}

}  // namespace

Isa best_isa() {
  static const Isa best = [] {
    const int cap = isa_cap();
    if (cap >= 2 && supports(Isa::Avx512)) return Isa::Avx512;
    if (cap >= 1 && supports(Isa::Avx2)) return Isa::Avx2;
#ifdef JOURNEY_KERNELS_NEON
    if (cap >= 1 && supports(Isa::NeonDot)) return Isa::NeonDot;  // any cap but "generic" leaves it on
#endif
    return Isa::Generic;
  }();
  return best;
}

bool has_bf16_dot() {
#ifdef JOURNEY_KERNELS_X86
  static const bool has = isa_cap() >= 3 && best_isa() == Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

#if defined(__x86_64__)
// The CPU has the AMX tiles and their bf16 instruction (CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22
// AMX-BF16), and Linux lets this process use the 8 KB of tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; without the grant the first tile instruction faults).
bool amx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
  constexpr long kArchRequestTilePermission = 0x1023, kTileDataFeature = 18;
  return syscall(SYS_arch_prctl, kArchRequestTilePermission, kTileDataFeature) == 0;
}
#endif

bool has_amx() {
#ifdef JOURNEY_KERNELS_X86
  static const bool has = isa_cap() >= 4 && has_bf16_dot() && amx_usable();
  return has;
#else
  return false;
#endif
}

namespace {
// An on/off kernel choice from the environment: 1 on, 0 off, -1 not set (or empty), -2 a value that
// is neither (kernel_choice fails, naming it)
int on_off_setting(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  const std::string_view v(value);
  return v == "on" ? 1 : v == "off" ? 0 : -2;
}
// JOURNEY_DECODE_PREFETCH: the mode it names, nullopt when not set (or empty); a value that is no
// mode sets `bad` (kernel_choice fails, naming it)
std::optional<DecodePrefetch> decode_prefetch_setting(bool* bad = nullptr) {
  const char* value = std::getenv("JOURNEY_DECODE_PREFETCH");
  if (value == nullptr || *value == '\0') return std::nullopt;
  for (DecodePrefetch mode : {DecodePrefetch::off, DecodePrefetch::near, DecodePrefetch::two_level})
    if (std::string_view(value) == decode_prefetch_name(mode)) return mode;
  if (bad) *bad = true;
  return std::nullopt;
}
DecodePrefetch choose_decode_prefetch() {
  if (const std::optional<DecodePrefetch> forced = decode_prefetch_setting()) return *forced;
#ifdef JOURNEY_KERNELS_X86
  __builtin_cpu_init();  // this runs among the static constructors, possibly before libgcc's own
  return __builtin_cpu_is("amd") ? DecodePrefetch::two_level : DecodePrefetch::near;  // (decode_prefetch.h)
#else
  return DecodePrefetch::near;
#endif
}
}  // namespace

const DecodePrefetch kDecodePrefetch = choose_decode_prefetch();

const char* decode_prefetch_name(DecodePrefetch mode) {
  switch (mode) {
    case DecodePrefetch::off: return "off";
    case DecodePrefetch::near: return "near";
    case DecodePrefetch::two_level: return "two-level";
  }
  return "?";
}

namespace {
// JOURNEY_INT8_PREFILL: 1 on (or not set), 0 off, -2 a value that is neither (kernel_choice fails)
int int8_prefill_setting() {
  static const int setting = [] {
    const int chosen = on_off_setting("JOURNEY_INT8_PREFILL");
    return chosen == -1 ? 1 : chosen;
  }();
  return setting;
}
}  // namespace

bool int8_lanes_before_bf16(DType type) {
  return dtype_is_quantized(type) && int8_prefill_setting() == 1 && has_bf16_dot() && !has_amx() &&
         table(best_isa()).prefill_unpacked != nullptr;  // (with it the prefill tiles of every block type)
}

namespace {
// JOURNEY_BF16_PREFILL: 1 on, 0 off, -1 not set (measured), -2 a value that is neither (kernel_choice fails)
int bf16_prefill_setting() {
  static const int setting = on_off_setting("JOURNEY_BF16_PREFILL");
  return setting;
}
}  // namespace

const Bf16AgainstFma& bf16_against_fma() {
  static const Bf16AgainstFma measured = [] {
    Bf16AgainstFma m;
    if (!has_bf16_dot()) return m;
    // side by side, twice, the best of each: a preemption of this thread in one pass (a busy VM)
    // lowers that pass only. ~4 x 5 ms.
    for (int round = 0; round < 2; ++round) {
      m.bf16_gflop_s = std::max(m.bf16_gflop_s, peak_rate(PeakKind::Bf16Dot, 0.005) / 1e9);
      m.fma_gflop_s = std::max(m.fma_gflop_s, peak_rate(PeakKind::F32Fma, 0.005) / 1e9);
    }
    return m;
  }();
  return measured;
}

bool bf16_dot_pays() {
  if (!has_bf16_dot()) return false;
  static const bool pays = [] {
    const int setting = bf16_prefill_setting();
    if (setting >= 0) return setting == 1;
    const Bf16AgainstFma& m = bf16_against_fma();
    return m.bf16_gflop_s >= m.fma_gflop_s;
  }();
  return pays;
}

std::string kernel_choice() {
  bool bad_prefetch = false;
  decode_prefetch_setting(&bad_prefetch);
  if (bad_prefetch)
    fail("JOURNEY_DECODE_PREFETCH='", std::getenv("JOURNEY_DECODE_PREFETCH"),
         "' is not a choice; expected off, near or two-level (or unset: this CPU's)");
  if (int8_prefill_setting() == -2)
    fail("JOURNEY_INT8_PREFILL='", std::getenv("JOURNEY_INT8_PREFILL"), "' is not a choice; expected on or off ",
         "(or unset: on)");
  if (bf16_prefill_setting() == -2)
    fail("JOURNEY_BF16_PREFILL='", std::getenv("JOURNEY_BF16_PREFILL"), "' is not a choice; expected on or off ",
         "(or unset: measured)");
  std::string choice = isa_name(best_isa());
  // the measurement that chose (or JOURNEY_BF16_PREFILL, which skips it)
  const auto rates = [] {
    if (bf16_prefill_setting() >= 0) return std::string("JOURNEY_BF16_PREFILL=") + (bf16_prefill_setting() ? "on" : "off");
    const Bf16AgainstFma& m = bf16_against_fma();
    return cat("vdpbf16ps ", int(m.bf16_gflop_s + 0.5), " against f32 FMA ", int(m.fma_gflop_s + 0.5),
               " GFLOP/s a thread, measured");
  };
  if (has_amx()) {
    choice += " + amx-bf16 prefill";
  } else if (bf16_dot_pays()) {
    choice += " + avx512-bf16 prefill (" + rates() + ")";
    if (int8_lanes_before_bf16(DType::Q8_0)) choice += " (block types on int8 token lanes)";
  } else if (has_bf16_dot()) {
    choice += " (avx512-bf16 not used: " + rates() + "; prefill on int8 token lanes and f32 panels)";
  }
  if (isa_cap() != kNoCap) choice += std::string(" (JOURNEY_CPU_ISA=") + kIsaLevels[isa_cap()] + ")";
  choice += std::string(", decode prefetch ") + decode_prefetch_name(kDecodePrefetch);
  return choice;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512-vnni";
    case Isa::Avx2: return "avx2";
    case Isa::NeonDot: return "neon-dotprod";
    default: return "generic";
  }
}

const KernelTable& table(Isa isa) {
  if (!supports(isa)) isa = best_isa();  // never run instructions this CPU lacks
#ifdef JOURNEY_KERNELS_X86
  if (isa == Isa::Avx512) return avx512::kernel_table();
  if (isa == Isa::Avx2) return avx2::kernel_table();
#endif
#ifdef JOURNEY_KERNELS_NEON
  if (isa == Isa::NeonDot) return neon::kernel_table();
#endif
  return generic::kernel_table();
}

double peak_rate(PeakKind kind, double seconds) {
  using Clock = std::chrono::steady_clock;
  auto loop = [&](int64_t iterations, float* sink) -> double {
    const int k = int(kind);
#ifdef JOURNEY_KERNELS_X86
    if (kind == PeakKind::Bf16Dot) return has_bf16_dot() ? avx512bf16::peak_loop(k, iterations, sink) : 0;
    if (kind == PeakKind::AmxBf16) return has_amx() ? amx::peak_loop(k, iterations, sink) : 0;
    // the instructions the kernels use: JOURNEY_CPU_ISA's cap applies to the peaks too
    const bool int8 = kind == PeakKind::Int8Dot || kind == PeakKind::Int8BlockDot;
    if (int8 && best_isa() == Isa::Generic) return 0;
    if (best_isa() == Isa::Avx512) return avx512::peak_loop(k, iterations, sink);
    if (best_isa() == Isa::Avx2) return avx2::peak_loop(k, iterations, sink);
#endif
#ifdef JOURNEY_KERNELS_NEON
    if (kind == PeakKind::Int8Dot || kind == PeakKind::Int8BlockDot)
      return best_isa() == Isa::NeonDot ? neon::peak_loop(k, iterations, sink) : 0;
#endif
    return kind == PeakKind::F32Fma ? generic::peak_loop(k, iterations, sink) : 0;
  };
  float sink = 0;
  double best = 0;
  int64_t iterations = 1 << 16;
  for (double elapsed = 0; elapsed < seconds;) {  // grow the loop until one pass takes ~1/4 of the time
    const auto t0 = Clock::now();
    const double ops = loop(iterations, &sink);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (ops == 0) return 0;
    elapsed += t;
    best = std::max(best, ops / t);
    if (t < seconds / 4) iterations *= 2;
  }
  volatile float keep = sink;  // the loops' results are used
  (void)keep;
  return best;
}

int unpacked_zero(DType type) {
  switch (type) {
    case DType::Q8_0: return 128;
    case DType::Q4_0: return 8;
    case DType::Q5_0: return 16;
    case DType::Q3_K: return 4;
    case DType::Q6_K: return 32;
    default: return 0;
  }
}

int unpacked_scale_groups(DType type) {
  switch (type) {
    case DType::Q2_K: case DType::Q3_K: case DType::Q6_K: return 1;
    default: return 2;  // the legacy blocks of 32, Q4_K and Q5_K's sub-blocks of 32
  }
}

bool unpacked_has_offset(DType type) {
  return type == DType::Q4_1 || type == DType::Q5_1 || type == DType::Q2_K || type == DType::Q4_K ||
         type == DType::Q5_K;
}

size_t bf16_panel_rows_scratch_bytes(int64_t T) {
#ifdef JOURNEY_KERNELS_X86
  if (has_bf16_dot()) return avx512bf16::bf16_panel_rows_scratch_bytes(T);
#endif
  (void)T;
  return 0;
}

void bf16_panel_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
                     const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
                     void* scratch, bool row_groups) {
  if (in % 32 != 0) fail("bf16_panel_rows: rows of ", in, " weights; the bf16 panels take multiples of 32");
  if (type != DType::BF16 && !dtype_is_quantized(type))
    fail("bf16_panel_rows: weights of type ", dtype_name(type), "; expected bf16 or a block type");
#ifdef JOURNEY_KERNELS_X86
  if (has_bf16_dot())
    return avx512bf16::bf16_panel_rows(type, y, x_packed, weight, row_bytes, bias, T, in, out, row_begin, row_end,
                                       scratch, row_groups);
#endif
  (void)y, (void)x_packed, (void)weight, (void)row_bytes, (void)bias, (void)T, (void)out, (void)row_begin,
      (void)row_end, (void)scratch, (void)row_groups;
  fail("bf16_panel_rows: this CPU has no AVX512-BF16 (check kernels::has_bf16_dot() first)");
}

void pack_token_pairs(const float* x, int64_t T, int64_t in, uint16_t* packed, int64_t tile_begin, int64_t tile_end) {
  if (in % 32 != 0) fail("pack_token_pairs: rows of ", in, " values; the bf16 token tiles take multiples of 32");
#ifdef JOURNEY_KERNELS_X86
  if (has_bf16_dot()) return avx512bf16::pack_token_pairs(x, T, in, packed, tile_begin, tile_end);
#endif
  (void)x, (void)T, (void)packed, (void)tile_begin, (void)tile_end;
  fail("pack_token_pairs: this CPU has no AVX512-BF16 (check kernels::has_bf16_dot() first)");
}

size_t amx_rows_scratch_bytes(int64_t in) {
#ifdef JOURNEY_KERNELS_X86
  if (has_amx()) return amx::amx_rows_scratch_bytes(in);
#endif
  (void)in;
  return 0;
}

void amx_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
              const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
              void* scratch, bool row_groups) {
  if (in % 32 != 0) fail("amx_rows: rows of ", in, " weights; AMX tiles take multiples of 32");
#ifdef JOURNEY_KERNELS_X86
  if (has_amx())
    return amx::amx_rows(type, y, x_packed, weight, row_bytes, bias, T, in, out, row_begin, row_end, scratch,
                         row_groups);
#endif
  (void)type, (void)y, (void)x_packed, (void)weight, (void)row_bytes, (void)bias, (void)T, (void)out,
      (void)row_begin, (void)row_end, (void)scratch, (void)row_groups;
  fail("amx_rows: no AMX-BF16 here (check kernels::has_amx() first)");
}

}  // namespace kernels

void gemm::linear_rows(Isa isa, float* y, const float* x, const float* weight, const float* bias, int64_t T,
                       int64_t in, int64_t out, int64_t row_begin, int64_t row_end) {
  kernels::table(isa).float_rows(DType::F32, y, x, weight, bias, T, in, out, row_begin, row_end);
}

}  // namespace journey::cpu
