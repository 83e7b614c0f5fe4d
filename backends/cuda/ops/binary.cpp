// add (out = a + alpha b) and mul (out = a b) with broadcasting on a GPU
// (kernels/binary.cu), on the minimal merged form of backends/broadcast_plan.h; expand
// (out = a broadcast to the output's shape) is the same with one input, b being a.
//
// Backward, dy [out] -> da [a], db [b] (assigned), summed over the dims each input was
// broadcast along:
//   add: da = reduce(dy),      db = alpha reduce(dy)
//   mul: da = reduce(dy * b),  db = reduce(dy * a)
//   expand: da = reduce(dy)
// scale (out = x * factor + shift, numbers): dx = dy * factor.
// One thread per element of the gradient walks its share of dy: no atomics, and the
// order of each sum is fixed.
#include "backends/broadcast_plan.h"
#include "backends/cuda/cuda_limits.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/binary.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

BroadcastIndexing forward_indexing(const BroadcastPlan& plan) {
  BroadcastIndexing index;
  index.rank = static_cast<int>(plan.dims.size());
  for (int d = 0; d < index.rank; ++d) {
    index.dims[d] = plan.dims[d];
    index.stride_a[d] = plan.stride_a[d];
    index.stride_b[d] = plan.stride_b[d];
  }
  return index;
}

/// The indexing of input x's gradient: `sx` its plan strides, `so` the other input's.
ReduceIndexing reduce_indexing(const BroadcastPlan& plan, const std::vector<int64_t>& sx,
                               const std::vector<int64_t>& so, int64_t x_numel) {
  ReduceIndexing index;
  index.x_numel = x_numel;
  int64_t out_stride = 1;
  for (size_t i = plan.dims.size(); i-- > 0;) {  // innermost first, to compute the output's strides
    const bool kept = sx[i] != 0;
    int& rank = kept ? index.kept_rank : index.summed_rank;
    int64_t* dims = kept ? index.kept_dims : index.summed_dims;
    int64_t* outs = kept ? index.kept_out : index.summed_out;
    int64_t* others = kept ? index.kept_other : index.summed_other;
    // shift right to make room: the arrays are outermost first
    for (int d = rank; d > 0; --d) dims[d] = dims[d - 1], outs[d] = outs[d - 1], others[d] = others[d - 1];
    dims[0] = plan.dims[i];
    outs[0] = out_stride;
    others[0] = so[i];
    ++rank;
    if (!kept) index.summed_count *= plan.dims[i];
    out_stride *= plan.dims[i];
  }
  return index;
}

template <BinaryOp Op>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Shape& b_shape = Op == BinaryOp::expand ? spec.inputs.at(0).shape : spec.inputs.at(1).shape;
    plan_ = plan_broadcast(spec.inputs.at(0).shape, b_shape, spec.outputs.at(0).shape);
    if (std::string why = binary_limit(spec); !why.empty()) throw Unsupported(why);
    if constexpr (Op == BinaryOp::add) alpha_ = static_cast<float>(spec.attrs->get_float("alpha"));
    forward_ = forward_indexing(plan_);
    grad_a_ = reduce_indexing(plan_, plan_.stride_a, plan_.stride_b, shape_numel(spec.inputs[0].shape));
    grad_b_ = reduce_indexing(plan_, plan_.stride_b, plan_.stride_a, shape_numel(b_shape));
  }

  void forward(const KernelArgs& args) override {
    binary_forward(Op, alpha_, forward_, args.inputs[0].data<float>(), args.inputs.back().data<float>(),
                   args.outputs[0].data<float>(), plan_.numel, ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return Op == BinaryOp::mul; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const bool mul = Op == BinaryOp::mul;
    const float* dy = args.grad_outputs[0].data<float>();
    const cudaStream_t stream = ctx_.stream().get();
    if (args.grad_inputs[0].defined())
      binary_backward(grad_a_, dy, mul ? args.inputs[1].data<float>() : nullptr, 1.f,
                      args.grad_inputs[0].data<float>(), stream);
    if (Op != BinaryOp::expand && args.grad_inputs[1].defined())
      binary_backward(grad_b_, dy, mul ? args.inputs[0].data<float>() : nullptr, mul ? 1.f : alpha_,
                      args.grad_inputs[1].data<float>(), stream);
  }

 private:
  CudaContext& ctx_;
  BroadcastPlan plan_;
  float alpha_ = 1.f;
  BroadcastIndexing forward_;
  ReduceIndexing grad_a_, grad_b_;
};

/// scale: y = x * factor + shift as shift + factor * x (kernels/pointwise.cu's fill and
/// accumulate: the same product, and 0 * inf = NaN as torch's); dx = dy * factor the same
/// way, from 0.
class ScaleKernel final : public Kernel {
 public:
  ScaleKernel(CudaContext& ctx, const KernelSpec& spec)
      : ctx_(ctx),
        factor_(static_cast<float>(spec.attrs->get_float("factor"))),
        shift_(static_cast<float>(spec.attrs->get_float("shift"))) {}

  void forward(const KernelArgs& args) override {
    multiply(args.inputs[0].data<float>(), args.outputs[0], shift_);
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined()) multiply(args.grad_outputs[0].data<float>(), args.grad_inputs[0], 0.f);
  }

 private:
  void multiply(const float* x, const Tensor& y, float shift) const {
    const cudaStream_t stream = ctx_.stream().get();
    if (y.nbytes() == 0) return;
    if (shift == 0.f) TANDEM_CUDA_CHECK(cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), stream));
    else fill(y.data<float>(), shift, y.numel(), stream);
    accumulate(y.data<float>(), x, factor_, y.numel(), stream);
  }

  CudaContext& ctx_;
  float factor_, shift_;
};

}  // namespace

std::unique_ptr<Kernel> make_scale_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ScaleKernel>(ctx, spec);
}

std::unique_ptr<Kernel> make_add_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinaryOp::add>>(ctx, spec);
}
std::unique_ptr<Kernel> make_mul_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinaryOp::mul>>(ctx, spec);
}
std::unique_ptr<Kernel> make_expand_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<BinaryKernel<BinaryOp::expand>>(ctx, spec);
}

}  // namespace tandem::cuda
