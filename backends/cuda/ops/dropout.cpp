// dropout and stochastic_depth on a GPU: [*] -> [*] (kernels/dropout.cu). Inference: a copy. Training: the
// mask of backends/dropout_mask.h, with the CPU's hash, so a seed drops the same elements
// on either device.
//
// Backward, dy -> dx (assigned): the mask rebuilt from the forward call's seed, so
// forward stores nothing.
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/dropout.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/dropout_probability.h"

namespace tandem::cuda {
namespace {

class DropoutKernel final : public Kernel {
 public:
  DropoutKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    p_ = dropout_probability(*spec.attrs);
    n_ = shape_numel(spec.inputs.at(0).shape);
    group_ = dropout_group(spec);
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
    dropout_mask_apply(in, out, n_, p_, seed, stream, group_);
  }

  CudaContext& ctx_;
  float p_ = 0.5f;
  int64_t n_ = 0;
  int64_t group_ = 1;  // elements that share a draw (stochastic_depth)
};

}  // namespace

std::unique_ptr<Kernel> make_dropout_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<DropoutKernel>(ctx, spec);
}

}  // namespace tandem::cuda
