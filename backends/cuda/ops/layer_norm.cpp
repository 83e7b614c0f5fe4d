// layer_norm on a GPU (kernels/layer_norm.cu): x [*, normalized_shape] -> same; weight,
// bias of normalized_shape when elementwise_affine (bias only when bias=true). The checks
// and the row view are the CPU's (backends/cpu/ops/layer_norm.cpp). Backward recomputes
// mean and rstd from x into a kernel-owned scratch, so forward keeps nothing.
#include "backends/op_args.h"
#include "backends/cuda/kernels/layer_norm.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Attributes& attrs = *spec.attrs;
    const Shape& shape = spec.inputs.at(0).shape;
    std::vector<int64_t> normalized = attrs.get_ints("normalized_shape");
    if (normalized.size() > shape.size())
      throw UserError("layer_norm: normalized_shape has more dims than the input " + shape_str(shape));
    const size_t lead = shape.size() - normalized.size();
    for (size_t i = 0; i < normalized.size(); ++i)
      if (shape[lead + i] != normalized[i])
        throw UserError("layer_norm: input " + shape_str(shape) + " does not end with normalized_shape " +
                        shape_str(normalized));
    affine_ = attrs.get_bool("elementwise_affine");
    bias_ = affine_ && attrs.get_bool("bias");
    TANDEM_ASSERT(spec.params.size() == (affine_ ? (bias_ ? 2u : 1u) : 0u), "layer_norm: wrong parameter count");
    shape_.rows = dims_product(shape, 0, lead);
    shape_.cols = dims_product(shape, lead, shape.size());
    shape_.eps = static_cast<float>(attrs.get_float("eps"));
  }

  void forward(const KernelArgs& args) override {
    const float* w = affine_ ? args.params[0].data<float>() : nullptr;
    const float* b = bias_ ? args.params[1].data<float>() : nullptr;
    layer_norm_forward(shape_, args.inputs[0].data<float>(), w, b, args.outputs[0].data<float>(),
                       ctx_.stream().get());
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!scratch_.defined()) {
      const size_t floats = layer_norm_backward_scratch(shape_);
      scratch_ = Tensor::empty({static_cast<int64_t>(floats)}, DType::float32, ctx_.allocator());
    }
    auto grad = [](const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    float* dw = affine_ ? grad(args.grad_params[0]) : nullptr;
    float* db = bias_ ? grad(args.grad_params[1]) : nullptr;
    layer_norm_backward(shape_, args.inputs[0].data<float>(), affine_ ? args.params[0].data<float>() : nullptr,
                        args.grad_outputs[0].data<float>(), grad(args.grad_inputs[0]), dw, db,
                        scratch_.data<float>(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  LayerNormShape shape_;
  bool affine_ = true, bias_ = true;
  Tensor scratch_;  // backward's row statistics and partial sums, made on first use
};

}  // namespace

std::unique_ptr<Kernel> make_layer_norm_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<LayerNormKernel>(ctx, spec);
}

}  // namespace tandem::cuda
