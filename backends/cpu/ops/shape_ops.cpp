// cat (attr dim, negative allowed; two or more inputs -> concatenated), narrow (dim,
// start, length: a slice along dim), flatten and
// reshape (a contiguous copy: the runtime usually aliases these instead, but the
// kernel must work on its own). Byte copies, so int64 tensors work as well as float32.
//
// Backward (needs nothing from forward; input gradients assigned):
//   cat:              dy [.., sum_i n_i, ..] is split along dim into dx_i [.., n_i, ..]
//   narrow:           dx is zero but for the slice, which is dy
//   flatten, reshape: dx = dy (same elements, the input's shape)
#include <cstring>

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
    const Shape& out = spec.outputs.at(0).shape;
    TANDEM_ASSERT(spec.inputs.size() >= 1 && !out.empty(), "cat: no inputs or a rank-0 output");
    int64_t dim = cpu::normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(out.size()), "cat");
    size_t elem = dtype_size(spec.outputs[0].dtype);
    outer_ = cpu::dims_product(out, 0, dim);
    size_t inner_bytes = static_cast<size_t>(cpu::dims_product(out, dim + 1, out.size())) * elem;
    out_row_bytes_ = static_cast<size_t>(out[dim]) * inner_bytes;
    int64_t total = 0;
    for (const TensorDesc& in : spec.inputs) {
      TANDEM_ASSERT(in.shape.size() == out.size(), "cat: input rank differs from the output's");
      chunk_bytes_.push_back(static_cast<size_t>(in.shape[dim]) * inner_bytes);
      total += in.shape[dim];
    }
    TANDEM_ASSERT(total == out[dim], "cat: inputs do not add up to the output along dim");
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
    const Shape& in = spec.inputs.at(0).shape;
    const Shape& out = spec.outputs.at(0).shape;
    int64_t dim = cpu::normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(in.size()), "narrow");
    int64_t start = spec.attrs->get_int("start"), length = spec.attrs->get_int("length");
    TANDEM_ASSERT(start >= 0 && length >= 1 && start + length <= in[dim] && out[dim] == length,
                  "narrow: start " + std::to_string(start) + " + length " + std::to_string(length) + " outside dim " +
                      std::to_string(dim) + " of " + shape_str(in));
    size_t inner = static_cast<size_t>(cpu::dims_product(in, dim + 1, in.size())) * dtype_size(spec.inputs[0].dtype);
    outer_ = cpu::dims_product(in, 0, dim);
    in_row_ = static_cast<size_t>(in[dim]) * inner;
    offset_ = static_cast<size_t>(start) * inner;
    slice_ = static_cast<size_t>(length) * inner;
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

}  // namespace

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
