// Memory for the arrays of the CPU forward pass: the big, long-lived ones it streams through every
// step (weights, the KV pool) in 2 MiB-aligned chunks marked for transparent huge pages, and
// everything else cache-line aligned (see kCacheLine for why that matters).
//
// Why: decode reads every weight once per token, gigabytes per second, and with 4 KiB pages the
// CPU walks the page tables once every 4 KiB of that stream (a VM walks two levels of tables).
// With 2 MiB pages there are 512x fewer walks. Measured on the 2-core VM of docs/performance.md:
// a GEMV pass over 4.1 GB of weights streams at 28.5 GB/s instead of 23-24 GB/s, and the
// 16-token products of a 0.5B model take 149 instead of 176 ms. Linux only hands out huge pages
// to a range that asks (madvise) when /sys/kernel/mm/transparent_hugepage/enabled is "madvise",
// the Debian default; where huge pages are off or unknown, this is an ordinary aligned allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace journey {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(2) << 20;
  // Every allocation starts on a cache line (64 bytes, one AVX-512 register), big or small. Eigen
  // vectorizes a dynamic-size loop by first handling the elements before the first aligned
  // address one by one; with buffers that start anywhere, which elements take the scalar path
  // (and so how a sum is ordered, or whether exp is the scalar or the vector one) would change
  // from run to run with the heap, and so would the last bits of the logits. Aligned buffers make
  // a forward pass bit-reproducible (tests/engine/test_engine.cpp: the same requests twice, bit for bit).
  static constexpr size_t kCacheLine = 64;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    // (n * sizeof(T) and its rounding up below must not wrap around)
    if (n > (std::numeric_limits<size_t>::max() - kHugePage) / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) {  // small vectors (norm weights, biases, one step's activations)
      const size_t lines = (bytes + kCacheLine - 1) / kCacheLine;
      if (void* p = std::aligned_alloc(kCacheLine, (lines ? lines : 1) * kCacheLine)) return static_cast<T*>(p);
      throw std::bad_alloc();
    }
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;  // aligned_alloc needs a multiple
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only means 4 KiB pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

// An array in huge pages from 2 MiB up, cache-line aligned always.
template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;
using HugePageFloats = HugePageVector<float>;

// Whether this process can get 2 MiB pages by asking (madvise): Linux with
// /sys/kernel/mm/transparent_hugepage/enabled set to "always" or "madvise" (Debian's default).
inline bool transparent_huge_pages_available() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;  // e.g. "always [madvise] never": the bracketed one is in force
  std::getline(file, modes);
  return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
#else
  return false;
#endif
}

// One anonymous reservation that every copied weight matrix of a backend is carved from, marked
// for 2 MiB pages. One region rather than one HugePageVector per matrix: each of those is rounded
// up to whole 2 MiB pages, and a huge page is resident as soon as one byte of it is written, so
// the 155 matrices of the 1.1B shape would each add ~1 MiB (measured: resident 1.29 GB for a
// 1.17 GB file, against the file's size + 0.02 GB here). Pages of the reservation that are never
// written are never resident, so the capacity may be an upper bound.
class WeightArena {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;
  static constexpr size_t kAlignment = 64;  // every matrix starts on a cache line

  explicit WeightArena(size_t capacity) : capacity_(capacity) {
    if (capacity_ == 0) return;
#if defined(__linux__)
    // over-reserve one huge page so that the usable start can be 2 MiB aligned
    reserved_ = capacity_ + kHugePage;
    void* p = mmap(nullptr, reserved_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapping_ = static_cast<std::byte*>(p);
    base_ = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage);
#if defined(MADV_HUGEPAGE)
    madvise(base_, capacity_, MADV_HUGEPAGE);  // a hint: failure only means 4 KiB pages
#endif
#else
    base_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, (capacity_ + kAlignment - 1) / kAlignment * kAlignment));
    if (!base_) throw std::bad_alloc();
#endif
  }
  ~WeightArena() {
#if defined(__linux__)
    if (mapping_) munmap(mapping_, reserved_);
#else
    std::free(base_);
#endif
  }
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // `bytes` of the reservation, cache-line aligned; nullptr when they do not fit (the caller
  // sized the arena: that is a bug there, and it says which matrix).
  std::byte* take(size_t bytes) {
    const size_t start = (used_ + kAlignment - 1) / kAlignment * kAlignment;
    if (start > capacity_ || bytes > capacity_ - start) return nullptr;
    used_ = start + bytes;
    return base_ + start;
  }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_ = 0, used_ = 0, reserved_ = 0;
  std::byte* base_ = nullptr;     // 2 MiB aligned (Linux)
  std::byte* mapping_ = nullptr;  // what mmap returned, for munmap
};

}  // namespace journey
