// softmax, log_softmax over attribute `dim` on a GPU (kernels/softmax.cu): the tensor
// viewed as [outer, axis, inner], as on the CPU. Backward from the output only. normalize
// (p = 2) over the same view, its backward from the input.
#include "backends/op_args.h"
#include "backends/cuda/kernels/softmax.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(CudaContext& ctx, const KernelSpec& spec, bool log) : ctx_(ctx), log_(log) {
    const AroundDim around = around_dim(spec.inputs.at(0).shape, spec.attrs->get_int("dim"), log ? "log_softmax" : "softmax");
    shape_ = {around.outer, around.axis, around.inner};
  }

  void forward(const KernelArgs& args) override {
    softmax_forward(log_, shape_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    softmax_backward(log_, shape_, args.outputs[0].data<float>(), args.grad_outputs[0].data<float>(),
                     args.grad_inputs[0].data<float>(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  bool log_;
  SoftmaxShape shape_;
};

class NormalizeKernel final : public Kernel {
 public:
  NormalizeKernel(CudaContext& ctx, const KernelSpec& spec)
      : ctx_(ctx), eps_(static_cast<float>(spec.attrs->get_float("eps"))) {
    const AroundDim around = around_dim(spec.inputs.at(0).shape, spec.attrs->get_int("dim"), "normalize");
    shape_ = {around.outer, around.axis, around.inner};
  }

  void forward(const KernelArgs& args) override {
    normalize_forward(shape_, eps_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return true; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    normalize_backward(shape_, eps_, args.inputs[0].data<float>(), args.grad_outputs[0].data<float>(),
                       args.grad_inputs[0].data<float>(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  float eps_;
  SoftmaxShape shape_;
};

}  // namespace

std::unique_ptr<Kernel> make_normalize_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<NormalizeKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_softmax_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<SoftmaxKernel>(ctx, spec, false);
}
std::unique_ptr<Kernel> make_log_softmax_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<SoftmaxKernel>(ctx, spec, true);
}

}  // namespace tandem::cuda
