// Dropout with a mask rebuilt from a seed (dropout_mask.h), over the OpenMP threads: the
// dropout layer's forward and backward, and the dropouts inside other layers (between a
// recurrent layer's stacked layers, on attention weights).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/dropout_mask.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

/// y[i] = x[i] * keep(seed, i / group) / (1 - p) over n elements (y may be x): each run of
/// `group` elements kept or dropped together (stochastic depth's samples); p == 1 gives
/// zeros.
inline void apply_dropout(const float* x, float* y, int64_t n, uint64_t seed, float p, int64_t group = 1) {
  if (p >= 1.f) {
    std::memset(y, 0, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  const float scale = dropout_scale(p);
  if (group > 1) {
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        y[i] = dropout_keep(seed, static_cast<uint64_t>(i / group), p) ? x[i] * scale : 0.f;
    });
    return;
  }
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = dropout_keep(seed, static_cast<uint64_t>(i), p) ? x[i] * scale : 0.f;
  });
}

}  // namespace tandem::cpu
