#include "backends/cuda/gemm.h"

#include "backends/cuda/cuda_error.h"
#include "core/error.h"

namespace tandem::cuda {
namespace {

cudaDataType_t data_type(GemmType t) {
  switch (t) {
    case GemmType::f32: return CUDA_R_32F;
    case GemmType::f16: return CUDA_R_16F;
    case GemmType::bf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

/// The column-major call's view of row-major args: C^T [n, m] = op(B)^T op(A)^T.
struct ColumnMajor {
  cublasOperation_t op_first, op_second;  // for B, then A
  int64_t rows, cols, inner;              // n, m, k
  int64_t ld_first, ld_second, ld_c;      // row lengths of B, A, C
};

ColumnMajor column_major(const GemmArgs& g) {
  TANDEM_ASSERT(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size");
  ColumnMajor cm;
  cm.op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cm.op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cm.rows = g.n;
  cm.cols = g.m;
  cm.inner = g.k;
  // cuBLAS wants leading dimensions >= 1 even for empty matrices.
  auto at_least_one = [](int64_t v) { return v > 0 ? v : int64_t{1}; };
  cm.ld_first = at_least_one(g.trans_b ? g.k : g.n);
  cm.ld_second = at_least_one(g.trans_a ? g.m : g.k);
  cm.ld_c = at_least_one(g.n);
  return cm;
}

size_t element_bytes(GemmType t) { return t == GemmType::f32 ? 4 : 2; }

/// An empty sum (k = 0) is C = beta C: with beta 0, zeros written here, with beta 1
/// nothing to do (an accumulated gradient over an empty sequence), rather than trusting
/// every cuBLAS path to treat k = 0 as BLAS does. True when the call is done.
bool done_as_empty_sum(const CublasHandle& handle, const GemmArgs& g, int64_t batch, int64_t stride_c) {
  if (g.k != 0 || batch == 0) return false;
  if (g.beta == 1.f) return true;
  if (g.beta != 0.f) return false;
  const size_t width = static_cast<size_t>(g.m * g.n) * element_bytes(g.types.output);
  const size_t pitch = batch > 1 ? static_cast<size_t>(stride_c) * element_bytes(g.types.output) : width;
  TANDEM_CUDA_CHECK(cudaMemset2DAsync(g.c, pitch, 0, width, static_cast<size_t>(batch), handle.stream()));
  return true;
}

}  // namespace

void gemm(const CublasHandle& handle, const GemmArgs& g) {
  if (g.m == 0 || g.n == 0 || done_as_empty_sum(handle, g, 1, 0)) return;
  const ColumnMajor cm = column_major(g);
  const cudaDataType_t in = data_type(g.types.inputs), out = data_type(g.types.output);
  TANDEM_CUBLAS_CHECK(cublasGemmEx_64(handle.get(), cm.op_first, cm.op_second, cm.rows, cm.cols, cm.inner, &g.alpha,
                                      g.b, in, cm.ld_first, g.a, in, cm.ld_second, &g.beta, g.c, out, cm.ld_c,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_strided_batched(const CublasHandle& handle, const GemmArgs& g, const BatchStrides& s) {
  TANDEM_ASSERT(s.c != 0 || s.batch <= 1, "gemm_strided_batched: C cannot repeat across the batch");
  TANDEM_ASSERT(s.c == 0 || s.c >= g.m * g.n, "gemm_strided_batched: C matrices overlap");
  if (g.m == 0 || g.n == 0 || s.batch == 0 || done_as_empty_sum(handle, g, s.batch, s.c)) return;
  const ColumnMajor cm = column_major(g);
  const cudaDataType_t in = data_type(g.types.inputs), out = data_type(g.types.output);
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle.get(), cm.op_first, cm.op_second, cm.rows, cm.cols, cm.inner, &g.alpha, g.b, in, cm.ld_first, s.b, g.a,
      in, cm.ld_second, s.a, &g.beta, g.c, out, cm.ld_c, s.c, s.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tandem::cuda
