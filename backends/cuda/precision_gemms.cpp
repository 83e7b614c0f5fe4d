#include "backends/cuda/precision_gemms.h"

#include <algorithm>

namespace tandem::cuda {

PrecisionGemms::PrecisionGemms(CudaContext& ctx, MatmulPrecision precision) : ctx_(ctx) {
  if (precision == MatmulPrecision::f32) return;
  half_ = true;
  type_ = precision == MatmulPrecision::bf16 ? HalfType::bf16 : HalfType::f16;
  types_ = {precision == MatmulPrecision::bf16 ? GemmType::bf16 : GemmType::f16, GemmType::f32};
}

const void* PrecisionGemms::cast(const void* src, int64_t elements, std::shared_ptr<Storage>& scratch) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elements, 1)) * 2;
  // a smaller buffer goes back to the stream-ordered pool: products queued before still
  // read it, and the pool hands it out again only behind them on this stream
  if (!scratch || scratch->bytes() < bytes) scratch = ctx_.allocator().allocate(bytes);
  if (elements > 0) cast_to_half(type_, static_cast<const float*>(src), scratch->data(), elements, ctx_.stream().get());
  return scratch->data();
}

void PrecisionGemms::gemm(GemmArgs g) {
  if (half_ && g.m > 0 && g.n > 0 && g.k > 0) {
    g.a = cast(g.a, g.m * g.k, scratch_a_);
    g.b = cast(g.b, g.k * g.n, scratch_b_);
    g.types = types_;
  }
  cuda::gemm(ctx_.cublas(), g);
}

void PrecisionGemms::gemm_strided_batched(GemmArgs g, const BatchStrides& s) {
  if (half_ && g.m > 0 && g.n > 0 && g.k > 0 && s.batch > 0) {
    // an operand spans its first matrix plus (batch - 1) strides (0: one matrix repeated)
    g.a = cast(g.a, g.m * g.k + (s.batch - 1) * s.a, scratch_a_);
    g.b = cast(g.b, g.k * g.n + (s.batch - 1) * s.b, scratch_b_);
    g.types = types_;
  }
  cuda::gemm_strided_batched(ctx_.cublas(), g, s);
}

}  // namespace tandem::cuda
