// batch_norm2d on a GPU: x [N, C, H, W] -> y, each channel normalised, torch.nn.BatchNorm2d,
// through cuDNN's spatial batch normalization. Parameters in the schema's order: weight,
// bias [C] (affine), then the buffers running_mean, running_var [C], num_batches_tracked
// [] int64 (track_running_stats), all in device memory.
//
// Training forward (or always without running statistics): the batch's statistics;
// cuDNN keeps the batch's mean and inverse deviation for backward in the kernel's buffers
// and updates the running ones as torch does (unbiased variance), with factor momentum, or
// 1 / num_batches_tracked when momentum is null: that value is read back from the device,
// a wait for the stream that only the cumulative average costs. num_batches_tracked is
// counted by a kernel (kernels/batch_norm.cu).
// Eval forward with running statistics: cuDNN's inference form on the buffers.
//
// Backward, with the statistics forward used (as on the CPU):
//   batch's:   cuDNN's backward; dx assigned, dweight and dbias accumulated (beta 1)
//   running:   kernels/batch_norm.cu (cuDNN's backward assumes batch statistics)
#include <optional>

#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_limits.h"
#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/kernels/batch_norm.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(CudaContext& ctx, const KernelSpec& spec, const Shape& x)
      : ctx_(ctx), x_(x[0], x[1], x[2], x[3]), stats_(1, x[1], 1, 1) {
    const Attributes& a = *spec.attrs;
    affine_ = a.get_bool("affine");
    tracks_ = a.get_bool("track_running_stats");
    TANDEM_ASSERT(spec.params.size() == (affine_ ? 2u : 0u) + (tracks_ ? 3u : 0u),
                  "batch_norm2d: wrong parameter count");
    eps_ = a.get_float("eps");
    if (!a.is_null("momentum")) momentum_ = a.get_float("momentum");
    shape_ = {x[0], x[1], x[2] * x[3], static_cast<float>(eps_)};
    // The batch's mean and inverse deviation, and (without affine) unit scale and zero shift.
    saved_ = Tensor::empty({4, shape_.c}, DType::float32, ctx.allocator());
    if (!affine_) {
      fill(unit(), 1.f, shape_.c, ctx.stream().get());
      fill(unit() + shape_.c, 0.f, shape_.c, ctx.stream().get());
    }
  }

  void forward(const KernelArgs& args) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = ctx_.cudnn().get();
    const void* x = args.inputs[0].raw_data();
    void* y = args.outputs[0].raw_data();
    if (!args.training && tracks_) {
      TANDEM_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(), x, x_.get(), y, stats_.get(), scale(args.params),
          shift(args.params), running(args.params, 0), running(args.params, 1), eps_));
      return;
    }
    const int64_t per_channel = shape_.n * shape_.hw;
    if (args.training && per_channel < 2)
      throw UserError("batch_norm2d: training needs more than one value per channel; the input " +
                      shape_str(args.inputs[0].shape()) + " has " + std::to_string(per_channel));
    const bool update = args.training && tracks_;
    double factor = 0;
    if (update) {
      int64_t* tracked = args.params[buffer_index() + 2].data<int64_t>();
      if (momentum_) {
        factor = *momentum_;
      } else {
        int64_t before = 0;
        copy_to_host(&before, tracked, sizeof before, ctx_.stream().get());
        factor = 1.0 / static_cast<double>(before + 1);
      }
      count_batch(tracked, ctx_.stream().get());
    }
    TANDEM_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(), x, x_.get(), y, stats_.get(), scale(args.params),
        shift(args.params), factor, update ? running(args.params, 0) : nullptr,
        update ? running(args.params, 1) : nullptr, eps_, saved_mean(), saved_inv_std()));
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    auto defined = [](const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; };
    float* dx = defined(args.grad_inputs[0]);
    float* dw = affine_ ? defined(args.grad_params[0]) : nullptr;
    float* db = affine_ ? defined(args.grad_params[1]) : nullptr;
    if (!dx && !dw && !db) return;
    if (!args.training && tracks_) {
      batch_norm_fixed_backward(shape_, args.inputs[0].data<float>(), args.grad_outputs[0].data<float>(),
                                affine_ ? args.params[0].data<float>() : nullptr,
                                static_cast<const float*>(running(args.params, 0)),
                                static_cast<const float*>(running(args.params, 1)), dx, dw, db, ctx_.stream().get());
      return;
    }
    // cuDNN writes dx, dscale and dbias always: scratch for the ones not wanted.
    if (!dx || !dw || !db) {
      if (!scratch_.defined())
        scratch_ = Tensor::empty({args.inputs[0].numel() + 2 * shape_.c}, DType::float32, ctx_.allocator());
      float* s = scratch_.data<float>();
      if (!dw) dw = s;
      if (!db) db = s + shape_.c;
      if (!dx) dx = s + 2 * shape_.c;
    }
    const float one = 1.f, zero = 0.f;
    TANDEM_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        ctx_.cudnn().get(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one, x_.get(), args.inputs[0].raw_data(),
        x_.get(), args.grad_outputs[0].raw_data(), x_.get(), dx, stats_.get(), scale(args.params), dw, db, eps_,
        saved_mean(), saved_inv_std()));
  }

 private:
  size_t buffer_index() const { return affine_ ? 2 : 0; }
  float* saved_mean() const { return saved_.data<float>(); }
  float* saved_inv_std() const { return saved_.data<float>() + shape_.c; }
  float* unit() const { return saved_.data<float>() + 2 * shape_.c; }
  const void* scale(std::span<const Tensor> p) const { return affine_ ? p[0].raw_data() : unit(); }
  const void* shift(std::span<const Tensor> p) const { return affine_ ? p[1].raw_data() : unit() + shape_.c; }
  void* running(std::span<const Tensor> p, size_t which) const { return p[buffer_index() + which].raw_data(); }

  CudaContext& ctx_;
  TensorDescriptor x_, stats_;
  BatchNormShape shape_;
  bool affine_ = true, tracks_ = true;
  double eps_ = 1e-5;
  std::optional<double> momentum_;  // nullopt: cumulative average
  Tensor saved_;    // [4, C]: the last training forward's mean and inverse deviation; unit scale, zero shift
  Tensor scratch_;  // backward's outputs that are not wanted
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm2d_kernel(CudaContext& ctx, const KernelSpec& spec) {
  const Shape& x = spec.inputs.at(0).shape;
  TANDEM_ASSERT(x.size() == 4, "batch_norm2d: input must be [N, C, H, W]");
  if (std::string why = batch_norm2d_limit(spec); !why.empty()) throw Unsupported(why);
  return std::make_unique<BatchNormKernel>(ctx, spec, x);
}

}  // namespace tandem::cuda
