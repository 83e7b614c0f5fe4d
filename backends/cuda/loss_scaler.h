// Dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler: the loss is
// multiplied by scale() before backward, so that small fp16 gradients do not flush to zero;
// before the optimizer step, unscale_and_check() divides the (fp32 master) gradients by the
// scale and reports whether any is inf or NaN; update() then skips nothing itself but
// moves the scale: down by backoff after an overflow (that step must be skipped), up by
// growth after growth_interval clean steps in a row. bf16 has fp32's range and needs none.
//
// Not thread-safe; one per training loop.
#pragma once

#include <span>

#include "backends/cuda/cuda_context.h"
#include "core/tensor.h"

namespace tandem::cuda {

struct LossScalerConfig {
  float initial_scale = 65536.f;  // 2^16, torch's default
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  int growth_interval = 2000;
};

/// Every gradient (float32, on the stream's device) *= factor in place, on `stream`, and
/// whether every value was finite before: one fused kernel per gradient into `flag` (an
/// int on the device), then one read of it, which waits for the stream.
bool scale_checking_finite(std::span<const Tensor> grads, float factor, int* flag, cudaStream_t stream);

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(CudaContext& ctx, LossScalerConfig config = {});

  float scale() const { return scale_; }
  /// Divides every gradient (float32, on ctx's device) by scale() in place, on ctx's stream,
  /// and returns whether all of them are finite. Reads one flag back: waits for the stream.
  bool unscale_and_check(std::span<const Tensor> grads);
  /// After a step's check: `finite` false halves (backoff) the scale and restarts the
  /// count of clean steps; true counts one and grows the scale every growth_interval.
  void update(bool finite);
  int clean_steps() const { return clean_steps_; }

 private:
  CudaContext& ctx_;
  LossScalerConfig config_;
  float scale_;
  int clean_steps_ = 0;
  Tensor found_inf_;  // one int on the device (stored in an int64 tensor)
};

}  // namespace tandem::cuda
