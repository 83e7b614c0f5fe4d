// matmul: torch.matmul for inputs of rank >= 1, on the promoted, rank-equalised shapes of
// backends/matmul_plan.h: the kernel computes [batch..., M, N] straight into the spec's
// output.
//
// Tiny problems run a plain loop; others a oneDNN matmul (single-threaded when small) on rank-equalised
// descriptors (size-1 batch dims broadcast). Should oneDNN refuse a shape (more than
// DNNL_MAX_NDIMS dims), the loop runs instead.
//
// Backward, on the promoted, rank-equalised shapes a [Ba..., M, K], b [Bb..., K, N],
// dy [B..., M, N] (the promotion changes no memory layout, so a 1-D input's gradient is
// written in place of its promoted form):
//   da = sum over the batch dims a broadcast of dy @ b^T   (assigned)
//   db = sum over the batch dims b broadcast of a^T @ dy   (assigned)
// It needs both inputs. On the oneDNN path the transposes are strided memory
// descriptors; an operand that was broadcast gets its product in a kernel-owned scratch
// [B..., M, K] (or [B..., K, N]) that a loop then sums into the gradient, except the
// common "batch @ matrix" case (b has no batch dims, a all of them), where db is one
// matmul with the batch folded into M: db = a^T [K, B*M] @ dy [B*M, N].
//
// In bf16 (precision: bf16 on a CPU with avx512_bf16) the oneDNN path casts a, b and dy to
// bf16 copies the kernel owns and writes y, da and db in fp32, accumulating in fp32; the
// loop (tiny problems) stays fp32.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/ops/bf16_cast.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/matmul_plan.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

using dnnl::memory;

