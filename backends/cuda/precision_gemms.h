// The GEMMs of a layer that makes many products (attention, the recurrent layers), in the
// layer's matmul precision, as torch.autocast runs them: in bf16 or fp16 each product reads
// 16-bit copies of its fp32 operands, cast just before it into two scratch buffers that
// every product of the layer reuses (one stream orders the cast, the product and the next
// cast, so no copy is overwritten while a product still reads it), and writes C in fp32,
// accumulated in fp32. In fp32 the products run as they are.
//
// linear and matmul keep their own 16-bit copies (ops/linear.cpp, ops/matmul.cpp): they
// know which operand is a weight and which a batch.
#pragma once

#include <memory>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/mixed_precision.cuh"
#include "core/storage.h"

namespace tandem::cuda {

class PrecisionGemms {
 public:
  PrecisionGemms(CudaContext& ctx, MatmulPrecision precision);

  /// gemm() of gemm.h with fp32 operands a and b, read in this precision.
  void gemm(GemmArgs g);
  /// gemm_strided_batched() of gemm.h, likewise.
  void gemm_strided_batched(GemmArgs g, const BatchStrides& strides);
  bool half() const { return half_; }

 private:
  /// `src` [elements] (fp32) cast into `scratch`, grown as needed; the copy.
  const void* cast(const void* src, int64_t elements, std::shared_ptr<Storage>& scratch);

  CudaContext& ctx_;
  bool half_ = false;
  HalfType type_ = HalfType::bf16;
  GemmTypes types_{};
  std::shared_ptr<Storage> scratch_a_, scratch_b_;
};

}  // namespace tandem::cuda
