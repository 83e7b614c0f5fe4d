#include "backends/cuda/loss.h"

#include <memory>

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/loss.cuh"

namespace tandem::cuda {

LossValue compute_loss(CudaContext& ctx, const LossSpec& spec, const Tensor& input, const Tensor& target,
                       Tensor* grad_input) {
  const cudaStream_t stream = ctx.stream().get();
  float* grad = grad_input && grad_input->defined() ? grad_input->data<float>() : nullptr;
  const bool classification = spec.op == "cross_entropy" || spec.op == "nll_loss";
  if (!classification && spec.op != "mse_loss" && spec.op != "binary_cross_entropy_with_logits")
    throw UserError("loss '" + spec.op + "' has no CUDA implementation");
  const int64_t n = classification ? input.size(0) : input.numel();
  ClassLossShape shape;
  size_t scratch_doubles = 0;
  if (classification) {
    shape.n = n;
    shape.c = input.size(1);
    shape.logits = spec.op == "cross_entropy";
    shape.mean = spec.reduction == "mean";
    shape.ignore_index = spec.ignore_index;
    shape.label_smoothing = spec.label_smoothing;
    TANDEM_ASSERT(target.numel() == n, "a class target holds one index per input row");
    scratch_doubles = class_loss_scratch(shape);
  } else {
    scratch_doubles = point_loss_scratch(n);
  }
  const size_t result_doubles = (sizeof(LossResult) + sizeof(double) - 1) / sizeof(double);
  // Freed on return, after the read-back below has waited for the kernels.
  std::shared_ptr<Storage> scratch = ctx.allocator().allocate((scratch_doubles + result_doubles) * sizeof(double));
  double* scratch_data = static_cast<double*>(scratch->data());
  auto* result = reinterpret_cast<LossResult*>(scratch_data + scratch_doubles);
  if (classification)
    class_loss(shape, input.data<float>(), target.data<int64_t>(), grad, scratch_data, result, stream);
  else
    point_loss(spec.op == "mse_loss" ? PointLoss::mse : PointLoss::bce_with_logits, spec.reduction == "mean", n,
               input.data<float>(), target.data<float>(), grad, scratch_data, result, stream);
  LossResult host;
  copy_to_host(&host, result, sizeof host, stream);
  if (host.bad_target != kNoBadTarget) {
    int64_t value = 0;
    copy_to_host(&value, target.data<int64_t>() + host.bad_target, sizeof value, stream);
    throw UserError(spec.op + ": target " + std::to_string(value) + " of sample " + std::to_string(host.bad_target) +
                    " is outside the classes [0, " + std::to_string(shape.c) + ")");
  }
  LossValue out;
  out.loss = host.loss;
  out.counted = static_cast<int64_t>(host.counted);
  out.correct = static_cast<int64_t>(host.correct);
  return out;
}

}  // namespace tandem::cuda
