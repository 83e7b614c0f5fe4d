// A simulated GPU (its memory, lanes and the cpu's kernels) behind a Backend whose every
// call a test may override, to stand in for a real GPU's backend in a registry: one that
// refuses an op, one with host memory of its own (pinned memory, for CUDA).
#pragma once

#include <memory>
#include <utility>

#include "backends/cpu/cpu_compute_ops.h"
#include "backends/sim/sim_gpu.h"
#include "core/memory_size.h"
#include "runtime/devices/device_registry.h"

namespace tandem::testing {

class SimGpuStandIn : public Backend {
 public:
  explicit SimGpuStandIn(int index) : gpu_(index, 256 * MiB, cpu::make_compute_ops()) {}
  Device device() const override { return gpu_.device(); }
  Allocator& allocator() override { return gpu_.allocator(); }
  Lane& lane(LaneKind kind) override { return gpu_.lane(kind); }
  void copy(Lane& lane, const BufferRef& dst, const BufferRef& src, size_t bytes,
            std::shared_ptr<TaskGroup> group) override {
    gpu_.copy(lane, dst, src, bytes, std::move(group));
  }
  KernelChoice make_kernel(const KernelSpec& spec) override { return gpu_.make_kernel(spec); }
  std::string cannot_run(const KernelSpec& spec) const override { return gpu_.cannot_run(spec); }
  void zero(Lane& lane, const Tensor& t) override { gpu_.zero(lane, t); }
  void accumulate(Lane& lane, const Tensor& into, const Tensor& from) override { gpu_.accumulate(lane, into, from); }
  void scale(Lane& lane, const Tensor& t, float factor) override { gpu_.scale(lane, t, factor); }
  void loss(Lane& lane, const LossSpec& spec, const Tensor& input, const Tensor& target, const Tensor& grad,
            LossValue* result) override {
    gpu_.loss(lane, spec, input, target, grad, result);
  }
  void sgd_update(Lane& lane, const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                  bool first) override {
    gpu_.sgd_update(lane, s, p, g, buf, first);
  }
  void adam_update(Lane& lane, const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) override {
    gpu_.adam_update(lane, s, p, g, m, v);
  }
  void sum_of_squares(Lane& lane, const Tensor& t, double* result) override { gpu_.sum_of_squares(lane, t, result); }
  DeviceCounters counters() const override { return gpu_.counters(); }

 private:
  SimGpu gpu_;
};

/// What the registry is told of a stand-in GPU (as the driver would say of a real one).
inline CudaDeviceInfo fake_gpu(int index) { return {index, "stand-in GPU", 256 * MiB, 256 * MiB, 9, 0}; }

}  // namespace tandem::testing