memory::dims plain_strides(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

class MatmulKernel final : public Kernel {
 public:
  MatmulKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    MatmulPlan p = plan_matmul(spec.inputs.at(0).shape, spec.inputs.at(1).shape);
    TANDEM_ASSERT(shape_numel(p.out) == shape_numel(spec.outputs.at(0).shape), "matmul: output size mismatch");
    m_ = p.m;
    n_ = p.n;
    k_ = p.k;
    batch_dims_ = std::move(p.batch_dims);
    batch_stride_a_ = std::move(p.batch_stride_a);
    batch_stride_b_ = std::move(p.batch_stride_b);
    batches_ = p.batches;
    a_broadcast_ = p.a_broadcast;
    b_broadcast_ = p.b_broadcast;
    const Shape &a = p.a, &b = p.b, &out = p.out;
    if (!cpu::runs_as_fp32_loop(batches_ * m_ * n_ * k_, k_)) {
      bf16_ = cpu::kernel_precision(spec).precision == Precision::bf16;
      if (bf16_) {
        a16_ = cpu::Bf16Cast(ctx_.engine(), shape_numel(a));
        b16_ = cpu::Bf16Cast(ctx_.engine(), shape_numel(b));
        dy16_ = cpu::Bf16Cast(ctx_.engine(), shape_numel(out));
      }
      make_primitive(spec, a, b, out);
      if (call_.valid()) make_backward_primitives(spec, a, b, out);
    }
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[1].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    float* da = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* db = args.grad_inputs[1].defined() ? args.grad_inputs[1].data<float>() : nullptr;
    if (!bwd_a_.valid() || !bwd_b_.valid()) return backward_loop(a, b, dy, da, db);
    // the primitives read bf16 copies in bf16 (the pointers below are then theirs)
    const void* dy_in = bf16_ ? dy16_.cast(dy) : static_cast<const void*>(dy);
    const void* a_in = bf16_ && db ? a16_.cast(a) : static_cast<const void*>(a);
    const void* b_in = bf16_ && da ? b16_.cast(b) : static_cast<const void*>(b);
    if (da) {
      bwd_a_.set(bwd_a_dy_, dy_in);
      bwd_a_.set(bwd_a_b_, b_in);
      bwd_a_.set(bwd_a_dst_, a_broadcast_ ? scratch_a_.data() : da);
      bwd_a_.run(ctx_);
      if (a_broadcast_) reduce_batches(scratch_a_.data(), da, m_ * k_, batch_stride_a_);
    }
    if (db) {
      bwd_b_.set(bwd_b_a_, a_in);
      bwd_b_.set(bwd_b_dy_, dy_in);
      bwd_b_.set(bwd_b_dst_, scratch_b_.empty() ? db : scratch_b_.data());
      bwd_b_.run(ctx_);
      if (!scratch_b_.empty()) reduce_batches(scratch_b_.data(), db, k_ * n_, batch_stride_b_);
    }
  }

  void forward(const KernelArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[1].data<float>();
    float* y = args.outputs[0].data<float>();
    if (call_.valid()) {
      call_.set(src_, bf16_ ? a16_.cast(a) : static_cast<const void*>(a));
      call_.set(weights_, bf16_ ? b16_.cast(b) : static_cast<const void*>(b));
      call_.set(dst_, y);
      call_.run(ctx_);
      return;
    }
    const int64_t m = m_, n = n_, k = k_;
    cpu::parallel_for(batches_ * m, n * k, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        int64_t batch = row / m, i = row % m;
        int64_t oa = 0, ob = 0, rest = batch;
        for (size_t d = batch_dims_.size(); d-- > 0;) {
          int64_t coord = rest % batch_dims_[d];
          rest /= batch_dims_[d];
          oa += coord * batch_stride_a_[d];
          ob += coord * batch_stride_b_[d];
        }
        const float* ar = a + oa + i * k;
        const float* bm = b + ob;
        float* yr = y + row * n;
        std::fill(yr, yr + n, 0.f);
        for (int64_t kk = 0; kk < k; ++kk) {
          const float av = ar[kk];
          const float* br = bm + kk * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) yr[j] += av * br[j];
        }
      }
    });
  }

 private:
  /// Offsets into a and b of output batch `batch`.
  void batch_offsets(int64_t batch, int64_t& oa, int64_t& ob) const {
    oa = 0, ob = 0;
    for (size_t d = batch_dims_.size(); d-- > 0;) {
      int64_t coord = batch % batch_dims_[d];
      batch /= batch_dims_[d];
      oa += coord * batch_stride_a_[d];
      ob += coord * batch_stride_b_[d];
    }
  }

  /// grad = sum of the per-output-batch matrices `per_batch` [batches, size] that map to
  /// each of grad's batches (`strides`: its batch strides, 0 where broadcast). Threads
  /// split the matrix elements, so no two write one.
  void reduce_batches(const float* per_batch, float* grad, int64_t size, const std::vector<int64_t>& strides) const {
    const int64_t batches = batches_;
    const std::vector<int64_t>& dims = batch_dims_;
    int64_t grad_numel = 1;  // size times the extents grad keeps
    for (size_t d = 0; d < dims.size(); ++d) grad_numel *= strides[d] == 0 ? 1 : dims[d];
    std::fill(grad, grad + grad_numel * size, 0.f);
    cpu::parallel_for(size, batches, [&](int64_t begin, int64_t end) {
      for (int64_t bi = 0; bi < batches; ++bi) {
        int64_t off = 0, rest = bi;
        for (size_t d = dims.size(); d-- > 0;) {
          off += (rest % dims[d]) * strides[d];
          rest /= dims[d];
        }
        const float* src = per_batch + bi * size;
        float* dst = grad + off;
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
      }
    });
  }

  /// Tiny problems (and shapes oneDNN refuses): zero the gradients, then accumulate.
  void backward_loop(const float* a, const float* b, const float* dy, float* da, float* db) const {
    const int64_t m = m_, n = n_, k = k_;
    int64_t a_numel = m * k, b_numel = k * n;
    for (size_t d = 0; d < batch_dims_.size(); ++d) {
      a_numel *= batch_stride_a_[d] == 0 ? 1 : batch_dims_[d];
      b_numel *= batch_stride_b_[d] == 0 ? 1 : batch_dims_[d];
    }
    if (da) std::fill(da, da + a_numel, 0.f);
    if (db) std::fill(db, db + b_numel, 0.f);
    for (int64_t batch = 0; batch < batches_; ++batch) {
      int64_t oa = 0, ob = 0;
      batch_offsets(batch, oa, ob);
      for (int64_t i = 0; i < m; ++i) {
        const float* g = dy + (batch * m + i) * n;
        for (int64_t kk = 0; kk < k; ++kk) {
          const float* br = b + ob + kk * n;
          if (da) {
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int64_t j = 0; j < n; ++j) acc += g[j] * br[j];
            da[oa + i * k + kk] += acc;
          }
          if (db) {
            const float av = a[oa + i * k + kk];
            float* dbr = db + ob + kk * n;
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) dbr[j] += av * g[j];
          }
        }
      }
    }
  }

  /// da = dy @ b^T and db = a^T @ dy as oneDNN matmuls (see the file comment).
  void make_backward_primitives(const KernelSpec& spec, const Shape& a, const Shape& b, const Shape& out) {
    const size_t rank = out.size();
    auto transposed = [](const Shape& s) {  // dims and strides of s with its last two dims swapped
      memory::dims dims(s.begin(), s.end()), strides = plain_strides(dims);
      std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
      std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
      return std::pair{dims, strides};
    };
    auto with_last = [&](int64_t rows, int64_t cols) {
      memory::dims d(out.begin(), out.end());
      d[rank - 2] = rows;
      d[rank - 1] = cols;
      return d;
    };
    const auto f32 = memory::data_type::f32;
    const auto low = bf16_ ? memory::data_type::bf16 : f32;  // what the products read
    memory::dims od(out.begin(), out.end()), ad(a.begin(), a.end());
    memory::desc dy_md(od, low, plain_strides(od));
    auto [bt_dims, bt_strides] = transposed(b);
    memory::desc bt_md(bt_dims, low, bt_strides);
    memory::dims da_dims = with_last(m_, k_);
    memory::desc da_md(da_dims, f32, plain_strides(da_dims));
    // db: folded (a^T [K, B*M] @ dy [B*M, N]) when b has no batch and a is not broadcast.
    bool b_has_batch = false;
    for (size_t i = 0; i + 2 < rank; ++i) b_has_batch = b_has_batch || b[i] != 1;
    const bool fold = !b_has_batch && !a_broadcast_;
    memory::desc at_md, dyb_md, db_md;
    if (fold) {
      const int64_t rows = batches_ * m_;
      at_md = memory::desc({k_, rows}, low, memory::dims{1, k_});
      dyb_md = memory::desc({rows, n_}, low, memory::format_tag::ab);
      db_md = memory::desc({k_, n_}, f32, memory::format_tag::ab);
    } else {
      auto [at_dims, at_strides] = transposed(a);
      at_md = memory::desc(at_dims, low, at_strides);
      dyb_md = dy_md;
      memory::dims db_dims = with_last(k_, n_);
      db_md = memory::desc(db_dims, f32, plain_strides(db_dims));
    }
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (batches_ * m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::engine& eng = ctx_.engine();
    const std::string key = cpu::spec_key(spec);
    try {
      dnnl::matmul::primitive_desc a_pd(dnnl::matmul::desc(dy_md, bt_md, da_md), user_scratchpad_attr(), eng);
      dnnl::matmul::primitive_desc b_pd(dnnl::matmul::desc(at_md, dyb_md, db_md), user_scratchpad_attr(), eng);
      bwd_a_ = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd_a", [&] { return dnnl::matmul(a_pd); }));
      bwd_b_ = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd_b", [&] { return dnnl::matmul(b_pd); }));
    } catch (const dnnl::error&) {
      bwd_a_ = bwd_b_ = cpu::DnnlCall();  // unsupported by oneDNN: the loop runs
      return;
    }
    bwd_a_dy_ = bwd_a_.bind(DNNL_ARG_SRC, dy_md, eng);
    bwd_a_b_ = bwd_a_.bind(DNNL_ARG_WEIGHTS, bt_md, eng);
    bwd_a_dst_ = bwd_a_.bind(DNNL_ARG_DST, da_md, eng);
    bwd_b_a_ = bwd_b_.bind(DNNL_ARG_SRC, at_md, eng);
    bwd_b_dy_ = bwd_b_.bind(DNNL_ARG_WEIGHTS, dyb_md, eng);
    bwd_b_dst_ = bwd_b_.bind(DNNL_ARG_DST, db_md, eng);
    if (a_broadcast_) scratch_a_.resize(static_cast<size_t>(batches_ * m_ * k_));
    if (b_broadcast_ && !fold) scratch_b_.resize(static_cast<size_t>(batches_ * k_ * n_));
  }

  void make_primitive(const KernelSpec& spec, const Shape& a, const Shape& b, const Shape& out) {
    if (out.size() > DNNL_MAX_NDIMS) return;
    memory::dims ad(a.begin(), a.end()), bd(b.begin(), b.end()), od(out.begin(), out.end());
    const auto in_type = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc a_md(ad, in_type, plain_strides(ad));
    memory::desc b_md(bd, in_type, plain_strides(bd));
    memory::desc o_md(od, memory::data_type::f32, plain_strides(od));
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (batches_ * m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, o_md), user_scratchpad_attr(), ctx_.engine());
      call_ = cpu::DnnlCall(ctx_.cached_primitive(cpu::spec_key(spec), [&] { return dnnl::matmul(pd); }));
    } catch (const dnnl::error&) {
      return;  // unsupported by oneDNN: the loop runs
    }
    src_ = call_.bind(DNNL_ARG_SRC, a_md, ctx_.engine());
    weights_ = call_.bind(DNNL_ARG_WEIGHTS, b_md, ctx_.engine());
    dst_ = call_.bind(DNNL_ARG_DST, o_md, ctx_.engine());
  }

  CpuContext& ctx_;
  int64_t m_ = 0, n_ = 0, k_ = 0, batches_ = 1;
  std::vector<int64_t> batch_dims_, batch_stride_a_, batch_stride_b_;
  cpu::DnnlCall call_;
  size_t src_ = 0, weights_ = 0, dst_ = 0;
  bool a_broadcast_ = false, b_broadcast_ = false;  // some batch dim of the input is 1 where the output's is not
  cpu::DnnlCall bwd_a_, bwd_b_;
  size_t bwd_a_dy_ = 0, bwd_a_b_ = 0, bwd_a_dst_ = 0, bwd_b_a_ = 0, bwd_b_dy_ = 0, bwd_b_dst_ = 0;
  std::vector<float> scratch_a_, scratch_b_;  // per-batch products of a broadcast input's gradient
  bool bf16_ = false;                         // the oneDNN path reads bf16 copies
  cpu::Bf16Cast a16_, b16_, dy16_;
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<MatmulKernel>(ctx, spec);
}

}  // namespace tandem
