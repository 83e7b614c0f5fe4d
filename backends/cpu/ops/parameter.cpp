// parameter: () -> the learned tensor [shape]; buffer: () -> the tensor that is not
// learned (float32 or int64). The layer's one input only places and orders it
// (graph/ops/parameter.cpp); its values are not read.
//
// Forward: y = w (a copy of its bytes: a layer's output is its own buffer, which its
// readers may hold). Backward: dw += dy (accumulated, as every parameter's gradient; a
// buffer has none); dx = 0 (assigned).
#include <algorithm>
#include <cstring>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

class ParameterKernel final : public Kernel {
 public:
  void forward(const KernelArgs& args) override {
    std::memcpy(args.outputs[0].raw_data(), args.params[0].raw_data(), args.outputs[0].nbytes());
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined() && args.grad_inputs[0].nbytes() > 0) std::memset(args.grad_inputs[0].raw_data(), 0, args.grad_inputs[0].nbytes());
    if (!args.grad_params[0].defined()) return;
    const float* dy = args.grad_outputs[0].data<float>();
    float* dw = args.grad_params[0].data<float>();
    const int64_t n = args.grad_params[0].numel();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dw[i] += dy[i];
  }
};

}  // namespace

std::unique_ptr<Kernel> make_parameter_kernel(CpuContext&, const KernelSpec&) {
  return std::make_unique<ParameterKernel>();
}

}  // namespace tandem
