// cat (attr dim, negative allowed; two or more inputs -> concatenated), narrow (dim,
// start, length: a slice along dim), flatten and
// reshape (a contiguous copy: the runtime usually aliases these instead, but the
// kernel must work on its own), permute (dims: a strided gather, backends/copy_plan.h).
// Byte copies, so int64 tensors work as well as float32.
//
// Backward (needs nothing from forward; input gradients assigned):
//   cat:              dy [.., sum_i n_i, ..] is split along dim into dx_i [.., n_i, ..]
//   narrow:           dx is zero but for the slice, which is dy
//   flatten, reshape: dx = dy (same elements, the input's shape)
//   permute:          dx = dy permuted by the inverse of dims
#include <cstring>

#include "backends/copy_plan.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

void parallel_copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  constexpr int64_t kBlock = 1 << 16;
  int64_t blocks = static_cast<int64_t>((bytes + kBlock - 1) / kBlock);
  cpu::parallel_for(blocks, kBlock / 4, [&](int64_t begin, int64_t end) {
    size_t from = static_cast<size_t>(begin) * kBlock;
    size_t to = std::min(bytes, static_cast<size_t>(end) * kBlock);
    std::memcpy(static_cast<char*>(dst) + from, static_cast<const char*>(src) + from, to - from);
  });
}

class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(const KernelSpec& spec) {
    bytes_ = static_cast<size_t>(shape_numel(spec.inputs.at(0).shape)) * dtype_size(spec.inputs[0].dtype);
    TANDEM_ASSERT(shape_numel(spec.outputs.at(0).shape) == shape_numel(spec.inputs[0].shape),
                  spec.op + ": output " + shape_str(spec.outputs[0].shape) + " has a different size than input " +
                      shape_str(spec.inputs[0].shape));
  }
  void forward(const KernelArgs& args) override {
    parallel_copy(args.outputs[0].raw_data(), args.inputs[0].raw_data(), bytes_);
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    parallel_copy(args.grad_inputs[0].raw_data(), args.grad_outputs[0].raw_data(), bytes_);
  }

 private:
  size_t bytes_ = 0;
};

class CatKernel final : public Kernel {
 public:
  explicit CatKernel(const KernelSpec& spec) {
    CatPlan p = plan_cat(spec);
    outer_ = p.outer;
    out_row_bytes_ = p.out_row_bytes;
    chunk_bytes_ = std::move(p.chunk_bytes);
  }

  void forward(const KernelArgs& args) override {
    char* y = static_cast<char*>(args.outputs[0].raw_data());
    const size_t n_inputs = chunk_bytes_.size();
    cpu::parallel_for(outer_, static_cast<int64_t>(out_row_bytes_ / 8), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        char* dst = y + o * out_row_bytes_;
        for (size_t i = 0; i < n_inputs; ++i) {
          const size_t chunk = chunk_bytes_[i];
          std::memcpy(dst, static_cast<const char*>(args.inputs[i].raw_data()) + o * chunk, chunk);
          dst += chunk;
        }
      }
    });
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const char* g = static_cast<const char*>(args.grad_outputs[0].raw_data());
    const size_t n_inputs = chunk_bytes_.size();
    cpu::parallel_for(outer_, static_cast<int64_t>(out_row_bytes_ / 8), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const char* src = g + o * out_row_bytes_;
        for (size_t i = 0; i < n_inputs; ++i) {
          const size_t chunk = chunk_bytes_[i];
          if (args.grad_inputs[i].defined())
            std::memcpy(static_cast<char*>(args.grad_inputs[i].raw_data()) + o * chunk, src, chunk);
          src += chunk;
        }
      }
    });
  }

 private:
  int64_t outer_ = 0;
  size_t out_row_bytes_ = 0;
  std::vector<size_t> chunk_bytes_;
};

// Rows of `outer` blocks: the input's row holds in_row bytes, of which the slice is the
// `slice` bytes starting at `offset`.
class NarrowKernel final : public Kernel {
 public:
  explicit NarrowKernel(const KernelSpec& spec) {
    const NarrowPlan p = plan_narrow(spec);
    outer_ = p.outer;
    in_row_ = p.in_row;
    offset_ = p.offset;
    slice_ = p.slice;
  }

