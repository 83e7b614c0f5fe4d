// ComputeOps: what a device computes with when its computing is done by the host's cores
// (the cpu; a simulated GPU, which borrows the cpu's). Every call runs at once, on the
// calling thread. Host-lane backends (host_backend.h) run these calls on their lanes (the
// cpu alone's lane is the calling thread itself); the runtime reaches them only through a
// backend. A backend that computes on a device of
// its own (CUDA) does not use this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/kernel.h"
#include "backends/loss_value.h"
#include "backends/region_spec.h"
#include "backends/update_scalars.h"
#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem {

/// A kernel for a spec, or why there is none (kernel null, `unsupported` says why): the
/// runtime runs the layer on another device, or tells the user.
struct KernelChoice {
  std::unique_ptr<Kernel> kernel;
  std::string unsupported;
};

/// Not thread-safe unless said: one caller at a time, as a Kernel.
class ComputeOps {
 public:
  virtual ~ComputeOps() = default;

  /// The kernel for `spec`. Bad attributes or shapes throw UserError; an op or a dtype the
  /// ops lack is `unsupported`.
  virtual KernelChoice make_kernel(const KernelSpec& spec) = 0;
  /// (optional) The precision make_kernel's kernel for `spec` runs its matrix work in, and
  /// why when not the one asked for (Backend::runs_in). Pure. Default: the asked one.
  virtual PrecisionChoice runs_in(const KernelSpec& spec) const { return {spec.precision, {}}; }
  /// (optional) Whether make_region_kernel can take the layer of `spec` into a region
  /// (backends/region_spec.h). Pure. Default: none.
  virtual bool fusable(const KernelSpec& spec) const { return false; }
  /// (optional) One kernel for the whole region, or null where these ops would not gain
  /// from it: the runtime then runs the layers one by one. UserError as make_kernel.
  virtual std::unique_ptr<Kernel> make_region_kernel(const RegionSpec& region) { return nullptr; }
  /// How much one-off preparation its kernels did so far (the cpu: oneDNN primitives
  /// built): a repeated forward must not raise it. Thread-safe.
  virtual int64_t preparations() const = 0;

  /// Every element of `t` (any dtype) set to zero.
  virtual void zero(const Tensor& t) = 0;
  /// into += from, elementwise; float32 tensors of one size (a gradient accumulated).
  virtual void accumulate(const Tensor& into, const Tensor& from) = 0;
  /// t *= factor, elementwise (float32); a factor of 0 writes zeros (no 0 * inf = NaN), as
  /// a replica's share of a loss that counted nothing.
  virtual void scale(const Tensor& t, float factor) = 0;
  /// The loss of `input` against `target`; with a defined `grad_input` (input's shape),
  /// also writes dLoss/dInput into it (assigned). UserError for a class index outside
  /// [0, C) that is not ignore_index.
  virtual LossValue loss(const LossSpec& spec, const Tensor& input, const Tensor& target, const Tensor& grad_input) = 0;

  /// The optimizers' updates of a parameter held here (torch's formulas and bits,
  /// backends/optimizer_update.h): SGD (`buf` undefined without momentum; `first`: it holds
  /// no history yet) and Adam(W) (`m`, `v`: exp_avg, exp_avg_sq). float32, one shape.
  virtual void sgd_update(const optim_detail::SgdScalars& s, const Tensor& p, const Tensor& g, const Tensor& buf,
                          bool first) = 0;
  virtual void adam_update(const optim_detail::AdamScalars& s, const Tensor& p, const Tensor& g, const Tensor& m,
                           const Tensor& v) = 0;
  /// The sum of the squares of `t`'s elements in double, as clip_grad_norm adds them.
  virtual double sum_of_squares(const Tensor& t) = 0;
};

}  // namespace tandem
