// Dynamic loss scaling for fp16 training: torch.cuda.amp.GradScaler's schedule, on the
// gradients wherever ParameterDevices keeps them. fp16 holds nothing below 2^-24, so the
// small gradients of a loss backpropagated in fp16 flush to zero; the trainer multiplies
// the loss's gradient by scale() before backward (every gradient is then scale() times
// larger), and before clipping and the update unscale_and_check() divides them back and
// says whether any overflowed. A step that overflowed is skipped (no update) and the scale
// backs off; growth_interval clean steps in a row grow it. bf16 and fp32 have fp32's range
// and train without it.
//
// The scale is a float32, as GradScaler's tensor; with a power-of-two scale (the default
// and every scale its factors reach from one) scaling and unscaling are exact where
// nothing overflows or falls below fp32's normal range, so a clean step's update is the
// unscaled run's to the bit.
//
// Not thread-safe; one per training loop.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "core/touched_rows.h"
#include "graph/training_spec.h"
#include "runtime/optim/optimizer.h"

namespace tandem {

class LossScaler {
 public:
  explicit LossScaler(const LossScalingConfig& config);

  float scale() const { return scale_; }
  /// Clean steps since the last overflow or growth (GradScaler's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }

  /// torch._amp_foreach_non_finite_check_and_unscale_: multiplies every gradient by the
  /// float32 reciprocal of scale() (taken in double, as torch) and returns whether all of
  /// them were finite before it. `rows` and `devices` as in scale_gradients: a row
  /// gradient's values, only the touched rows of a dense one (the rest are zero), a
  /// gradient GPUs hold on its device.
  bool unscale_and_check(std::span<Tensor> grads, std::span<TouchedRows* const> rows, ParameterDevices& devices) const;

  /// torch._amp_update_scale_: after an overflow the scale is multiplied by backoff_factor
  /// and the count of clean steps restarts; a clean step counts one, and the
  /// growth_interval-th multiplies the scale by growth_factor (unless that would make it
  /// infinite) and restarts the count.
  void update(bool found_inf);

  /// What a checkpoint keeps: GradScaler.state_dict()'s scale and _growth_tracker.
  void restore(float scale, int64_t growth_tracker);

 private:
  LossScalingConfig config_;
  float scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace tandem
