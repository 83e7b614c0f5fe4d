#include "backends/cpu/cpu_compute_ops.h"

#include <cstring>

#include "backends/cpu/cpu_context.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/loss.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/optimizer_update.h"

namespace tandem::cpu {
namespace {

class CpuComputeOps final : public ComputeOps {
 public:
  KernelChoice make_kernel(const KernelSpec& spec) override {
    CpuKernelFactory factory = find_cpu_kernel(spec.op);
    if (!factory) return {nullptr, "the cpu backend has no kernel for op '" + spec.op + "'"};
    if (spec.precision != Precision::fp32 && cpu_precision(spec.precision) != Precision::fp32 &&
        !cpu_has_bf16_kernel(spec.op))
      note_runs_fp32(spec.op, spec.precision);
    return {factory(context_, spec), {}};
  }

  PrecisionChoice runs_in(const KernelSpec& spec) const override { return kernel_precision(spec); }

  bool fusable(const KernelSpec& spec) const override { return cpu_region_fusable(spec); }

  std::unique_ptr<Kernel> make_region_kernel(const RegionSpec& region) override {
    return tandem::make_region_kernel(context_, region);
  }

  int64_t preparations() const override { return context_.primitives_created(); }

  void zero(const Tensor& t) override {
    if (t.nbytes() > 0) std::memset(t.raw_data(), 0, t.nbytes());
  }

  void accumulate(const Tensor& into, const Tensor& from) override { add_into(into, from); }

  void scale(const Tensor& t, float factor) override {
    float* g = t.data<float>();
    parallel_for(t.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) g[i] = factor == 0.0f ? 0.0f : g[i] * factor;
    });
  }

  LossValue loss(const LossSpec& spec, const Tensor& input, const Tensor& target, const Tensor& grad_input) override {
    Tensor grad = grad_input;
    return compute_loss(spec, input, target, grad.defined() ? &grad : nullptr);
  }

  void sgd_update(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                  bool first) override {
    sgd_update_host(s, p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(), first,
                    HostThreads::team);
  }

  void adam_update(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) override {
    adam_update_host(s, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(),
                     HostThreads::team);
  }

  double sum_of_squares(const Tensor& t) override { return sum_of_squares_host(t.data<float>(), t.numel(), HostThreads::team); }

 private:
  CpuContext context_;
};

}  // namespace

std::unique_ptr<ComputeOps> make_compute_ops() { return std::make_unique<CpuComputeOps>(); }

}  // namespace tandem::cpu
