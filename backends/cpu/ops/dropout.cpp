// dropout: [*] -> [*]. Inference (args.training = false): a copy. Training: each
// element kept with probability 1-p and scaled by 1/(1-p), the mask drawn from
// dropout_keep(args.seed, element index) (dropout_mask.h): deterministic per seed.
// p = 1 gives zeros, p = 0 a copy, as torch.
//
// stochastic_depth is the same with one draw per sample (mode row: the elements of index
// k along dimension 0 share draw k) or per batch (mode batch: one draw for all), as
// torchvision's, whose noise has the input's first dimension and 1s.
//
// Backward, dy [*] -> dx [*] (assigned): training: dx = dy * keep * 1/(1-p), the mask
// rebuilt from args.seed (the forward call's) exactly as forward drew it, so forward
// stores nothing; inference: dx = dy.
#include <cstring>

#include "backends/cpu/ops/apply_dropout.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/dropout_probability.h"

namespace tandem {
namespace {

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelSpec& spec) {
    p_ = dropout_probability(*spec.attrs);
    n_ = shape_numel(spec.inputs.at(0).shape);
    group_ = dropout_group(spec);
  }

  void forward(const KernelArgs& args) override {
    apply(args.inputs[0].data<float>(), args.outputs[0].data<float>(), args.training, args.seed);
  }

  // the mask is rebuilt from the seed
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  // dX = dY * mask / (1 - p): the forward's own masking, applied to the gradient.
  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    apply(args.grad_outputs[0].data<float>(), args.grad_inputs[0].data<float>(), args.training, args.seed);
  }

 private:
  // out = in * mask * 1/(1-p) in training (the mask a function of seed and index), else a copy.
  void apply(const float* in, float* out, bool training, uint64_t seed) const {
    if (!training || p_ == 0.f) {
      if (in != out) {
        cpu::parallel_for(n_, 1, [&](int64_t begin, int64_t end) {
          std::memcpy(out + begin, in + begin, sizeof(float) * (end - begin));
        });
      }
      return;
    }
    cpu::apply_dropout(in, out, n_, seed, p_, group_);
  }

  float p_ = 0.5f;
  int64_t n_ = 0;
  int64_t group_ = 1;  // elements that share a draw
};

}  // namespace

std::unique_ptr<Kernel> make_dropout_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<DropoutKernel>(spec);
}

}  // namespace tandem
