// embedding, embedding_bag and index_select on a GPU (kernels/embedding.cu), with the
// CPU's attributes and checks (backends/cpu/ops/embedding.cpp).
//
// Bad indices and offsets are found by the kernels themselves (they read nothing out of
// bounds and record the first bad position); forward then waits for its stream and reads
// those positions back, so that a bad index is a UserError naming it, as on the CPU,
// rather than a silently wrong row. That wait costs one round trip to the host per
// forward call.
//
// Backward accumulates into dweight with atomicAdd (rows repeat across a batch).
// scale_grad_by_freq is not implemented here (backward throws; the cpu has it).
#include "backends/op_args.h"
#include "backends/cuda/copies.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/kernels/embedding.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

/// The two "first bad position" slots the kernels write, and their copy on the host.
class BadInputSlots {
 public:
  explicit BadInputSlots(CudaContext& ctx)
      : device_(Tensor::empty({2}, DType::int64, ctx.allocator())), host_(PinnedPool::shared().acquire(16)) {}

  unsigned long long* device() const { return static_cast<unsigned long long*>(device_.raw_data()); }

  void reset(cudaStream_t stream) const { TANDEM_CUDA_CHECK(cudaMemsetAsync(device(), 0xff, 16, stream)); }

  /// Waits for `stream`, then returns the two slots.
  std::pair<unsigned long long, unsigned long long> read(cudaStream_t stream) const {
    copy_to_host_async(host_.data(), device(), 16, stream);
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto* slots = static_cast<const unsigned long long*>(host_.data());
    return {slots[0], slots[1]};
  }

 private:
  Tensor device_;
  PinnedBuffer host_;
};

