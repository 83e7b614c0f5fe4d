// relu, tanh, sigmoid, gelu (approximate "none": erf; "tanh") and dropout on a GPU:
// [*] -> [*], elementwise (kernels/activation.cu, kernels/pointwise.cu).
//
// Backward, dy -> dx (assigned): relu, tanh, sigmoid from the output; gelu from the
// input. dropout rebuilds its mask from the forward call's seed with the CPU's hash, so a
// seed drops the same elements on either device and forward stores nothing.
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/activation.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/dropout_probability.h"

namespace tandem::cuda {
namespace {

class ActivationKernel final : public Kernel {
 public:
  ActivationKernel(CudaContext& ctx, const KernelSpec& spec, Activation act)
      : ctx_(ctx), act_(act), n_(shape_numel(spec.inputs.at(0).shape)) {}

  void forward(const KernelArgs& args) override {
    activation_forward(act_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), n_, ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return !activation_grad_from_output(act_); }
  bool backward_reads_output() const override { return activation_grad_from_output(act_); }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const bool from_output = activation_grad_from_output(act_);
    const float* x = from_output ? nullptr : args.inputs[0].data<float>();
    const float* y = from_output ? args.outputs[0].data<float>() : nullptr;
    activation_backward(act_, x, y, args.grad_outputs[0].data<float>(), args.grad_inputs[0].data<float>(), n_,
                        ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  Activation act_;
  int64_t n_;
};

class DropoutKernel final : public Kernel {
 public:
  DropoutKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    p_ = dropout_probability(*spec.attrs);
    n_ = shape_numel(spec.inputs.at(0).shape);
  }

  void forward(const KernelArgs& args) override {
    apply(args.inputs[0].data<float>(), args.outputs[0].data<float>(), args.training, args.seed);
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    apply(args.grad_outputs[0].data<float>(), args.grad_inputs[0].data<float>(), args.training, args.seed);
  }

 private:
  void apply(const float* in, float* out, bool training, uint64_t seed) const {
    const cudaStream_t stream = ctx_.stream().get();
    const size_t bytes = sizeof(float) * static_cast<size_t>(n_);
    if (!training || p_ == 0.f) {
      if (in != out && bytes > 0) TANDEM_CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream));
      return;
    }
    if (p_ == 1.f) {
      if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(out, 0, bytes, stream));
      return;
    }
    dropout_mask_apply(in, out, n_, p_, seed, stream);
  }

  CudaContext& ctx_;
  float p_ = 0.5f;
  int64_t n_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_relu_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::relu);
}
std::unique_ptr<Kernel> make_tanh_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::tanh);
}
std::unique_ptr<Kernel> make_sigmoid_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::sigmoid);
}
std::unique_ptr<Kernel> make_gelu_kernel(CudaContext& ctx, const KernelSpec& spec) {
  const std::string& approximate = spec.attrs->get_string("approximate");
  if (approximate != "none" && approximate != "tanh")
    throw UserError("gelu: approximate '" + approximate + "' is not one of none, tanh");
  return std::make_unique<ActivationKernel>(ctx, spec, approximate == "tanh" ? Activation::gelu_tanh
                                                                               : Activation::gelu_erf);
}
std::unique_ptr<Kernel> make_dropout_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<DropoutKernel>(ctx, spec);
}

}  // namespace tandem::cuda
