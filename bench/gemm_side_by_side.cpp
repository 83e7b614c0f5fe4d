// What splitting a linear layer's GEMMs over two replicas costs on this machine's cores,
// before any copy: the three GEMMs of a training step of a [batch, 1024] x 1024-wide
// linear layer (forward x W^T, data gradient dy W, weight gradient dy^T x accumulated by a
// sum post-op, as backends/cpu/ops/linear.cpp makes them), once at the whole batch with
// every thread, and as two halves side by side, one thread each, the way simulated GPUs
// run a data-parallel layer's replicas (backends/host_lanes.h). A ratio above 1 is
// what data parallelism loses in the kernels themselves (bench_data_parallel's "kernels'
// loss").
//
//   OMP_NUM_THREADS=2 build/bench/gemm_side_by_side [batch]   -> JSON, medians of 60 runs
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct Gemm {
  dnnl::matmul primitive;
  memory src, weights, dst;
};

// dst [m, n] (+)= src [m, k] x weights [k, n], each operand in the layout given.
Gemm make_gemm(dnnl::engine& engine, memory::dim m, memory::dim k, memory::dim n, tag src_tag, tag weights_tag,
               bool accumulate) {
  memory::desc src({m, k}, memory::data_type::f32, src_tag), weights({k, n}, memory::data_type::f32, weights_tag),
      dst({m, n}, memory::data_type::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine);
  Gemm g{dnnl::matmul(pd), memory(src, engine), memory(weights, engine), memory(dst, engine)};
  for (memory* mem : {&g.src, &g.weights, &g.dst}) {
    float* p = static_cast<float*>(mem->get_data_handle());
    const size_t count = mem->get_desc().get_size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(i % 13) * 0.01f;
  }
  return g;
}

void run(Gemm& g, dnnl::engine& engine) {
  dnnl::stream stream(engine);
  g.primitive.execute(stream, {{DNNL_ARG_SRC, g.src}, {DNNL_ARG_WEIGHTS, g.weights}, {DNNL_ARG_DST, g.dst}});
  stream.wait();
}

Gemm make_step_gemm(dnnl::engine& engine, int which, memory::dim batch) {
  const memory::dim width = 1024;
  switch (which) {
    case 0: return make_gemm(engine, batch, width, width, tag::ab, tag::ba, false);  // y = x W^T
    case 1: return make_gemm(engine, batch, width, width, tag::ab, tag::ab, false);  // dx = dy W
    default: return make_gemm(engine, width, batch, width, tag::ba, tag::ab, true);  // dW += dy^T x
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const memory::dim batch = argc > 1 ? std::atol(argv[1]) : 256;
  if (batch < 2 || batch % 2) {
    std::fprintf(stderr, "gemm_side_by_side: the batch must be even and at least 2\n");
    return 2;
  }
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  omp_set_max_active_levels(1);  // inside the side-by-side region, oneDNN runs single-threaded
  const char* names[] = {"forward", "data_gradient", "weight_gradient"};
  std::printf("{\"threads\": %d, \"batch\": %ld", omp_get_max_threads(), static_cast<long>(batch));
  double whole_total = 0, halves_total = 0;
  for (int which = 0; which < 3; ++which) {
    Gemm whole = make_step_gemm(engine, which, batch);
    Gemm halves[2] = {make_step_gemm(engine, which, batch / 2), make_step_gemm(engine, which, batch / 2)};
    std::vector<double> whole_us, halves_us;
    for (int round = 0; round < 60; ++round) {
      auto t0 = std::chrono::steady_clock::now();
      run(whole, engine);
      auto t1 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(2)
      for (int k = 0; k < 2; ++k) run(halves[k], engine);
      auto t2 = std::chrono::steady_clock::now();
      whole_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      halves_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
    const double w = median(whole_us), h = median(halves_us);
    whole_total += w;
    halves_total += h;
    std::printf(", \"%s\": {\"whole_us\": %.1f, \"halves_side_by_side_us\": %.1f, \"ratio\": %.3f}", names[which], w, h,
                h / w);
  }
  std::printf(", \"step_ratio\": %.3f}\n", halves_total / whole_total);
  return 0;
}
