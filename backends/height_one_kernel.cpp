#include "backends/height_one_kernel.h"

#include <vector>

#include "core/error.h"
#include "graph/ops/height_one.h"

namespace tandem {
namespace {

/// Views of `tensors` in the 2-D op's shapes (`shape_of(i, t)`); an undefined tensor (no
/// gradient wanted) stays undefined.
template <class ShapeOf>
std::vector<Tensor> views(std::span<const Tensor> tensors, ShapeOf shape_of) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    out.push_back(tensors[i].defined() ? tensors[i].view(shape_of(i, tensors[i].shape())) : Tensor());
  return out;
}

class HeightOneKernel final : public Kernel {
 public:
  HeightOneKernel(const KernelSpec& spec, const TwoDKernelFactory& make_2d)
      : op_(spec.op), attrs_(two_d_attributes(*spec.attrs)), inner_(make_2d(two_d_spec(spec, attrs_))) {}

  void forward(const KernelArgs& args) override {
    std::vector<Tensor> inputs = data(args.inputs), params = parameters(args.params);
    std::vector<Tensor> outputs = data(args.outputs);
    KernelArgs two_d = args;
    two_d.inputs = inputs;
    two_d.params = params;
    two_d.outputs = outputs;
    said_of_the_layer([&] { inner_->forward(two_d); });
  }

  void backward(const BackwardArgs& args) override {
    std::vector<Tensor> inputs = data(args.inputs), params = parameters(args.params), outputs = data(args.outputs);
    std::vector<Tensor> grad_outputs = data(args.grad_outputs), grad_inputs = data(args.grad_inputs);
    std::vector<Tensor> grad_params = parameters(args.grad_params);
    BackwardArgs two_d = args;
    two_d.inputs = inputs;
    two_d.params = params;
    two_d.outputs = outputs;
    two_d.grad_outputs = grad_outputs;
    two_d.grad_inputs = grad_inputs;
    two_d.grad_params = grad_params;
    said_of_the_layer([&] { inner_->backward(two_d); });
  }

  bool backward_reads_input(size_t index) const override { return inner_->backward_reads_input(index); }
  bool backward_reads_output() const override { return inner_->backward_reads_output(); }
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }

 private:
  /// Runs `call` on the inner kernel; a UserError it raises about the 2-D op is raised about
  /// the 1-D one: "batch_norm2d: ..." as "batch_norm1d (run as batch_norm2d over a height of
  /// 1): ...".
  template <class Call>
  void said_of_the_layer(Call&& call) const {
    try {
      call();
    } catch (const UserError& e) {
      std::string message = e.what();
      const std::string two_d = two_d_op(op_);
      if (message.rfind(two_d, 0) == 0)
        message.replace(0, two_d.size(), op_ + " (run as " + two_d + " over a height of 1)");
      throw UserError(message);
    }
  }

  std::vector<Tensor> data(std::span<const Tensor> t) const {
    return views(t, [&](size_t, const Shape& s) { return two_d_shape(op_, s); });
  }
  std::vector<Tensor> parameters(std::span<const Tensor> t) const {
    return views(t, [&](size_t i, const Shape& s) { return two_d_param_shape(op_, i, s); });
  }

  std::string op_;
  Attributes attrs_;  // the inner kernel's spec points at these
  std::unique_ptr<Kernel> inner_;
};

}  // namespace

KernelSpec two_d_spec(const KernelSpec& spec, const Attributes& attrs) {
  KernelSpec s = spec;
  s.op = two_d_op(spec.op);
  TANDEM_ASSERT(!s.op.empty(), "two_d_spec: " + spec.op + " is not a 1-D op");
  s.attrs = &attrs;
  for (TensorDesc& d : s.inputs) d.shape = two_d_shape(spec.op, d.shape);
  for (TensorDesc& d : s.outputs) d.shape = two_d_shape(spec.op, d.shape);
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i].shape = two_d_param_shape(spec.op, i, s.params[i].shape);
  return s;
}

std::unique_ptr<Kernel> make_height_one_kernel(const KernelSpec& spec, const TwoDKernelFactory& make_2d) {
  return std::make_unique<HeightOneKernel>(spec, make_2d);
}

}  // namespace tandem
