#include "backends/cpu/ops/linear_backward.h"

#include <optional>

namespace tandem::cpu {

using dnnl::memory;

LinearBackwardMatmuls::LinearBackwardMatmuls(CpuContext& ctx, const std::string& key, int64_t m, int64_t n, int64_t k,
                                             memory::data_type operands)
    : ctx_(&ctx) {
  dnnl::engine& eng = ctx.engine();
  const auto f32 = memory::data_type::f32;
  memory::desc dy_md({m, n}, operands, memory::format_tag::ab);
  memory::desc w_md({n, k}, operands, memory::format_tag::ab);
  memory::desc dx_md({m, k}, f32, memory::format_tag::ab);
  memory::desc dyt_md({n, m}, operands, memory::format_tag::ba);
  memory::desc x_md({m, k}, operands, memory::format_tag::ab);
  memory::desc dw_md({n, k}, f32, memory::format_tag::ab);
  std::optional<ScopedMaxThreads> one_thread;
  if (m * n * k <= kSingleThreadMaxFlops) one_thread.emplace(1);
  dnnl::matmul::primitive_desc data_pd(dnnl::matmul::desc(dy_md, w_md, dx_md), user_scratchpad_attr(), eng);
  data_ = DnnlCall(ctx.cached_primitive(key + "#bwd_data", [&] { return dnnl::matmul(data_pd); }));
  data_dy_ = data_.bind(DNNL_ARG_SRC, dy_md, eng);
  data_w_ = data_.bind(DNNL_ARG_WEIGHTS, w_md, eng);
  data_dx_ = data_.bind(DNNL_ARG_DST, dx_md, eng);
  dnnl::post_ops accumulate;
  accumulate.append_sum(1.f);
  dnnl::primitive_attr attr = user_scratchpad_attr();
  attr.set_post_ops(accumulate);
  dnnl::matmul::primitive_desc weights_pd(dnnl::matmul::desc(dyt_md, x_md, dw_md), attr, eng);
  weights_ = DnnlCall(ctx.cached_primitive(key + "#bwd_weights", [&] { return dnnl::matmul(weights_pd); }));
  weights_dy_ = weights_.bind(DNNL_ARG_SRC, dyt_md, eng);
  weights_x_ = weights_.bind(DNNL_ARG_WEIGHTS, x_md, eng);
  weights_dw_ = weights_.bind(DNNL_ARG_DST, dw_md, eng);
}

void LinearBackwardMatmuls::data(const void* dy, const void* w, float* dx) {
  data_.set(data_dy_, dy);
  data_.set(data_w_, w);
  data_.set(data_dx_, dx);
  data_.run(*ctx_);
}

void LinearBackwardMatmuls::weights(const void* dy, const void* x, float* dw) {
  weights_.set(weights_dy_, dy);
  weights_.set(weights_x_, x);
  weights_.set(weights_dw_, dw);
  weights_.run(*ctx_);
}

void linear_bias_backward(const float* dy, float* db, int64_t m, int64_t n) {
  parallel_for(n, m, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < m; ++i) {
      const float* row = dy + i * n;
#pragma omp simd
      for (int64_t j = begin; j < end; ++j) db[j] += row[j];
    }
  });
}

}  // namespace tandem::cpu
