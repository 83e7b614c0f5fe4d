// dropout: [*] -> [*]. Inference (args.training = false): a copy. Training: each
// element kept with probability 1-p and scaled by 1/(1-p), the mask drawn from
// dropout_keep(args.seed, element index) (dropout_mask.h): deterministic per seed.
// p = 1 gives zeros, p = 0 a copy, as torch.
//
// Backward, dy [*] -> dx [*] (assigned): training: dx = dy * keep * 1/(1-p), the mask
// rebuilt from args.seed (the forward call's) exactly as forward drew it, so forward
// stores nothing; inference: dx = dy.
#include <cstring>

#include "backends/cpu/ops/dropout_mask.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelSpec& spec) {
    double p = spec.attrs->get_float("p");
    if (!(p >= 0.0 && p <= 1.0)) throw UserError("dropout: p " + std::to_string(p) + " is not in [0, 1]");
    p_ = static_cast<float>(p);
    n_ = shape_numel(spec.inputs.at(0).shape);
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    if (!args.training || p_ == 0.f) {
      if (x != y) {
        cpu::parallel_for(n_, 1, [&](int64_t begin, int64_t end) {
          std::memcpy(y + begin, x + begin, sizeof(float) * (end - begin));
        });
      }
      return;
    }
    if (p_ == 1.f) {
      std::memset(y, 0, sizeof(float) * n_);
      return;
    }
    const float p = p_, scale = 1.f / (1.f - p_);
    const uint64_t seed = args.seed;
    cpu::parallel_for(n_, 8, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i)
        y[i] = cpu::dropout_keep(seed, static_cast<uint64_t>(i), p) ? x[i] * scale : 0.f;
    });
  }

  // the mask is rebuilt from the seed
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* g = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    if (!args.training || p_ == 0.f) {
      if (g != dx) {
        cpu::parallel_for(n_, 1, [&](int64_t begin, int64_t end) {
          std::memcpy(dx + begin, g + begin, sizeof(float) * (end - begin));
        });
      }
      return;
    }
    if (p_ == 1.f) {
      std::memset(dx, 0, sizeof(float) * n_);
      return;
    }
    const float p = p_, scale = 1.f / (1.f - p_);
    const uint64_t seed = args.seed;
    cpu::parallel_for(n_, 8, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i)
        dx[i] = cpu::dropout_keep(seed, static_cast<uint64_t>(i), p) ? g[i] * scale : 0.f;
    });
  }

 private:
  float p_ = 0.5f;
  int64_t n_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_dropout_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<DropoutKernel>(spec);
}

}  // namespace tandem
