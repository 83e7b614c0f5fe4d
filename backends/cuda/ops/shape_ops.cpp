// cat, narrow, flatten and reshape on a GPU: byte copies on the compute stream, so int64
// tensors work as well as float32 (the CPU's semantics: backends/cpu/ops/shape_ops.cpp).
// cat and narrow are strided copies of the rows of backends/copy_plan.h, one
// cudaMemcpy2DAsync per input; permute its strided gather (kernels/shape_ops.cu).
//
// Backward (input gradients assigned):
//   cat:              dy split along dim into dx_i
//   narrow:           dx is zero but for the slice, which is dy
//   flatten, reshape: dx = dy
//   permute:          dx = dy permuted by the inverse of dims
#include "backends/copy_plan.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/shape_ops.cuh"
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
  CatKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), plan_(plan_cat(spec)) {}

  void forward(const KernelArgs& args) override {
    size_t column = 0;
    for (size_t i = 0; i < plan_.chunk_bytes.size(); ++i) {
      copy_rows(bytes_of(args.outputs[0]) + column, plan_.out_row_bytes, args.inputs[i].raw_data(),
                plan_.chunk_bytes[i], plan_.chunk_bytes[i], plan_.outer, ctx_.stream().get());
      column += plan_.chunk_bytes[i];
    }
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    size_t column = 0;
    for (size_t i = 0; i < plan_.chunk_bytes.size(); ++i) {
      if (args.grad_inputs[i].defined())
        copy_rows(args.grad_inputs[i].raw_data(), plan_.chunk_bytes[i], bytes_of(args.grad_outputs[0]) + column,
                  plan_.out_row_bytes, plan_.chunk_bytes[i], plan_.outer, ctx_.stream().get());
      column += plan_.chunk_bytes[i];
    }
  }

 private:
  CudaContext& ctx_;
  const CatPlan plan_;
};

class NarrowKernel final : public Kernel {
 public:
  NarrowKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), plan_(plan_narrow(spec)) {}

  void forward(const KernelArgs& args) override {
    copy_rows(args.outputs[0].raw_data(), plan_.slice, bytes_of(args.inputs[0]) + plan_.offset, plan_.in_row,
              plan_.slice, plan_.outer, ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const cudaStream_t stream = ctx_.stream().get();
    const size_t total = plan_.in_row * static_cast<size_t>(plan_.outer);
    if (total > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(args.grad_inputs[0].raw_data(), 0, total, stream));
    copy_rows(bytes_of(args.grad_inputs[0]) + plan_.offset, plan_.in_row, args.grad_outputs[0].raw_data(),
              plan_.slice, plan_.slice, plan_.outer, stream);
  }

 private:
  CudaContext& ctx_;
  const NarrowPlan plan_;
};

PermuteGather to_gather(const PermutePlan& p) {
  TANDEM_ASSERT(p.sizes.size() <= static_cast<size_t>(kMaxPermuteDims),
                "permute: " + std::to_string(p.sizes.size()) + " dims after merging; a GPU takes " +
                    std::to_string(kMaxPermuteDims));
  TANDEM_ASSERT(p.elem == 2 || p.elem == 4 || p.elem == 8,
                "permute: no copy for elements of " + std::to_string(p.elem) + " bytes");
  PermuteGather g;
  g.rank = static_cast<int>(p.sizes.size());
  for (int k = 0; k < g.rank; ++k) g.sizes[k] = p.sizes[k], g.in_strides[k] = p.in_strides[k];
  g.numel = p.numel;
  g.elem = p.elem;
  return g;
}

class PermuteKernel final : public Kernel {
 public:
  PermuteKernel(CudaContext& ctx, const KernelSpec& spec)
      : ctx_(ctx), forward_(to_gather(plan_permute(spec))), backward_(to_gather(plan_permute_backward(spec))) {}

  void forward(const KernelArgs& args) override {
    permute_gather(forward_, args.inputs[0].raw_data(), args.outputs[0].raw_data(), ctx_.stream().get());
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }
  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined())
      permute_gather(backward_, args.grad_outputs[0].raw_data(), args.grad_inputs[0].raw_data(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  const PermuteGather forward_, backward_;
};

}  // namespace

std::unique_ptr<Kernel> make_permute_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<PermuteKernel>(ctx, spec);
}
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
