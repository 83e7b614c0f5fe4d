// matmul on a GPU: torch.matmul for inputs of rank >= 1, on the CPU's promoted shapes
// (backends/matmul_plan.h); cuBLAS in fp32.
//
// Forward, a [Ba..., M, K] @ b [Bb..., K, N] -> y [B..., M, N]:
//   - b without batch dims, a with all of them: one GEMM with the batch folded into M;
//   - each input either with all the batch dims or none: one strided batched GEMM
//     (stride 0 repeats the input without them);
//   - any other broadcast: one GEMM per batch entry.
// Backward (assigned), summed over the batch dims an input was broadcast along:
//   da = dy @ b^T,  db = a^T @ dy
// on the same three paths; the last accumulates a broadcast input's blocks with beta 1
// after the first GEMM that writes each of them.
//
// In bf16 or fp16 (the layer's precision, as linear.cpp): every GEMM reads 16-bit copies of
// a, b and dy on tensor cores, accumulating in fp32 and writing y, da and db in fp32.
#include <algorithm>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/mixed_precision.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/matmul_plan.h"

namespace tandem::cuda {
namespace {

/// How the batch dims of one input relate to the output's.
enum class BatchKind { none, full, partial };  // no batch extent > 1; all of the output's; some

class MatmulKernel final : public Kernel {
 public:
  MatmulKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const MatmulPlan p = plan_matmul(spec.inputs.at(0).shape, spec.inputs.at(1).shape);
    TANDEM_ASSERT(shape_numel(p.out) == shape_numel(spec.outputs.at(0).shape), "matmul: output size mismatch");
    m_ = p.m;
    n_ = p.n;
    k_ = p.k;
    batches_ = p.batches;
    a_numel_ = shape_numel(p.a);
    b_numel_ = shape_numel(p.b);
    kind_a_ = batch_kind(p.a, p.a_broadcast);
    kind_b_ = batch_kind(p.b, p.b_broadcast);
    const MatmulPrecision precision = matmul_precision_of(spec.precision, ctx);
    if (precision != MatmulPrecision::f32) {
      half_ = precision == MatmulPrecision::bf16 ? HalfType::bf16 : HalfType::f16;
      types_ = {precision == MatmulPrecision::bf16 ? GemmType::bf16 : GemmType::f16, GemmType::f32};
      in_size_ = 2;
      // 16-bit copies of a, b and dy
      halves_ = ctx.allocator().allocate(std::max<size_t>(static_cast<size_t>(a_numel_ + b_numel_ + batches_ * m_ * n_), 1) * 2);
    }
    const std::vector<int64_t>& dims = p.batch_dims;
    const std::vector<int64_t>& stride_a = p.batch_stride_a;
    const std::vector<int64_t>& stride_b = p.batch_stride_b;
    if (kind_a_ == BatchKind::partial || kind_b_ == BatchKind::partial) {
      // The per-entry path: each batch entry's offsets, and whether it is the first to write its block.
      std::vector<bool> seen_a(static_cast<size_t>(a_numel_ / std::max<int64_t>(m_ * k_, 1)) + 1),
          seen_b(static_cast<size_t>(b_numel_ / std::max<int64_t>(k_ * n_, 1)) + 1);
      for (int64_t batch = 0; batch < batches_; ++batch) {
        Entry e;
        for (int64_t d = static_cast<int64_t>(dims.size()) - 1, rest = batch; d >= 0; --d) {
          const int64_t coord = rest % dims[d];
          rest /= dims[d];
          e.a += coord * stride_a[d];
          e.b += coord * stride_b[d];
        }
        const size_t block_a = static_cast<size_t>(e.a / std::max<int64_t>(m_ * k_, 1));
        const size_t block_b = static_cast<size_t>(e.b / std::max<int64_t>(k_ * n_, 1));
        e.first_a = !seen_a[block_a];
        e.first_b = !seen_b[block_b];
        seen_a[block_a] = seen_b[block_b] = true;
        entries_.push_back(e);
      }
    }
  }

