// What a backend that samples on its own device (Backend::forward_sample) needs for one row of
// logits. A plain struct shared by the host code
// (C++20) and the kernels (nvcc, C++17), so it holds nothing but numbers.
//
// The random number is drawn on the HOST from the sequence's own Pcg32 (sampling/rng.h) and passed
// in as `u`: the device then applies the same filters and the same inverse-CDF walk as
// sampling/processors.cpp, so a seed picks the same token on either backend whenever the two
// distributions agree (they differ only by float summation order).
#pragma once

namespace journey {

struct DeviceSampling {
  double temperature = 0.0;  // 0 = greedy (argmax; ties to the lowest id)
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  float u = 0.0f;            // uniform in [0, 1) from the host generator
};

}  // namespace journey
