// cat, narrow, flatten and reshape on a GPU: byte copies on the compute stream, so int64
// tensors work as well as float32 (the CPU's semantics: backends/cpu/ops/shape_ops.cpp).
// cat and narrow are strided copies of `outer` rows, one cudaMemcpy2DAsync per input.
//
// Backward (input gradients assigned):
//   cat:              dy split along dim into dx_i
//   narrow:           dx is zero but for the slice, which is dy
//   flatten, reshape: dx = dy
#include "backends/cpu/ops/op_util.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

/// `rows` rows of `width` bytes from src (rows `src_pitch` apart) to dst (`dst_pitch` apart).
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, int64_t rows,
               cudaStream_t stream) {
  if (width == 0 || rows == 0) return;
  TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows),
                                      cudaMemcpyDeviceToDevice, stream));
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

class CopyKernel final : public Kernel {
 public:
  CopyKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    bytes_ = static_cast<size_t>(shape_numel(spec.inputs.at(0).shape)) * dtype_size(spec.inputs[0].dtype);
    TANDEM_ASSERT(shape_numel(spec.outputs.at(0).shape) == shape_numel(spec.inputs[0].shape),
                  spec.op + ": output " + shape_str(spec.outputs[0].shape) + " has a different size than input " +
                      shape_str(spec.inputs[0].shape));
  }
  void forward(const KernelArgs& args) override { copy(args.outputs[0], args.inputs[0]); }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }
  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined()) copy(args.grad_inputs[0], args.grad_outputs[0]);
  }

 private:
  void copy(const Tensor& dst, const Tensor& src) const {
    if (dst.raw_data() == src.raw_data() || bytes_ == 0) return;
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes_, cudaMemcpyDeviceToDevice, ctx_.stream().get()));
  }

  CudaContext& ctx_;
  size_t bytes_ = 0;
};

class CatKernel final : public Kernel {
 public:
  CatKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Shape& out = spec.outputs.at(0).shape;
    TANDEM_ASSERT(spec.inputs.size() >= 1 && !out.empty(), "cat: no inputs or a rank-0 output");
    const int64_t dim = cpu::normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(out.size()), "cat");
    const size_t elem = dtype_size(spec.outputs[0].dtype);
    outer_ = cpu::dims_product(out, 0, dim);
    const size_t inner_bytes = static_cast<size_t>(cpu::dims_product(out, dim + 1, out.size())) * elem;
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
    size_t column = 0;
    for (size_t i = 0; i < chunk_bytes_.size(); ++i) {
      copy_rows(bytes_of(args.outputs[0]) + column, out_row_bytes_, args.inputs[i].raw_data(), chunk_bytes_[i],
                chunk_bytes_[i], outer_, ctx_.stream().get());
      column += chunk_bytes_[i];
    }
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    size_t column = 0;
    for (size_t i = 0; i < chunk_bytes_.size(); ++i) {
      if (args.grad_inputs[i].defined())
        copy_rows(args.grad_inputs[i].raw_data(), chunk_bytes_[i], bytes_of(args.grad_outputs[0]) + column,
                  out_row_bytes_, chunk_bytes_[i], outer_, ctx_.stream().get());
      column += chunk_bytes_[i];
    }
  }

 private:
  CudaContext& ctx_;
  int64_t outer_ = 0;
  size_t out_row_bytes_ = 0;
  std::vector<size_t> chunk_bytes_;
};

class NarrowKernel final : public Kernel {
 public:
  NarrowKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Shape& in = spec.inputs.at(0).shape;
    const Shape& out = spec.outputs.at(0).shape;
    const int64_t dim = cpu::normalize_dim(spec.attrs->get_int("dim"), static_cast<int64_t>(in.size()), "narrow");
    const int64_t start = spec.attrs->get_int("start"), length = spec.attrs->get_int("length");
    TANDEM_ASSERT(start >= 0 && length >= 1 && start + length <= in[dim] && out[dim] == length,
                  "narrow: start " + std::to_string(start) + " + length " + std::to_string(length) + " outside dim " +
                      std::to_string(dim) + " of " + shape_str(in));
    const size_t inner =
        static_cast<size_t>(cpu::dims_product(in, dim + 1, in.size())) * dtype_size(spec.inputs[0].dtype);
    outer_ = cpu::dims_product(in, 0, dim);
    in_row_ = static_cast<size_t>(in[dim]) * inner;
    offset_ = static_cast<size_t>(start) * inner;
    slice_ = static_cast<size_t>(length) * inner;
  }

  void forward(const KernelArgs& args) override {
    copy_rows(args.outputs[0].raw_data(), slice_, bytes_of(args.inputs[0]) + offset_, in_row_, slice_, outer_,
              ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const cudaStream_t stream = ctx_.stream().get();
    const size_t total = in_row_ * static_cast<size_t>(outer_);
    if (total > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(args.grad_inputs[0].raw_data(), 0, total, stream));
    copy_rows(bytes_of(args.grad_inputs[0]) + offset_, in_row_, args.grad_outputs[0].raw_data(), slice_, slice_,
              outer_, stream);
  }

 private:
  CudaContext& ctx_;
  int64_t outer_ = 0;
  size_t in_row_ = 0, offset_ = 0, slice_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_cat_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<CatKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_narrow_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<NarrowKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_flatten_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<CopyKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_reshape_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<CopyKernel>(ctx, spec);
}

}  // namespace tandem::cuda
