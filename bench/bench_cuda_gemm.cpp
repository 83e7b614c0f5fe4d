// GEMM throughput of Tandem's cuBLAS wrapper (backends/cuda/gemm.h) against cuBLAS called
// directly with the same arguments, in one run, on square and layer-shaped problems in
// fp32 (no TF32, as Tandem runs it), bf16 and fp16 (fp32 accumulation), on random operands
// (zeros run faster than real data on these chips). The two are timed in alternating runs
// of at least 20 ms, median of 7 each. The wrapper should cost nothing: the ratio is
// expected at 1.00. One JSON object per line.
//
//   build/bench/bench_cuda_gemm            (exits 77 with "no GPU" on a machine without one)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/gemm.h"
#include "cuda_bench_util.h"

using namespace tandem;

namespace {

struct Problem {
  int64_t m, n, k;
};

const char* name(cuda::GemmType t) {
  return t == cuda::GemmType::f32 ? "f32" : (t == cuda::GemmType::bf16 ? "bf16" : "f16");
}
cudaDataType_t data_type(cuda::GemmType t) {
  return t == cuda::GemmType::f32 ? CUDA_R_32F : (t == cuda::GemmType::bf16 ? CUDA_R_16BF : CUDA_R_16F);
}

/// `count` values uniform in [-1, 1] in `type`'s layout, as bytes.
std::vector<unsigned char> random_operand(cuda::GemmType type, int64_t count, std::minstd_rand& gen) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const size_t elem = type == cuda::GemmType::f32 ? 4 : 2;
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * elem);
  for (int64_t i = 0; i < count; ++i) {
    const float v = uniform(gen);
    if (type == cuda::GemmType::f32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (type == cuda::GemmType::bf16) {
      const __nv_bfloat16 h = __float2bfloat16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      const __half h = __float2half(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

}  // namespace

int main() {
  bench::require_gpu("bench_cuda_gemm");
  cuda::CudaContext ctx(0);
  cublasHandle_t raw = nullptr;  // cuBLAS as a user would call it: its own handle, default math
  TANDEM_CUBLAS_CHECK(cublasCreate(&raw));
  TANDEM_CUBLAS_CHECK(cublasSetStream(raw, ctx.stream().get()));
  const std::vector<Problem> problems = {{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192},
                                         {8192, 3072, 768},  {8192, 768, 3072},  {256, 1024, 1024}};
  for (cuda::GemmType type : {cuda::GemmType::f32, cuda::GemmType::bf16, cuda::GemmType::f16}) {
    const size_t elem = type == cuda::GemmType::f32 ? 4 : 2;
    for (const Problem& p : problems) {
      auto a = ctx.allocator().allocate(p.m * p.k * elem), b = ctx.allocator().allocate(p.n * p.k * elem);
      auto c = ctx.allocator().allocate(p.m * p.n * 4);
      std::minstd_rand gen(static_cast<unsigned>(p.m * 31 + p.n * 7 + p.k));
      const std::vector<unsigned char> ha = random_operand(type, p.m * p.k, gen), hb = random_operand(type, p.n * p.k, gen);
      TANDEM_CUDA_CHECK(cudaMemcpy(a->data(), ha.data(), ha.size(), cudaMemcpyHostToDevice));
      TANDEM_CUDA_CHECK(cudaMemcpy(b->data(), hb.data(), hb.size(), cudaMemcpyHostToDevice));
      const float alpha = 1.f, beta = 0.f;
      // y [m, n] = x [m, k] W^T, W [n, k]: a linear layer's forward
      const auto [tandem_s, cublas_s] = bench::median_seconds_alternating(
          ctx.stream(), 7, 0.02,
          [&](cudaStream_t) {
            cuda::gemm(ctx.cublas(), {.trans_b = true, .m = p.m, .n = p.n, .k = p.k, .a = a->data(), .b = b->data(),
                                      .c = c->data(), .types = {type, cuda::GemmType::f32}});
          },
          [&](cudaStream_t) {
            TANDEM_CUBLAS_CHECK(cublasGemmEx(raw, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n),
                                             static_cast<int>(p.m), static_cast<int>(p.k), &alpha, b->data(),
                                             data_type(type), static_cast<int>(p.k), a->data(), data_type(type),
                                             static_cast<int>(p.k), &beta, c->data(), CUDA_R_32F,
                                             static_cast<int>(p.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          });
      const double flops = 2.0 * p.m * p.n * p.k;
      std::printf("{\"bench\": \"cuda_gemm\", \"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
                  "\"tandem_tflops\": %.2f, \"cublas_tflops\": %.2f, \"ratio\": %.3f}\n",
                  name(type), static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                  flops / tandem_s / 1e12, flops / cublas_s / 1e12, cublas_s / tandem_s);
    }
  }
  cublasDestroy(raw);
  return 0;
}
