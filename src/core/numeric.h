// The one error measure journey compares tensors with: the normalized mean squared error of
// llama.cpp's test-backend-ops, sum((ours - ref)^2) / sum(ref^2). It is scale-free (a logits row
// and a probability row are judged alike) and 1e-9 means a relative RMS error of ~3e-5.
#pragma once
#include <cmath>
#include <cstddef>
#include <span>

namespace journey {

// Entries that are -inf (or +inf) in both tensors (masked attention scores) are skipped; an
// infinity or NaN on one side only makes the result +inf or NaN, so it never passes a bound.
// A reference of all zeros returns the plain sum of squared differences.
inline double nmse(std::span<const float> ours, std::span<const float> reference) {
  double num = 0, den = 0;
  const size_t n = reference.size() < ours.size() ? reference.size() : ours.size();
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(reference[i]) && ours[i] == reference[i]) continue;
    const double d = double(ours[i]) - double(reference[i]);
    num += d * d;
    den += double(reference[i]) * double(reference[i]);
  }
  if (ours.size() != reference.size()) return INFINITY;  // a shape mismatch never passes
  return den == 0 ? num : num / den;
}

}  // namespace journey
