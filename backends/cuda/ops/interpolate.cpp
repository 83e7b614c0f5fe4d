// interpolate on a GPU (the CPU's semantics: backends/cpu/ops/interpolate.cpp): one thread
// per output element with the shared taps of backends/interpolate_plan.h
// (kernels/interpolate.cu).
//
// Backward (input gradient assigned): dx zeroed, each dy element added into its taps.
#include "backends/cuda/kernels/interpolate.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class InterpolateKernel final : public Kernel {
 public:
  InterpolateKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), plan_(plan_interpolate(spec)) {}

  void forward(const KernelArgs& args) override {
    interpolate_forward(plan_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), ctx_.stream().get());
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }
  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined())
      interpolate_backward(plan_, args.grad_outputs[0].data<float>(), args.grad_inputs[0].data<float>(),
                           ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  const InterpolatePlan plan_;
};

}  // namespace

std::unique_ptr<Kernel> make_interpolate_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<InterpolateKernel>(ctx, spec);
}

}  // namespace tandem::cuda
