// Mixed precision's elementwise pieces: fp32 master tensors cast to bf16 or fp16 for the
// tensor-core GEMMs, and the gradient check of dynamic loss scaling (as torch's
// _amp_foreach_non_finite_check_and_unscale_): unscale in place and flag any inf or NaN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

enum class HalfType : int { bf16, f16 };

/// dst [n] (16-bit) = src [n] rounded to nearest even.
void cast_to_half(HalfType type, const float* src, void* dst, int64_t n, cudaStream_t stream);
/// dst [n] = src [n] (16-bit) widened to fp32, exactly; with `accumulate`, dst += it.
void widen_from_half(HalfType type, const void* src, float* dst, int64_t n, bool accumulate, cudaStream_t stream);

/// g [n] *= inv_scale; *found_inf becomes 1 if any element was not finite before, and is
/// left alone otherwise (one flag serves many tensors).
void unscale_and_check(float* g, int64_t n, float inv_scale, int* found_inf, cudaStream_t stream);

}  // namespace tandem::cuda
