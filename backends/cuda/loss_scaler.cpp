#include "backends/cuda/loss_scaler.h"

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/mixed_precision.cuh"

namespace tandem::cuda {

DynamicLossScaler::DynamicLossScaler(CudaContext& ctx, LossScalerConfig config)
    : ctx_(ctx), config_(config), scale_(config.initial_scale) {
  TANDEM_ASSERT(config.initial_scale > 0 && config.growth_factor > 1 && config.backoff_factor > 0 &&
                    config.backoff_factor < 1 && config.growth_interval > 0,
                "loss scaler: bad configuration");
  found_inf_ = Tensor::empty({1}, DType::int64, ctx.allocator());
}

bool scale_checking_finite(std::span<const Tensor> grads, float factor, int* flag, cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  for (const Tensor& g : grads)
    if (g.defined()) unscale_and_check(g.data<float>(), g.numel(), factor, flag, stream);
  int found = 0;
  copy_to_host(&found, flag, sizeof found, stream);
  return found == 0;
}

bool DynamicLossScaler::unscale_and_check(std::span<const Tensor> grads) {
  // Computed in double and rounded once, as torch takes the reciprocal of its fp32 scale.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  return scale_checking_finite(grads, inv_scale, static_cast<int*>(found_inf_.raw_data()), ctx_.stream().get());
}

void DynamicLossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= config_.backoff_factor;
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ == config_.growth_interval) {
    scale_ *= config_.growth_factor;
    clean_steps_ = 0;
  }
}

}  // namespace tandem::cuda
