// Bf16Cast: a float32 tensor's bf16 copy in a buffer the kernel owns, for the bf16 kernels'
// inputs (x, dy, a weight as it is). Rounded to nearest even, NaN kept a NaN: the bits
// torch's float -> bfloat16 conversion gives, so that a bf16 layer here and under
// torch.autocast round the same inputs alike.
//
// Why not a oneDNN reorder: its f32 -> bf16 reorder of a plain [256, 1024] takes 0.27 ms
// here (jit:uni, 2 threads), a fifth of the bf16 matmul it feeds; this loop, vectorised by
// the compiler, is bound by memory (about 0.03 ms).
#pragma once

#include <cstdint>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/ops/op_util.h"
#include "backends/kernel.h"
#include "core/bfloat16.h"
#include "core/tensor.h"

namespace tandem::cpu {

/// `n` floats from `src` into bf16 at `dst`, over the calling thread's OpenMP team when
/// large enough.
inline void cast_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dst[i] = float_to_bf16(src[i]);
  });
}

/// The bf16 copy that weight `w`'s storage keeps (Note [a weight's bf16 copy] in
/// core/bf16_copy.h), cast from `w` here unless it holds params version `version` already
/// (the optimizer wrote it, or another kernel cast it). Null where `w` keeps none (it is
/// not the whole of a storage in host memory) or the caller tracks no versions.
inline const uint16_t* kept_bf16_weight(const Tensor& w, uint64_t version) {
  Bf16Copy* copy = version == kUnknownParamsVersion ? nullptr : w.bf16_copy(/*make=*/true);
  if (copy == nullptr) return nullptr;
  if (!copy->current(version)) {
    cast_to_bf16(w.data<float>(), copy->data(), w.numel());
    copy->made_at(version);
  }
  return copy->data();
}

/// A buffer of `n` bf16 values (64-byte aligned, from oneDNN's engine), filled by cast().
/// Not thread-safe.
class Bf16Cast {
 public:
  Bf16Cast() = default;
  Bf16Cast(dnnl::engine& engine, int64_t n)
      : n_(n), buffer_(dnnl::memory::desc({n}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::a), engine) {}

  /// Casts `src` (n floats) into the buffer; returns it.
  const void* cast(const float* src) {
    cast_to_bf16(src, data(), n_);
    return data();
  }
  /// The buffer as the last cast() left it.
  const void* last() const { return buffer_.get_data_handle(); }
  /// Whether it has a buffer (a default-constructed one has none).
  bool allocated() const { return n_ > 0; }

 private:
  uint16_t* data() const { return static_cast<uint16_t*>(buffer_.get_data_handle()); }

  int64_t n_ = 0;
  dnnl::memory buffer_;
};

}  // namespace tandem::cpu
