// interpolate (size or scale_factor, mode nearest or bilinear, align_corners): a loop over
// the output with the source taps of backends/interpolate_plan.h, one image (n, c) per
// parallel item. Not oneDNN's resampling: its nearest rounds to the nearest pixel centre
// (torch's 'nearest-exact', not 'nearest'), and its linear has no align_corners.
//
// Shapes: x [N, C, (D,) (H,) W] -> y [N, C, (D',) (H',) W'] (bilinear: [N, C, H, W] only)
// Backward (needs nothing from forward; input gradient assigned): each dy element added
// into the input positions it was read from, with its weights.
#include <algorithm>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/interpolate_plan.h"

namespace tandem {
namespace {

class InterpolateKernel final : public Kernel {
 public:
  explicit InterpolateKernel(const KernelSpec& spec) : plan_(plan_interpolate(spec)) {
    for (int d = 0; d < 3; ++d) taps_[d] = interpolate_taps(plan_, d);
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    // named references, not a structured binding: clang 14 (the sanitizer builds) cannot
    // capture one in a lambda
    const auto &td = taps_[0], &th = taps_[1], &tw = taps_[2];
    const int64_t in_h = plan_.dims[1].in, in_w = plan_.dims[2].in;
    const int64_t in_plane = plan_.dims[0].in * in_h * in_w, out_plane = out_plane_size();
    cpu::parallel_for(plan_.planes, out_plane * 4, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const float* src = x + c * in_plane;
        float* dst = y + c * out_plane;
        for (const InterpolateTap& d : td)
          for (const InterpolateTap& h : th) {
            if (!plan_.bilinear) {
              const float* row = src + (d.i0 * in_h + h.i0) * in_w;
              for (const InterpolateTap& w : tw) *dst++ = row[w.i0];
              continue;
            }
            // torch's order: along w within each of the two rows, then the rows
            const float* r0 = src + h.i0 * in_w;
            const float* r1 = src + h.i1 * in_w;
            for (const InterpolateTap& w : tw)
              *dst++ = (r0[w.i0] * w.w0 + r0[w.i1] * w.w1) * h.w0 + (r1[w.i0] * w.w0 + r1[w.i1] * w.w1) * h.w1;
          }
      }
    });
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* dy = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    // named references, not a structured binding: clang 14 (the sanitizer builds) cannot
    // capture one in a lambda
    const auto &td = taps_[0], &th = taps_[1], &tw = taps_[2];
    const int64_t in_h = plan_.dims[1].in, in_w = plan_.dims[2].in;
    const int64_t in_plane = plan_.dims[0].in * in_h * in_w, out_plane = out_plane_size();
    cpu::parallel_for(plan_.planes, out_plane * 4, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        float* src = dx + c * in_plane;
        const float* g = dy + c * out_plane;
        std::fill(src, src + in_plane, 0.0f);
        for (const InterpolateTap& d : td)
          for (const InterpolateTap& h : th) {
            if (!plan_.bilinear) {
              float* row = src + (d.i0 * in_h + h.i0) * in_w;
              for (const InterpolateTap& w : tw) row[w.i0] += *g++;
              continue;
            }
            float* r0 = src + h.i0 * in_w;
            float* r1 = src + h.i1 * in_w;
            for (const InterpolateTap& w : tw) {
              const float v = *g++;
              r0[w.i0] += v * h.w0 * w.w0;
              r0[w.i1] += v * h.w0 * w.w1;
              r1[w.i0] += v * h.w1 * w.w0;
              r1[w.i1] += v * h.w1 * w.w1;
            }
          }
      }
    });
  }

 private:
  int64_t out_plane_size() const { return plan_.dims[0].out * plan_.dims[1].out * plan_.dims[2].out; }

  const InterpolatePlan plan_;
  std::vector<InterpolateTap> taps_[3];
};

}  // namespace

std::unique_ptr<Kernel> make_interpolate_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<InterpolateKernel>(spec);
}

}  // namespace tandem
