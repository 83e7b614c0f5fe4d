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
#include <algorithm>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/gemm.h"
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
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[1].data<float>();
    float* y = args.outputs[0].data<float>();
    CublasHandle& h = ctx_.cublas();
    const int64_t mn = m_ * n_;
    if (!entries_.empty()) {
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.m = m_, .n = n_, .k = k_, .a = a + entries_[i].a, .b = b + entries_[i].b, .c = y + i * mn});
      return;
    }
    if (kind_b_ == BatchKind::none && kind_a_ == BatchKind::full) {  // fold the batch into M
      gemm(h, {.m = batches_ * m_, .n = n_, .k = k_, .a = a, .b = b, .c = y});
      return;
    }
    gemm_strided_batched(h, {.m = m_, .n = n_, .k = k_, .a = a, .b = b, .c = y},
                         {.batch = batches_, .a = stride(kind_a_, m_ * k_), .b = stride(kind_b_, k_ * n_), .c = mn});
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[1].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    float* da = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* db = args.grad_inputs[1].defined() ? args.grad_inputs[1].data<float>() : nullptr;
    const cudaStream_t stream = ctx_.stream().get();
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
          gemm(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = dy + i * mn, .b = b + e.b,
                   .beta = e.first_a ? 0.f : 1.f, .c = da + e.a});
        if (db)
          gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = a + e.a, .b = dy + i * mn,
                   .beta = e.first_b ? 0.f : 1.f, .c = db + e.b});
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
  void backward_a(CublasHandle& h, const float* b, const float* dy, float* da) {
    if (kind_a_ == BatchKind::full && kind_b_ == BatchKind::none) {  // da [B M, K] = dy [B M, N] b^T
      gemm(h, {.trans_b = true, .m = batches_ * m_, .n = k_, .k = n_, .a = dy, .b = b, .c = da});
    } else if (kind_a_ == BatchKind::full) {  // per entry: da_i = dy_i b_i^T
      gemm_strided_batched(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = dy, .b = b, .c = da},
                           {.batch = batches_, .a = m_ * n_, .b = stride(kind_b_, k_ * n_), .c = m_ * k_});
    } else {  // a repeated over the batch: da = sum_i dy_i b_i^T, accumulated entry by entry
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.trans_b = true, .m = m_, .n = k_, .k = n_, .a = dy + i * m_ * n_,
                 .b = b + i * stride(kind_b_, k_ * n_), .beta = i == 0 ? 0.f : 1.f, .c = da});
    }
  }

  /// db with each input's batch dims all or none.
  void backward_b(CublasHandle& h, const float* a, const float* dy, float* db) {
    if (kind_b_ == BatchKind::none && kind_a_ == BatchKind::full) {  // db [K, N] = a^T [K, B M] dy [B M, N]
      gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = batches_ * m_, .a = a, .b = dy, .c = db});
    } else if (kind_b_ == BatchKind::full) {  // per entry: db_i = a_i^T dy_i
      gemm_strided_batched(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = a, .b = dy, .c = db},
                           {.batch = batches_, .a = stride(kind_a_, m_ * k_), .b = m_ * n_, .c = k_ * n_});
    } else {  // b repeated and a too: db = sum_i a^T dy_i = a^T [K, M] (sum_i dy_i), entry by entry
      for (int64_t i = 0; i < batches_; ++i)
        gemm(h, {.trans_a = true, .m = k_, .n = n_, .k = m_, .a = a, .b = dy + i * m_ * n_,
                 .beta = i == 0 ? 0.f : 1.f, .c = db});
    }
  }

  CudaContext& ctx_;
  int64_t m_ = 0, n_ = 0, k_ = 0, batches_ = 1;
  int64_t a_numel_ = 0, b_numel_ = 0;
  BatchKind kind_a_ = BatchKind::none, kind_b_ = BatchKind::none;
  std::vector<Entry> entries_;  // the per-entry path only
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<MatmulKernel>(ctx, spec);
}

}  // namespace tandem::cuda
