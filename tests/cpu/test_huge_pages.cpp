// HugePageAllocator: large arrays come back 2 MiB-aligned (the precondition for transparent huge
// pages) and behave as ordinary vectors; small ones use malloc. Whether the kernel really backs a
// range with huge pages depends on /sys/kernel/mm/transparent_hugepage, so it is reported, not
// asserted.
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <new>
#include <numeric>
#include <string>

#include "cpu/huge_pages.h"

using namespace journey;

TEST_CASE("large huge-page vectors are 2 MiB-aligned, small ones are plain, contents survive growth") {
  constexpr size_t kHuge = HugePageAllocator<float>::kHugePage;
  HugePageFloats large(3 * kHuge / sizeof(float) + 7);  // not a multiple of the page: rounded up inside
  CHECK(reinterpret_cast<uintptr_t>(large.data()) % kHuge == 0);
  std::iota(large.begin(), large.end(), 0.0f);
  CHECK(large[12345] == 12345.0f);
  CHECK(large.back() == float(large.size() - 1));

  HugePageFloats small(16, 2.5f);  // a norm weight: no 2 MiB page for it
  CHECK(small.size() == 16);
  CHECK(small[15] == 2.5f);
  small.resize(kHuge / sizeof(float) * 2);  // grows across the threshold: copied into a huge allocation
  CHECK(reinterpret_cast<uintptr_t>(small.data()) % kHuge == 0);
  CHECK(small[15] == 2.5f);
  CHECK(small.back() == 0.0f);

  HugePageFloats copy = large;  // copies allocate through the same allocator
  CHECK(reinterpret_cast<uintptr_t>(copy.data()) % kHuge == 0);
  CHECK(copy == large);

  // a size whose byte count would wrap around is refused, not under-allocated
  HugePageAllocator<float> allocator;
  CHECK_THROWS_AS(allocator.allocate(std::numeric_limits<size_t>::max() / sizeof(float)), std::bad_alloc);

  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  MESSAGE("transparent_hugepage/enabled: ", mode.empty() ? "(unknown)" : mode);
}
