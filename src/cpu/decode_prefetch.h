// How the decode products ask for the weight bytes they will read next.
//
// A decode step reads every weight once, front to back: each thread walks its rows (or its row
// groups) as one stream and each kernel step asks for the bytes some distance further on, so the
// memory works while these are multiplied. Which request keeps the memory busiest depends on the
// CPU, so it is chosen at run time (kDecodePrefetch, gemm.cpp) and can be forced with
// JOURNEY_DECODE_PREFETCH=off|near|two-level:
//
//   near       2 KB ahead into L1 (prefetcht0): the stored rows of every type (the fused dots of the
//              block types, the f32 / f16 / bf16 row streams); the row groups 16 KB ahead into L2
//              (prefetcht1). Intel (the 2-core Xeon VM: 1.1B Q8_0 decode 10.0 -> 13.8 tok/s, BF16
//              12.0 -> 14.8 against the hardware prefetcher alone).
//   two-level  every stream asks for each line twice: 32 KB ahead toward L3 (prefetcht2), where the
//              request has time to come back from memory, and 4 KB ahead into L2 (prefetcht1). Why
//              two requests beat one at either distance was not worked out (a guess: requests the
//              full miss buffers drop are asked again). AMD: on the Zen 4 VM
//              (2026-12-07) one prefetch per line, whatever its distance (2, 4, 16 or 32 KB), left
//              the memory idle between requests once it was fast (~60 GB/s): 1.1B decode F16
//              62 -> 80 %, BF16 56-77 -> 77-81 %, Q4_K_M 58 -> 66 % of the bandwidth of the same run;
//              with it slow (~33 GB/s) Q4_0 82-84 -> 87-88 %, Q4_K_M 79 -> 86 %
//              (docs/performance.md, "Two prefetches per line on AMD Zen 4"). Not measured on
//              Zen 3, where float rows had decoded faster with no software prefetch than with the
//              near one.
//   off        the hardware prefetcher alone (for measuring).
//
// A prefetch never faults and never changes a number (past a matrix's end it fetches nothing
// harmful): every mode gives the same greedy text (test_cli_manners).
#pragma once

#include <cstdint>

namespace journey::cpu::kernels {

enum class DecodePrefetch { off, near, two_level };
// JOURNEY_DECODE_PREFETCH, else this CPU's choice (two-level on AMD, near elsewhere); set before
// main, read by the kernels at every step. A bad value is an error at kernel_choice().
extern const DecodePrefetch kDecodePrefetch;
const char* decode_prefetch_name(DecodePrefetch mode);  // "off", "near", "two-level"

constexpr int64_t kNearAhead = 2048;       // near: stored rows, into L1
constexpr int64_t kNearGroupAhead = 16384;  // near: row groups, into L2 (the group kernels take half
                                            // the stored rows' time per byte: 2 KB left them waiting)
constexpr int64_t kTwoLevelNear = 4096;    // two-level: into L2
constexpr int64_t kTwoLevelFar = 32768;    // two-level: toward L3

// The near prefetch of a stored-row stream (below) on its own: header-only, so that a build without
// the journey library (bench_highway's ARM check) asks for its rows as journey does.
[[gnu::always_inline]] inline void fetch_near(const void* at, int64_t bytes) {
  const char* ahead = static_cast<const char*>(at) + kNearAhead;
  for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(ahead + line, 0, 3);
}

// All the lines of `bytes` at `at` asked for into L2 at once: a row that lies apart from the ones
// before it (attention's K and V rows in a decode step: a kv head's row is one part of a slot of the
// paged pool), where a stream's distance ahead has nothing to follow.
[[gnu::always_inline]] inline void fetch_into_l2(const void* at, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(static_cast<const char*>(at) + line, 0, 2);
}

// One step of a decode stream that reads `bytes` from `at` (whole cache lines of it): asks for the
// lines the stream will read further on, as kDecodePrefetch says. kGroups: a row-group stream.
template <bool kGroups = false>
[[gnu::always_inline]] inline void fetch_decode_stream(const void* at, int64_t bytes) {
  const char* here = static_cast<const char*>(at);
  switch (kDecodePrefetch) {
    case DecodePrefetch::off: return;
    case DecodePrefetch::near:
      if constexpr (kGroups) {
        for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(here + kNearGroupAhead + line, 0, 2);
      } else {
        fetch_near(at, bytes);
      }
      return;
    case DecodePrefetch::two_level:
      for (int64_t line = 0; line < bytes; line += 64) {
        __builtin_prefetch(here + kTwoLevelFar + line, 0, 1);
        __builtin_prefetch(here + kTwoLevelNear + line, 0, 2);
      }
      return;
  }
}

}  // namespace journey::cpu::kernels