  void forward(const KernelArgs& args) override {
    const char* x = static_cast<const char*>(args.inputs[0].raw_data()) + offset_;
    char* y = static_cast<char*>(args.outputs[0].raw_data());
    if (outer_ == 1) return parallel_copy(y, x, slice_);
    cpu::parallel_for(outer_, static_cast<int64_t>(slice_ / 8), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) std::memcpy(y + o * slice_, x + o * in_row_, slice_);
    });
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    char* dx = static_cast<char*>(args.grad_inputs[0].raw_data());
    const char* dy = static_cast<const char*>(args.grad_outputs[0].raw_data());
    cpu::parallel_for(outer_, static_cast<int64_t>(in_row_ / 8), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        char* row = dx + o * in_row_;
        std::memset(row, 0, offset_);
        std::memcpy(row + offset_, dy + o * slice_, slice_);
        std::memset(row + offset_ + slice_, 0, in_row_ - offset_ - slice_);
      }
    });
  }

 private:
  int64_t outer_ = 0;
  size_t in_row_ = 0, offset_ = 0, slice_ = 0;
};

// The output in order, a row of the plan's innermost dim at a time, each read from the
// input at that dim's stride: a memcpy where the stride is 1 (a channel shuffle's rows),
// an element at a time otherwise (NCHW to NHWC). A plain loop: the copy is bound by
// memory, and any dtype's elements move alike.
template <typename T>
void gather(const PermutePlan& p, const void* from, void* to) {
  if (p.numel == 0) return;
  const T* src = static_cast<const T*>(from);
  T* dst = static_cast<T*>(to);
  if (p.sizes.empty()) {  // every dim of size 1
    dst[0] = src[0];
    return;
  }
  const size_t n = p.sizes.size();
  const int64_t inner = p.sizes.back(), inner_stride = p.in_strides.back();
  cpu::parallel_for(p.numel / inner, inner, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t rest = row, offset = 0;
      for (size_t k = n - 1; k-- > 0;) {
        offset += (rest % p.sizes[k]) * p.in_strides[k];
        rest /= p.sizes[k];
      }
      const T* x = src + offset;
      T* y = dst + row * inner;
      if (inner_stride == 1) {
        std::memcpy(y, x, static_cast<size_t>(inner) * sizeof(T));
      } else {
        for (int64_t j = 0; j < inner; ++j) y[j] = x[j * inner_stride];
      }
    }
  });
}

void gather_any(const PermutePlan& p, const void* from, void* to) {
  switch (p.elem) {
    case 2: return gather<uint16_t>(p, from, to);
    case 4: return gather<uint32_t>(p, from, to);
    case 8: return gather<uint64_t>(p, from, to);
    default: TANDEM_ASSERT(false, "permute: no copy for elements of " + std::to_string(p.elem) + " bytes");
  }
}

class PermuteKernel final : public Kernel {
 public:
  explicit PermuteKernel(const KernelSpec& spec) : forward_(plan_permute(spec)), backward_(plan_permute_backward(spec)) {}

  void forward(const KernelArgs& args) override {
    gather_any(forward_, args.inputs[0].raw_data(), args.outputs[0].raw_data());
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    gather_any(backward_, args.grad_outputs[0].raw_data(), args.grad_inputs[0].raw_data());
  }

 private:
  const PermutePlan forward_, backward_;
};

}  // namespace

std::unique_ptr<Kernel> make_permute_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<PermuteKernel>(spec);
}

std::unique_ptr<Kernel> make_narrow_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<NarrowKernel>(spec);
}

std::unique_ptr<Kernel> make_cat_kernel(CpuContext&, const KernelSpec& spec) { return std::make_unique<CatKernel>(spec); }
std::unique_ptr<Kernel> make_flatten_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<CopyKernel>(spec);
}
std::unique_ptr<Kernel> make_reshape_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<CopyKernel>(spec);
}

}  // namespace tandem