/// The int64 at `ptr[position]` in device memory (an error path: it waits).
int64_t read_index(const int64_t* ptr, unsigned long long position, cudaStream_t stream) {
  int64_t value = 0;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(&value, ptr + position, sizeof value, cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return value;
}

[[noreturn]] void throw_bad_index(const char* op, const int64_t* idx, unsigned long long position, int64_t num,
                                  cudaStream_t stream) {
  throw UserError(std::string(op) + ": index " + std::to_string(read_index(idx, position, stream)) + " at position " +
                  std::to_string(position) + " is out of range [0, " + std::to_string(num) + ")");
}

class EmbeddingKernel final : public Kernel {
 public:
  EmbeddingKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), bad_(ctx) {
    shape_.num = spec.params.at(0).shape.at(0);
    shape_.dim = spec.params.at(0).shape.at(1);
    shape_.count = shape_numel(spec.inputs.at(0).shape);
    shape_.padding_idx = read_padding_idx(*spec.attrs, shape_.num);
    scale_grad_by_freq_ = spec.attrs->has("scale_grad_by_freq") && spec.attrs->get_bool("scale_grad_by_freq");
  }

  void forward(const KernelArgs& args) override {
    const cudaStream_t stream = ctx_.stream().get();
    const int64_t* idx = args.inputs[0].data<int64_t>();
    bad_.reset(stream);
    embedding_forward(shape_, idx, args.params[0].data<float>(), args.outputs[0].data<float>(), bad_.device(),
                      stream);
    const auto [bad_index, unused] = bad_.read(stream);
    if (bad_index != kNoBadInput) throw_bad_index("embedding", idx, bad_index, shape_.num, stream);
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (scale_grad_by_freq_) throw UserError("embedding: scale_grad_by_freq is not implemented on CUDA GPUs; place the table on the cpu (--place NAME=cpu)");
    if (!args.grad_params[0].defined()) return;
    embedding_backward(shape_, args.inputs[0].data<int64_t>(), args.grad_outputs[0].data<float>(),
                       args.grad_params[0].data<float>(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  EmbeddingShape shape_;
  bool scale_grad_by_freq_ = false;
  BadInputSlots bad_;
};

class EmbeddingBagKernel final : public Kernel {
 public:
  EmbeddingBagKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), bad_(ctx) {
    const Attributes& attrs = *spec.attrs;
    shape_.num = spec.params.at(0).shape.at(0);
    shape_.dim = spec.params.at(0).shape.at(1);
    const std::string& mode = attrs.get_string("mode");
    if (mode == "sum") shape_.mode = BagMode::sum;
    else if (mode == "mean") shape_.mode = BagMode::mean;
    else if (mode == "max") shape_.mode = BagMode::max;
    else throw UserError("embedding_bag: mode '" + mode + "' is not one of sum, mean, max");
    shape_.padding_idx = read_padding_idx(attrs, shape_.num);
    const bool include_last_offset = attrs.get_bool("include_last_offset");
    scale_grad_by_freq_ = attrs.has("scale_grad_by_freq") && attrs.get_bool("scale_grad_by_freq");
    const Shape& in = spec.inputs.at(0).shape;
    shape_.bags = spec.outputs.at(0).shape.at(0);
    if (spec.inputs.size() == 1) {
      if (in.size() != 2)
        throw UserError("embedding_bag: indices of shape " + shape_str(in) + " need offsets (or shape [B, L])");
      shape_.bag_len = in[1];
      shape_.count = in[0] * in[1];
    } else {
      if (in.size() != 1) throw UserError("embedding_bag: with offsets, indices must be 1-D, got " + shape_str(in));
      shape_.count = in[0];
      shape_.num_offsets = spec.inputs[1].shape.at(0);
      TANDEM_ASSERT(shape_.bags == (include_last_offset ? std::max<int64_t>(shape_.num_offsets - 1, 0)
                                                        : shape_.num_offsets),
                    "embedding_bag: output batch does not match offsets");
    }
  }

  void forward(const KernelArgs& args) override {
    const cudaStream_t stream = ctx_.stream().get();
    const int64_t* idx = args.inputs[0].data<int64_t>();
    const int64_t* offsets = args.inputs.size() > 1 ? args.inputs[1].data<int64_t>() : nullptr;
    bad_.reset(stream);
    embedding_bag_forward(shape_, idx, offsets, args.params[0].data<float>(), args.outputs[0].data<float>(),
                          bad_.device(), stream);
    const auto [bad_index, bad_offset] = bad_.read(stream);
    if (bad_index != kNoBadInput) throw_bad_index("embedding_bag", idx, bad_index, shape_.num, stream);
    if (bad_offset != kNoBadInput) throw_bad_offset(offsets, bad_offset, stream);
  }

  bool backward_reads_output() const override { return false; }  // max mode finds its arg-max again

  void backward(const BackwardArgs& args) override {
    if (scale_grad_by_freq_) throw UserError("embedding_bag: scale_grad_by_freq is not implemented on CUDA GPUs; place the table on the cpu (--place NAME=cpu)");
    if (!args.grad_params[0].defined()) return;
    const int64_t* offsets = args.inputs.size() > 1 ? args.inputs[1].data<int64_t>() : nullptr;
    embedding_bag_backward(shape_, args.inputs[0].data<int64_t>(), offsets, args.params[0].data<float>(),
                           args.grad_outputs[0].data<float>(), args.grad_params[0].data<float>(), ctx_.stream().get());
  }

 private:
  /// The CPU's messages for a bad offset.
  [[noreturn]] void throw_bad_offset(const int64_t* offsets, unsigned long long position, cudaStream_t stream) const {
    const int64_t value = read_index(offsets, position, stream);
    if (position == 0) throw UserError("embedding_bag: offsets[0] is " + std::to_string(value) + ", must be 0");
    const int64_t previous = read_index(offsets, position - 1, stream);
    throw UserError("embedding_bag: offsets[" + std::to_string(position) + "] is " + std::to_string(value) +
                    ", must be in [" + std::to_string(previous) + ", " + std::to_string(shape_.count) +
                    "] (offsets are non-decreasing and at most the number of indices)");
  }

  CudaContext& ctx_;
  BagShape shape_;
  bool scale_grad_by_freq_ = false;
  BadInputSlots bad_;
};

class IndexSelectKernel final : public Kernel {
 public:
  IndexSelectKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx), bad_(ctx) {
    const Shape& source = spec.inputs.at(0).shape;
    const int64_t rank = static_cast<int64_t>(source.size());
    int64_t dim = spec.attrs->get_int("dim");
    if (dim < 0) dim += rank;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < dim) shape_.outer *= source[static_cast<size_t>(d)];
      if (d > dim) shape_.inner *= source[static_cast<size_t>(d)];
    }
    shape_.size = source[static_cast<size_t>(dim)];
    shape_.count = shape_numel(spec.inputs.at(1).shape);
  }

  void forward(const KernelArgs& args) override {
    const cudaStream_t stream = ctx_.stream().get();
    const int64_t* idx = args.inputs[1].data<int64_t>();
    bad_.reset(stream);
    index_select_forward(shape_, idx, args.inputs[0].data<float>(), args.outputs[0].data<float>(), bad_.device(),
                         stream);
    const auto [bad_index, unused] = bad_.read(stream);
    if (bad_index != kNoBadInput) throw_bad_index("index_select", idx, bad_index, shape_.size, stream);
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    index_select_backward(shape_, args.inputs[1].data<int64_t>(), args.grad_outputs[0].data<float>(),
                          args.grad_inputs[0].data<float>(), ctx_.stream().get());
  }

 private:
  CudaContext& ctx_;
  IndexSelectShape shape_;
  BadInputSlots bad_;
};

}  // namespace

std::unique_ptr<Kernel> make_index_select_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<IndexSelectKernel>(ctx, spec);
}

std::unique_ptr<Kernel> make_embedding_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<EmbeddingKernel>(ctx, spec);
}
std::unique_ptr<Kernel> make_embedding_bag_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<EmbeddingBagKernel>(ctx, spec);
}

}  // namespace tandem::cuda
