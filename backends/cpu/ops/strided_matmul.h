// StridedMatmul: one oneDNN matmul C (+)= scale * A B (+ bias) over views with arbitrary
// strides, batched over leading dimensions. Attention reads the heads of a projected
// [rows, E] tensor and transposed operands through strides, so no head is copied out:
// the view is the descriptor. Built (and cached) at compile time; run() only sets pointers.
// A and B are fp32 or, for a bf16 layer, both bf16 (the caller's copies); C and the bias
// are fp32 either way, the products accumulated in fp32.
#pragma once

#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/cpu_context.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

/// A dense view: sizes and element strides, outermost first; the last two dims are the matrix.
struct MatView {
  dnnl::memory::dims dims;
  dnnl::memory::dims strides;
};

class StridedMatmul {
 public:
  StridedMatmul() = default;
  /// `accumulate`: C += ...; `bias`: a row vector of C's last dimension added to each row;
  /// `operands`: A's and B's data type, f32 or bf16.
  StridedMatmul(CpuContext& ctx, const MatView& a, const MatView& b, const MatView& c, float scale = 1.f,
                bool accumulate = false, bool bias = false,
                dnnl::memory::data_type operands = dnnl::memory::data_type::f32)
      : ctx_(&ctx) {
    const auto f32 = dnnl::memory::data_type::f32;
    dnnl::memory::desc a_md(a.dims, operands, a.strides), b_md(b.dims, operands, b.strides), c_md(c.dims, f32, c.strides);
    dnnl::memory::dims bias_dims(c.dims.size(), 1);
    bias_dims.back() = c.dims.back();
    dnnl::memory::dims bias_strides(c.dims.size(), c.dims.back());
    bias_strides.back() = 1;
    dnnl::memory::desc bias_md(bias_dims, f32, bias_strides);
    std::string key = "strided_matmul:" + view_str(a) + view_str(b) + view_str(c) + std::to_string(scale) +
                      (accumulate ? "+=" : "=") + (bias ? "b" : "") + (operands == f32 ? "" : "bf16");
    dnnl::primitive prim = ctx.cached_primitive(key, [&] {
      dnnl::primitive_attr attr = user_scratchpad_attr();
      if (scale != 1.f) attr.set_output_scales(0, {scale});
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.f);
        attr.set_post_ops(ops);
      }
      auto desc = bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
      return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, ctx.engine()));
    });
    call_ = DnnlCall(prim);
    a_ = call_.bind(DNNL_ARG_SRC, a_md, ctx.engine());
    b_ = call_.bind(DNNL_ARG_WEIGHTS, b_md, ctx.engine());
    c_ = call_.bind(DNNL_ARG_DST, c_md, ctx.engine());
    if (bias) bias_ = call_.bind(DNNL_ARG_BIAS, bias_md, ctx.engine());
    has_bias_ = bias;
  }

  /// `a` and `b` of the operands' type.
  void run(const void* a, const void* b, float* c, const float* bias = nullptr) {
    call_.set(a_, a);
    call_.set(b_, b);
    call_.set(c_, c);
    if (has_bias_) call_.set(bias_, bias);
    call_.run(*ctx_);
  }

 private:
  static std::string view_str(const MatView& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.dims.size(); ++i)
      s += std::to_string(v.dims[i]) + ":" + std::to_string(v.strides[i]) + (i + 1 < v.dims.size() ? "," : "]");
    return s;
  }

  CpuContext* ctx_ = nullptr;
  DnnlCall call_;
  size_t a_ = 0, b_ = 0, c_ = 0, bias_ = 0;
  bool has_bias_ = false;
};

}  // namespace tandem::cpu
