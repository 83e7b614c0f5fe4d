// The backward of linear's products, y [M, N] = x [M, K] W^T with W [N, K]:
//   dx [M, K]  = dy W          (assigned, fp32)
//   dW [N, K] += dy^T x        (accumulated into the fp32 gradient by a sum post-op)
//   db [N]    += sum_m dy[m]   (fp32)
// as two oneDNN matmuls whose operands (dy, W, x) are all fp32 or all bf16 and whose
// outputs are fp32: what linear.cpp runs in fp32 and linear_bf16.cpp in bf16 (the caller
// casts the operands; the data type is all that differs).
#pragma once

#include <cstdint>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/cpu_context.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

class LinearBackwardMatmuls {
 public:
  LinearBackwardMatmuls() = default;
  /// The two matmuls for these sizes, cached under `key` + "#bwd_data" / "#bwd_weights";
  /// `operands`: f32 or bf16.
  LinearBackwardMatmuls(CpuContext& ctx, const std::string& key, int64_t m, int64_t n, int64_t k,
                        dnnl::memory::data_type operands);

  /// dx = dy W.
  void data(const void* dy, const void* w, float* dx);
  /// dW += dy^T x.
  void weights(const void* dy, const void* x, float* dw);

 private:
  CpuContext* ctx_ = nullptr;
  DnnlCall data_, weights_;
  size_t data_dy_ = 0, data_w_ = 0, data_dx_ = 0, weights_dy_ = 0, weights_x_ = 0, weights_dw_ = 0;
};

/// db[j] += sum over the m rows of dy[., j] (dy [m, n]); threads split the columns, so no
/// two write one.
void linear_bias_backward(const float* dy, float* db, int64_t m, int64_t n);

}  // namespace tandem::cpu
