// relu, tanh, sigmoid, gelu (approximate "none": erf; "tanh"), relu6, hardswish,
// hardsigmoid, silu, mish, exp, and clamp on a GPU: [*] -> [*], elementwise
// (kernels/activations.cu).
//
// Backward, dy -> dx (assigned): relu, relu6, tanh, sigmoid, exp from the output; the others
// from the input.
#include <limits>

#include "backends/cuda/kernels/activations.cuh"
#include "backends/cuda/ops/op_factories.h"

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

class ClampKernel final : public Kernel {
 public:
  ClampKernel(CudaContext& ctx, const KernelSpec& spec)
      : ctx_(ctx),
        lo_(spec.attrs->is_null("min") ? -std::numeric_limits<float>::infinity()
                                       : static_cast<float>(spec.attrs->get_float("min"))),
        hi_(spec.attrs->is_null("max") ? std::numeric_limits<float>::infinity()
                                       : static_cast<float>(spec.attrs->get_float("max"))) {}

  void forward(const KernelArgs& args) override {
    clamp_forward(lo_, hi_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), args.outputs[0].numel(),
                  ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return true; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    clamp_backward(lo_, hi_, args.inputs[0].data<float>(), args.grad_outputs[0].data<float>(),
                   args.grad_inputs[0].data<float>(), args.grad_inputs[0].numel(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  float lo_, hi_;
};

}  // namespace

std::unique_ptr<Kernel> make_exp_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::exp);
}
std::unique_ptr<Kernel> make_clamp_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ClampKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_relu_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::relu);
}
std::unique_ptr<Kernel> make_tanh_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::tanh);
}
std::unique_ptr<Kernel> make_sigmoid_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::sigmoid);
}
std::unique_ptr<Kernel> make_relu6_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::relu6);
}
std::unique_ptr<Kernel> make_hardswish_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::hardswish);
}
std::unique_ptr<Kernel> make_hardsigmoid_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::hardsigmoid);
}
std::unique_ptr<Kernel> make_silu_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::silu);
}
std::unique_ptr<Kernel> make_mish_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Activation::mish);
}
std::unique_ptr<Kernel> make_gelu_kernel(CudaContext& ctx, const KernelSpec& spec) {
  const std::string& approximate = spec.attrs->get_string("approximate");
  if (approximate != "none" && approximate != "tanh")
    throw UserError("gelu: approximate '" + approximate + "' is not one of none, tanh");
  return std::make_unique<ActivationKernel>(ctx, spec, approximate == "tanh" ? Activation::gelu_tanh
                                                                               : Activation::gelu_erf);
}

}  // namespace tandem::cuda
