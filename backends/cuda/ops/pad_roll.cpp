// pad and roll on a GPU (the CPU's semantics: backends/cpu/ops/pad_roll.cpp): the shifted
// copy of backends/shift_plan.h on the compute stream (kernels/pad_roll.cu).
//
// Backward (input gradient assigned):
//   pad:  dx = dy cropped back (the pad with negated offsets)
//   roll: dx = dy rolled by the negated shifts
#include "backends/cuda/kernels/pad_roll.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/shift_plan.h"

namespace tandem::cuda {
namespace {

ShiftGather to_gather(const ShiftPlan& p) {
  TANDEM_ASSERT(p.sizes.size() <= static_cast<size_t>(kMaxShiftDims),
                "pad/roll: " + std::to_string(p.sizes.size()) + " shifted dims; a GPU takes " +
                    std::to_string(kMaxShiftDims));
  TANDEM_ASSERT(p.elem == 2 || p.elem == 4 || p.elem == 8,
                "pad/roll: no copy for elements of " + std::to_string(p.elem) + " bytes");
  ShiftGather g;
  g.rank = static_cast<int>(p.sizes.size());
  for (int k = 0; k < g.rank; ++k) {
    g.sizes[k] = p.sizes[k];
    g.in_sizes[k] = p.in_sizes[k];
    g.offsets[k] = p.offsets[k];
    g.wraps[k] = p.wraps[k] != 0;
  }
  g.inner = p.inner;
  g.numel = p.blocks * p.inner;
  g.elem = p.elem;
  g.fill_bits = p.fill_bits;
  return g;
}

class ShiftKernel final : public Kernel {
 public:
  ShiftKernel(CudaContext& ctx, const ShiftPlan& forward, const ShiftPlan& backward)
      : ctx_(ctx), forward_(to_gather(forward)), backward_(to_gather(backward)) {}

  void forward(const KernelArgs& args) override {
    shift_gather(forward_, args.inputs[0].raw_data(), args.outputs[0].raw_data(), ctx_.stream().get());
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }
  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined())
      shift_gather(backward_, args.grad_outputs[0].raw_data(), args.grad_inputs[0].raw_data(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  const ShiftGather forward_, backward_;
};

}  // namespace

std::unique_ptr<Kernel> make_pad_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ShiftKernel>(ctx, plan_pad(spec), plan_pad_backward(spec));
}

std::unique_ptr<Kernel> make_roll_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ShiftKernel>(ctx, plan_roll(spec), plan_roll_backward(spec));
}

}  // namespace tandem::cuda
