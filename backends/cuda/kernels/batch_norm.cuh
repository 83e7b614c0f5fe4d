// What cuDNN's batch normalization leaves to Tandem (ops/batch_norm.cpp):
//   - counting a training batch in num_batches_tracked (an int64 in device memory);
//   - the backward with fixed statistics (eval mode with running statistics), which
//     cuDNN's backward, written for batch statistics, does not compute. x [N, C, HW]:
//       rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd
//       dx  = dy weight rstd        (assigned)
//       dw += sum_{N,HW}(dy xhat);  db += sum_{N,HW}(dy)   (accumulated, a block per channel)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

/// *tracked += 1.
void count_batch(int64_t* tracked, cudaStream_t stream);

struct BatchNormShape {
  int64_t n = 0, c = 0, hw = 0;
  float eps = 1e-5f;
};

/// weight null: 1. dx, dweight, dbias may each be null (not wanted).
void batch_norm_fixed_backward(const BatchNormShape& shape, const float* x, const float* dy, const float* weight,
                               const float* mean, const float* var, float* dx, float* dweight, float* dbias,
                               cudaStream_t stream);

}  // namespace tandem::cuda
