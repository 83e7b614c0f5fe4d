// The training losses on a GPU, with backends/cpu/loss.cpp's semantics (torch 1.13's):
// cross_entropy and nll_loss (ignore_index, label_smoothing), mse_loss and
// binary_cross_entropy_with_logits, reduced by mean or sum; the gradient is written
// (assigned) with the same scale. Sums are in double, as on the CPU, and in a fixed order.
//
//   classification: x [N, C] (logits, or log-probabilities for nll), t [N] -> loss, dx [N, C]
//     loss_i = (1-e) (-logp_i[t_i]) + e/C sum_c(-logp_ic);  dx_ic = (p_ic - mass_ic) scale
//   elementwise:    x [n], t [n] -> loss, dx [n]
//
// The reduced values land in a LossResult in device memory; the caller copies it back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

inline constexpr unsigned long long kNoBadTarget = ~0ull;

/// What a loss kernel reports, in device memory.
struct LossResult {
  double loss = 0;     // reduced (mean or sum)
  double counted = 0;  // targets not ignored (classification) or elements
  double correct = 0;  // classification: arg-max equal to the target
  unsigned long long bad_target = kNoBadTarget;  // the first target outside [0, C) that is not ignored
};

struct ClassLossShape {
  int64_t n = 0, c = 0;
  bool logits = true;  // cross_entropy; false: nll_loss on log-probabilities
  bool mean = true;    // reduction mean, else sum
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};

/// Doubles of scratch the classification loss needs.
size_t class_loss_scratch(const ClassLossShape& shape);
/// grad may be null. `result` is fully written.
void class_loss(const ClassLossShape& shape, const float* x, const int64_t* t, float* grad, double* scratch,
                LossResult* result, cudaStream_t stream);

enum class PointLoss : int { mse, bce_with_logits };

/// Doubles of scratch the elementwise loss needs.
size_t point_loss_scratch(int64_t n);
void point_loss(PointLoss kind, bool mean, int64_t n, const float* x, const float* t, float* grad, double* scratch,
                LossResult* result, cudaStream_t stream);

}  // namespace tandem::cuda