  void forward(const KernelArgs& args) override {
    const void* a = input(args.inputs[0], a_half(), a_numel_);
    const void* b = input(args.inputs[1], b_half(), b_numel_);
    float* y = args.outputs[0].data<float>();
    CublasHandle& h = ctx_.cublas();
    const int64_t mn = m_ * n_;
    if (!entries_.empty()) {
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.m = m_, .n = n_, .k = k_, .a = at(a, entries_[i].a), .b = at(b, entries_[i].b), .c = y + i * mn,
                 .types = types_});
      return;
    }
    if (kind_b_ == BatchKind::none && kind_a_ == BatchKind::full) {  // fold the batch into M
      gemm(h, {.m = batches_ * m_, .n = n_, .k = k_, .a = a, .b = b, .c = y, .types = types_});
      return;
    }
    gemm_strided_batched(h, {.m = m_, .n = n_, .k = k_, .a = a, .b = b, .c = y, .types = types_},
                         {.batch = batches_, .a = stride(kind_a_, m_ * k_), .b = stride(kind_b_, k_ * n_), .c = mn});
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    float* da = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* db = args.grad_inputs[1].defined() ? args.grad_inputs[1].data<float>() : nullptr;
    // in 16 bits, only what a product reads is cast
    const void* a = db ? input(args.inputs[0], a_half(), a_numel_) : nullptr;
    const void* b = da ? input(args.inputs[1], b_half(), b_numel_) : nullptr;
    const void* dy = input(args.grad_outputs[0], dy_half(), batches_ * m_ * n_);
    const cudaStream_t stream = ctx_.stream().get();
    if (a_numel_ == 0) da = nullptr;  // nothing to write (a dim of 0)
    if (b_numel_ == 0) db = nullptr;
    if (batches_ == 0) {  // empty sums: zeros
      if (da && a_numel_ > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(da, 0, sizeof(float) * a_numel_, stream));
      if (db && b_numel_ > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * b_numel_, stream));
      return;
    }
    CublasHandle& h = ctx_.cublas();
    const int64_t mn = m_ * n_;
    if (!entries_.empty()) {
      for (int64_t i = 0; i < batches_; ++i) {
        const Entry& e = entries_[i];
        // da_block [M, K] (+)= dy_i [M, N] b_i^T [N, K];  db_block [K, N] (+)= a_i^T [K, M] dy_i [M, N]
        if (da)
          gemm(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = at(dy, i * mn), .b = at(b, e.b),
                   .beta = e.first_a ? 0.f : 1.f, .c = da + e.a, .types = types_});
        if (db)
          gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = at(a, e.a), .b = at(dy, i * mn),
                   .beta = e.first_b ? 0.f : 1.f, .c = db + e.b, .types = types_});
      }
      return;
    }
    if (da) backward_a(h, b, dy, da);
    if (db) backward_b(h, a, dy, db);
  }

 private:
  struct Entry {
    int64_t a = 0, b = 0;  // element offsets of the entry's matrices
    bool first_a = false, first_b = false;
  };

  static int64_t stride(BatchKind kind, int64_t matrix) { return kind == BatchKind::full ? matrix : 0; }

  /// An input of promoted shape `s` (two matrix dims last), `broadcast` along some batch dim.
  static BatchKind batch_kind(const Shape& s, bool broadcast) {
    const bool any = std::any_of(s.begin(), s.end() - 2, [](int64_t d) { return d != 1; });
    return !any ? BatchKind::none : (broadcast ? BatchKind::partial : BatchKind::full);
  }

  /// da with each input's batch dims all or none.
  void backward_a(CublasHandle& h, const void* b, const void* dy, float* da) {
    if (kind_a_ == BatchKind::full && kind_b_ == BatchKind::none) {  // da [B M, K] = dy [B M, N] b^T
      gemm(h, {.trans_b = true, .m = batches_ * m_, .n = k_, .k = n_, .a = dy, .b = b, .c = da, .types = types_});
    } else if (kind_a_ == BatchKind::full) {  // per entry: da_i = dy_i b_i^T
      gemm_strided_batched(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = dy, .b = b, .c = da, .types = types_},
                           {.batch = batches_, .a = m_ * n_, .b = stride(kind_b_, k_ * n_), .c = m_ * k_});
    } else {  // a repeated over the batch: da = sum_i dy_i b_i^T, accumulated entry by entry
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = at(dy, i * m_ * n_),
                 .b = at(b, i * stride(kind_b_, k_ * n_)), .beta = i == 0 ? 0.f : 1.f, .c = da, .types = types_});
    }
  }

  /// db with each input's batch dims all or none.
  void backward_b(CublasHandle& h, const void* a, const void* dy, float* db) {
    if (kind_b_ == BatchKind::none && kind_a_ == BatchKind::full) {  // db [K, N] = a^T [K, B M] dy [B M, N]
      gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = batches_ * m_, .a = a, .b = dy, .c = db, .types = types_});
    } else if (kind_b_ == BatchKind::full) {  // per entry: db_i = a_i^T dy_i
      gemm_strided_batched(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = a, .b = dy, .c = db, .types = types_},
                           {.batch = batches_, .a = stride(kind_a_, m_ * k_), .b = m_ * n_, .c = k_ * n_});
    } else {  // b repeated and a too: db = sum_i a^T dy_i = a^T [K, M] (sum_i dy_i), entry by entry
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = a, .b = at(dy, i * m_ * n_),
                 .beta = i == 0 ? 0.f : 1.f, .c = db, .types = types_});
    }
  }

  /// An input as the GEMMs read it: the tensor itself in fp32, else its 16-bit copy in `half`.
  const void* input(const Tensor& t, char* half, int64_t n) {
    if (in_size_ == 4) return t.raw_data();
    cast_to_half(half_, t.data<float>(), half, n, ctx_.stream().get());
    return half;
  }
  /// `base` advanced by `elements` of the GEMMs' input type.
  const void* at(const void* base, int64_t elements) const {
    return static_cast<const char*>(base) + elements * in_size_;
  }
  char* a_half() const { return halves_ ? static_cast<char*>(halves_->data()) : nullptr; }
  char* b_half() const { return halves_ ? a_half() + 2 * a_numel_ : nullptr; }
  char* dy_half() const { return halves_ ? b_half() + 2 * b_numel_ : nullptr; }

  CudaContext& ctx_;
  int64_t m_ = 0, n_ = 0, k_ = 0, batches_ = 1;
  int64_t a_numel_ = 0, b_numel_ = 0;
  BatchKind kind_a_ = BatchKind::none, kind_b_ = BatchKind::none;
  std::vector<Entry> entries_;  // the per-entry path only
  GemmTypes types_{};           // what the GEMMs read (fp32, or bf16 / fp16 copies) and write (fp32)
  HalfType half_ = HalfType::bf16;
  int64_t in_size_ = 4;                // bytes per element of what the GEMMs read
  std::shared_ptr<Storage> halves_;  // 16-bit copies of a, b and dy
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<MatmulKernel>(ctx, spec);
}

}  // namespace tandem::cuda
