// matmul: torch.matmul for inputs of rank >= 1. A 1-D a [K] is promoted to [1, K] and a
// 1-D b [K] to [K, 1]; the promoted dim is then removed from the result, which leaves
// the memory layout unchanged, so the kernel computes [batch..., M, N] straight into the
// spec's output. Batch dims broadcast (numpy rules).
//
// Tiny problems run a plain loop; others a oneDNN matmul (single-threaded when small) on rank-equalised
// descriptors (size-1 batch dims broadcast). Should oneDNN refuse a shape (more than
// DNNL_MAX_NDIMS dims), the loop runs instead.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

using dnnl::memory;

constexpr int64_t kMatmulLoopMaxFlops = 2048;

memory::dims plain_strides(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

class MatmulKernel final : public Kernel {
 public:
  MatmulKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    Shape a = spec.inputs.at(0).shape, b = spec.inputs.at(1).shape;
    if (a.empty() || b.empty()) throw UserError("matmul: both inputs must have rank >= 1");
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    if (b[b.size() - 2] != k_)
      throw UserError("matmul: inner dims differ: " + shape_str(spec.inputs[0].shape) + " @ " +
                      shape_str(spec.inputs[1].shape));
    // Equalise ranks and broadcast the batch dims.
    size_t rank = std::max(a.size(), b.size());
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    Shape out(rank);
    for (size_t i = 0; i + 2 < rank; ++i) {
      if (a[i] != b[i] && a[i] != 1 && b[i] != 1)
        throw UserError("matmul: batch dims of " + shape_str(spec.inputs[0].shape) + " and " +
                        shape_str(spec.inputs[1].shape) + " do not broadcast");
      out[i] = std::max(a[i], b[i]);
    }
    out[rank - 2] = m_;
    out[rank - 1] = n_;
    TANDEM_ASSERT(shape_numel(out) == shape_numel(spec.outputs.at(0).shape), "matmul: output size mismatch");
    // Per batch dim: its extent and the element strides of a and b (0 where broadcast).
    int64_t sa = m_ * k_, sb = k_ * n_;
    for (size_t i = rank - 2; i-- > 0;) {
      batch_dims_.insert(batch_dims_.begin(), out[i]);
      batch_stride_a_.insert(batch_stride_a_.begin(), a[i] == 1 ? 0 : sa);
      batch_stride_b_.insert(batch_stride_b_.begin(), b[i] == 1 ? 0 : sb);
      sa *= a[i];
      sb *= b[i];
    }
    batches_ = cpu::dims_product(out, 0, rank - 2);
    if (batches_ * m_ * n_ * k_ > kMatmulLoopMaxFlops && k_ > 0) make_primitive(spec, a, b, out);
  }

  void forward(const KernelArgs& args) override {
    const float* a = args.inputs[0].data<float>();
    const float* b = args.inputs[1].data<float>();
    float* y = args.outputs[0].data<float>();
    if (call_.valid()) {
      call_.set(src_, a);
      call_.set(weights_, b);
      call_.set(dst_, y);
      call_.run(ctx_.stream());
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
  void make_primitive(const KernelSpec& spec, const Shape& a, const Shape& b, const Shape& out) {
    if (out.size() > DNNL_MAX_NDIMS) return;
    memory::dims ad(a.begin(), a.end()), bd(b.begin(), b.end()), od(out.begin(), out.end());
    memory::desc a_md(ad, memory::data_type::f32, plain_strides(ad));
    memory::desc b_md(bd, memory::data_type::f32, plain_strides(bd));
    memory::desc o_md(od, memory::data_type::f32, plain_strides(od));
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (batches_ * m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, o_md), ctx_.engine());
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
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<MatmulKernel>(ctx, spec);
}

}  // namespace tandem
