#include "backends/host_backend.h"

#include "backends/trace.h"
#include "core/error.h"

namespace tandem {

ComputeOps& HostBackend::ops() const {
  TANDEM_ASSERT(ops_ != nullptr, device().str() + " was opened without kernels");
  return *ops_;
}

KernelChoice HostBackend::make_kernel(const KernelSpec& spec) {
  KernelChoice choice;
  Lane& compute = lane(LaneKind::compute);
  TraceLabel label(spec.op, "kernel made");
  compute.submit([&] { choice = ops().make_kernel(spec); });
  compute.synchronize();  // rethrows what the factory threw
  return choice;
}

bool HostBackend::fusable(const KernelSpec& spec) const { return ops_ && ops_->fusable(spec); }

std::unique_ptr<Kernel> HostBackend::make_region_kernel(const RegionSpec& region) {
  std::unique_ptr<Kernel> kernel;
  Lane& compute = lane(LaneKind::compute);
  TraceLabel label("region", "kernel made");
  compute.submit([&] { kernel = ops().make_region_kernel(region); });
  compute.synchronize();
  return kernel;
}

int64_t HostBackend::preparations() const { return ops_ ? ops_->preparations() : 0; }

PrecisionChoice HostBackend::runs_in(const KernelSpec& spec) const {
  return ops_ ? ops_->runs_in(spec) : PrecisionChoice{spec.precision, {}};
}

void HostBackend::zero(Lane& lane, const Tensor& t) {
  lane.submit([&ops = ops(), t] { ops.zero(t); });
}

void HostBackend::accumulate(Lane& lane, const Tensor& into, const Tensor& from) {
  lane.submit([&ops = ops(), into, from] { ops.accumulate(into, from); });
}

void HostBackend::scale(Lane& lane, const Tensor& t, float factor) {
  lane.submit([&ops = ops(), t, factor] { ops.scale(t, factor); });
}

void HostBackend::loss(Lane& lane, const LossSpec& spec, const Tensor& input, const Tensor& target,
                       const Tensor& grad_input, LossValue* result) {
  lane.submit([&ops = ops(), spec, input, target, grad_input, result] {
    *result = ops.loss(spec, input, target, grad_input);
  });
}

void HostBackend::sgd_update(Lane& lane, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g,
                             const Tensor& buf, bool first) {
  lane.submit([&ops = ops(), s, p, g, buf, first] { ops.sgd_update(s, p, g, buf, first); });
}

void HostBackend::adam_update(Lane& lane, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g,
                              const Tensor& m, const Tensor& v) {
  lane.submit([&ops = ops(), s, p, g, m, v] { ops.adam_update(s, p, g, m, v); });
}

void HostBackend::sum_of_squares(Lane& lane, const Tensor& t, double* result) {
  lane.submit([&ops = ops(), t, result] { *result = ops.sum_of_squares(t); });
}

}  // namespace tandem
