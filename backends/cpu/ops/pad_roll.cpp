// pad (pad, mode constant, value) and roll (shifts, dims): the shifted copy of
// backends/shift_plan.h, a row of the last shifted dim at a time.
//
// Shapes: pad   x [.., d_k, ..] -> y [.., d_k + before_k + after_k, ..]
//         roll  x [*] -> y [*]
// Backward (needs nothing from forward; input gradient assigned):
//   pad:  dx = dy cropped back (the pad with negated offsets)
//   roll: dx = dy rolled by the negated shifts
#include <cstring>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/shift_plan.h"

namespace tandem {
namespace {

/// Input block index along dim k for output index i, or -1 outside the input.
inline int64_t source_index(const ShiftPlan& p, size_t k, int64_t i) {
  int64_t j = i - p.offsets[k];
  if (p.wraps[k]) {
    j %= p.in_sizes[k];
    return j < 0 ? j + p.in_sizes[k] : j;
  }
  return j >= 0 && j < p.in_sizes[k] ? j : -1;
}

template <typename T>
void shift_copy(const ShiftPlan& p, const void* from, void* to) {
  const T* src = static_cast<const T*>(from);
  T* dst = static_cast<T*>(to);
  T fill{};
  std::memcpy(&fill, &p.fill_bits, sizeof(T));  // little-endian: the low bytes
  const int64_t inner = p.inner;
  const size_t inner_bytes = static_cast<size_t>(inner) * sizeof(T);
  if (p.sizes.empty()) {  // nothing shifts: a plain copy
    if (inner > 0) std::memcpy(dst, src, inner_bytes);
    return;
  }
  const size_t last = p.sizes.size() - 1;
  const int64_t row_len = p.sizes[last], rows = row_len == 0 ? 0 : p.blocks / row_len;
  cpu::parallel_for(rows, row_len * inner, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      // The input row this output row reads: the dims before the last, outermost first
      int64_t rest = row, in_row = 0, in_stride = 1;
      bool outside = false;
      for (size_t k = last; k-- > 0;) {
        const int64_t j = source_index(p, k, rest % p.sizes[k]);
        rest /= p.sizes[k];
        outside |= j < 0;
        in_row += j * in_stride;
        in_stride *= p.in_sizes[k];
      }
      T* y = dst + row * row_len * inner;
      if (outside) {
        std::fill(y, y + row_len * inner, fill);
        continue;
      }
      const T* x = src + in_row * p.in_sizes[last] * inner;
      for (int64_t i = 0; i < row_len; ++i) {
        const int64_t j = source_index(p, last, i);
        if (j < 0) std::fill(y + i * inner, y + (i + 1) * inner, fill);
        else std::memcpy(y + i * inner, x + j * inner, inner_bytes);
      }
    }
  });
}

void shift_copy_any(const ShiftPlan& p, const void* from, void* to) {
  switch (p.elem) {
    case 2: return shift_copy<uint16_t>(p, from, to);
    case 4: return shift_copy<uint32_t>(p, from, to);
    case 8: return shift_copy<uint64_t>(p, from, to);
    default: TANDEM_ASSERT(false, "pad/roll: no copy for elements of " + std::to_string(p.elem) + " bytes");
  }
}

class ShiftKernel final : public Kernel {
 public:
  ShiftKernel(ShiftPlan forward, ShiftPlan backward) : forward_(std::move(forward)), backward_(std::move(backward)) {}

  void forward(const KernelArgs& args) override {
    shift_copy_any(forward_, args.inputs[0].raw_data(), args.outputs[0].raw_data());
  }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }
  void backward(const BackwardArgs& args) override {
    if (args.grad_inputs[0].defined())
      shift_copy_any(backward_, args.grad_outputs[0].raw_data(), args.grad_inputs[0].raw_data());
  }

 private:
  const ShiftPlan forward_, backward_;
};

}  // namespace

std::unique_ptr<Kernel> make_pad_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<ShiftKernel>(plan_pad(spec), plan_pad_backward(spec));
}

std::unique_ptr<Kernel> make_roll_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<ShiftKernel>(plan_roll(spec), plan_roll_backward(spec));
}

}  // namespace tandem
