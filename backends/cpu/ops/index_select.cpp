// index_select: source [outer, size, inner] (viewed around dim), indices int64 [n] ->
// [outer, n, inner], out[o, i] = source[o, idx[i]]; the indices are checked first, as an
// embedding's (cpu::check_indices). Backward: dsource (assigned) = zeros, then
// dsource[o, idx[i]] += dy[o, i], threads splitting the outer rows (a repeated index adds
// within one thread's rows).
#include <cstring>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

class IndexSelectKernel final : public Kernel {
 public:
  explicit IndexSelectKernel(const KernelSpec& spec) {
    const Shape& source = spec.inputs.at(0).shape;
    const int64_t rank = static_cast<int64_t>(source.size());
    const int64_t dim = spec.attrs->get_int("dim") < 0 ? spec.attrs->get_int("dim") + rank : spec.attrs->get_int("dim");
    for (int64_t d = 0; d < rank; ++d) {
      if (d < dim) outer_ *= source[static_cast<size_t>(d)];
      if (d > dim) inner_ *= source[static_cast<size_t>(d)];
    }
    size_ = source[static_cast<size_t>(dim)];
  }

  void forward(const KernelArgs& args) override {
    const int64_t n = args.inputs[1].numel();
    const int64_t* idx = args.inputs[1].data<int64_t>();
    cpu::check_indices(idx, n, size_, "index_select");
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    const int64_t inner = inner_, size = size_;
    cpu::parallel_for(outer_, n * inner, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        for (int64_t i = 0; i < n; ++i)
          std::memcpy(y + (o * n + i) * inner, x + (o * size + idx[i]) * inner, sizeof(float) * inner);
    });
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const int64_t n = args.inputs[1].numel();
    const int64_t* idx = args.inputs[1].data<int64_t>();
    const float* dy = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    const int64_t inner = inner_, size = size_;
    cpu::parallel_for(outer_, n * inner, [&](int64_t begin, int64_t end) {
      std::memset(dx + begin * size * inner, 0, sizeof(float) * (end - begin) * size * inner);
      for (int64_t o = begin; o < end; ++o)
        for (int64_t i = 0; i < n; ++i) {
          float* to = dx + (o * size + idx[i]) * inner;
          const float* from = dy + (o * n + i) * inner;
#pragma omp simd
          for (int64_t d = 0; d < inner; ++d) to[d] += from[d];
        }
    });
  }

 private:
  int64_t outer_ = 1, size_ = 1, inner_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_index_select_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<IndexSelectKernel>(spec);
}

}  // namespace tandem
