// sum, mean, amax, amin over `dim` on a GPU (kernels/reduce.cu), in the CPU's geometry
// (backends/reduce_geometry.h) and with its gradients (backends/cpu/ops/reduce.cpp): amax's
// and amin's shared evenly among equal extrema, as torch's.
#include "backends/cuda/kernels/reduce.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/reduce_geometry.h"
#include "graph/ops/reduce.h"

namespace tandem::cuda {
namespace {

ReduceKind kind_of(const std::string& op) {
  if (op == "sum") return ReduceKind::sum;
  if (op == "mean") return ReduceKind::mean;
  if (op == "amax") return ReduceKind::amax;
  return ReduceKind::amin;
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), op_(spec.op) {
    const Shape& x = spec.inputs.at(0).shape;
    const ReduceGeometry g = reduce_geometry(x, reduced_dims(*spec.attrs, static_cast<int64_t>(x.size())));
    shape_.kind = kind_of(spec.op);
    shape_.count = g.count;
    shape_.x_numel = g.x_numel;
    shape_.y_numel = g.y_numel;
    shape_.rank = static_cast<int>(g.sizes.size());
    int64_t x_stride = 1;
    std::vector<int64_t> x_strides(g.sizes.size());
    for (size_t d = g.sizes.size(); d-- > 0;) {
      x_strides[d] = x_stride;
      x_stride *= g.sizes[d];
    }
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      shape_.sizes[d] = g.sizes[d];
      shape_.y_strides[d] = g.y_strides[d];
      const bool reduced = g.y_strides[d] == 0;
      int& n = reduced ? shape_.reduced : shape_.kept;
      if (n == kMaxReduceDims)
        throw Unsupported(spec.op + ": more than " + std::to_string(kMaxReduceDims) + " alternating " +
                          (reduced ? "reduced" : "kept") + " dimensions in " + shape_str(x));
      (reduced ? shape_.reduced_sizes : shape_.kept_sizes)[n] = g.sizes[d];
      (reduced ? shape_.reduced_x_strides : shape_.kept_x_strides)[n] = x_strides[d];
      ++n;
    }
  }

  void forward(const KernelArgs& args) override {
    if (shape_.count == 0 && shape_.y_numel > 0 && picks_extremum())
      throw UserError(op_ + ": the input " + shape_str(args.inputs[0].shape()) +
                      " is empty along a reduced dimension, which has no " +
                      (shape_.kind == ReduceKind::amax ? "maximum" : "minimum") + " (as torch." + op_ + ")");
    reduce_forward(shape_, args.inputs[0].data<float>(), args.outputs[0].data<float>(), ctx_.stream().get());
  }

  bool backward_reads_input(size_t) const override { return picks_extremum(); }
  bool backward_reads_output() const override { return picks_extremum(); }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    if (picks_extremum() && !ties_.defined())
      ties_ = Tensor::empty({std::max<int64_t>(shape_.y_numel, 1)}, DType::float32, ctx_.allocator());
    reduce_backward(shape_, picks_extremum() ? args.inputs[0].data<float>() : nullptr,
                    picks_extremum() ? args.outputs[0].data<float>() : nullptr, args.grad_outputs[0].data<float>(),
                    args.grad_inputs[0].data<float>(), picks_extremum() ? ties_.data<float>() : nullptr,
                    ctx_.stream().get());
  }

 private:
  bool picks_extremum() const { return shape_.kind == ReduceKind::amax || shape_.kind == ReduceKind::amin; }

  CudaContext& ctx_;
  std::string op_;
  ReduceShape shape_;
  Tensor ties_;  // amax's and amin's backward: how many inputs equal each output
};

}  // namespace

std::unique_ptr<Kernel> make_reduce_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ReduceKernel>(ctx, spec);
}

}  // namespace tandem::cuda
