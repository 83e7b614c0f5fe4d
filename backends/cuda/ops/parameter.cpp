// parameter (and buffer, a copy of any dtype with no gradient) on a GPU: () -> the tensor
// [shape]; the layer's one input only places and orders it (graph/ops/parameter.cpp).
//
// Forward: y = w (a device copy). Backward: dw += dy (accumulated, kernels/pointwise.cu);
// dx = 0 (assigned).
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class ParameterKernel final : public Kernel {
 public:
  explicit ParameterKernel(CudaContext& ctx) : ctx_(ctx) {}

  void forward(const KernelArgs& args) override {
    const size_t bytes = args.outputs[0].nbytes();
    if (bytes > 0)
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(args.outputs[0].raw_data(), args.params[0].raw_data(), bytes,
                                        cudaMemcpyDeviceToDevice, ctx_.stream().get()));
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const cudaStream_t stream = ctx_.stream().get();
    if (args.grad_inputs[0].defined() && args.grad_inputs[0].nbytes() > 0)
      TANDEM_CUDA_CHECK(cudaMemsetAsync(args.grad_inputs[0].raw_data(), 0, args.grad_inputs[0].nbytes(), stream));
    if (args.grad_params[0].defined())
      accumulate(args.grad_params[0].data<float>(), args.grad_outputs[0].data<float>(), 1.f,
                 args.grad_params[0].numel(), stream);
  }

 private:
  CudaContext& ctx_;
};

}  // namespace

std::unique_ptr<Kernel> make_parameter_kernel(CudaContext& ctx, const KernelSpec&) {
  return std::make_unique<ParameterKernel>(ctx);
}

}  // namespace tandem::cuda
