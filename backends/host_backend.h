// HostBackend: what the cpu and the simulated GPUs have in common as Backends: they
// compute with ComputeOps (the cpu's kernels and helpers, handed to them) on host lanes
// (backends/host_lanes.h), so their kernels and helpers are ComputeOps calls queued as
// tasks. Each concrete backend adds its memory, its lanes, its copies and its counters.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/compute_ops.h"

namespace tandem {

class HostBackend : public Backend {
 public:
  /// Made on the compute lane's thread, where its forward and backward will run, and so
  /// with that thread's OpenMP settings. UserError as ComputeOps::make_kernel.
  KernelChoice make_kernel(const KernelSpec& spec) override;
  int64_t preparations() const override;
  bool fusable(const KernelSpec& spec) const override;
  /// Made on the compute lane's thread, as make_kernel.
  std::unique_ptr<Kernel> make_region_kernel(const RegionSpec& region) override;
  PrecisionChoice runs_in(const KernelSpec& spec) const override;

  void zero(Lane& lane, const Tensor& t) override;
  void accumulate(Lane& lane, const Tensor& into, const Tensor& from) override;
  void scale(Lane& lane, const Tensor& t, float factor) override;
  void loss(Lane& lane, const LossSpec& spec, const Tensor& input, const Tensor& target, const Tensor& grad_input,
            LossValue* result) override;
  void sgd_update(Lane& lane, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                  bool first) override;
  void adam_update(Lane& lane, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) override;
  void sum_of_squares(Lane& lane, const Tensor& t, double* result) override;

 protected:
  /// `ops` may be null for a device that only stores and copies (tests of queues and pools):
  /// then asking it to compute is a bug.
  explicit HostBackend(std::unique_ptr<ComputeOps> ops) : ops_(std::move(ops)) {}

 private:
  ComputeOps& ops() const;
  std::unique_ptr<ComputeOps> ops_;
};

}  // namespace tandem
