// The sampler's random numbers: PCG32 (M. O'Neill, "PCG: A Family of Simple Fast Space-Efficient
// Statistically Good Algorithms for Random Number Generation", 2014; XSH-RR output), written out
// here because std:: distributions are implementation-defined: the same seed gives different
// numbers with libstdc++ and libc++. With this generator and the float conversion below, a seed
// gives the same tokens on every platform (given the same logits).
#pragma once
#include <cstdint>

namespace journey {

class Pcg32 {
 public:
  // pcg32_srandom_r(initstate = seed, initseq = stream) of the reference implementation.
  explicit Pcg32(uint64_t seed, uint64_t stream = 54) {
    increment_ = (stream << 1u) | 1u;
    next_u32();
    state_ += seed;
    next_u32();
  }

  uint32_t next_u32() {
    uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + increment_;
    uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = static_cast<uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
  }

  // Uniform in [0, 1): the top 24 bits as a float, exact on every platform.
  float next_float() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_ = 0;
  uint64_t increment_ = 0;
};

}  // namespace journey
