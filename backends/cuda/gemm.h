// GEMM on row-major tensors through cuBLAS, which is column-major. A row-major [r, c]
// matrix is, read column-major, its transpose [c, r]; so row-major C = A B is computed as
// column-major C^T = B^T A^T: the operands swap places and keep their transpose flags,
// and every leading dimension is a row length. Nothing is copied or transposed in memory.
//
// Accumulation is always fp32. fp32 inputs run as fp32 (no TF32: see cublas_handle.h);
// bf16 and fp16 inputs run on tensor cores, writing C in their own type or in fp32 (the
// mixed-precision case: low-precision copies of fp32 master weights and activations).
#pragma once

#include <cstdint>

#include "backends/cuda/cublas_handle.h"

namespace tandem::cuda {

enum class GemmType { f32, f16, bf16 };

/// A and B share `inputs`; C is `output`.
struct GemmTypes {
  GemmType inputs = GemmType::f32;
  GemmType output = GemmType::f32;
};

/// The row-major operands of C [m, n] = alpha op(A) op(B) + beta C: A is [m, k], or
/// [k, m] when trans_a; B is [k, n], or [n, k] when trans_b; all contiguous. beta 0:
/// C is only written (it may hold NaN). Queued on the handle's stream.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f;
  const void* a = nullptr;
  const void* b = nullptr;
  float beta = 0.f;
  void* c = nullptr;
  GemmTypes types{};
};

void gemm(const CublasHandle& handle, const GemmArgs& args);

/// `batch` GEMMs of the same shape, operand i at a + i stride_a (elements), and so on.
/// A stride of 0 repeats one matrix (a broadcast batch dim) for A or B, never for C.
struct BatchStrides {
  int64_t batch = 1;
  int64_t a = 0, b = 0, c = 0;
};

void gemm_strided_batched(const CublasHandle& handle, const GemmArgs& args, const BatchStrides& strides);

}  // namespace tandem::cuda
