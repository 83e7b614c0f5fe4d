// This machine's bf16 dot-product peak, as fma_peak measures the fp32 one: each OpenMP
// thread runs independent AVX512-BF16 chains (vdpbf16ps: per 32-bit lane, two bf16
// products added into an fp32 sum, 4 flops) and the total rate is reported in GFLOP/s.
// bench/bench_precision.py divides bf16 GEMM throughput by it. On a CPU without
// avx512_bf16 it says so and reports nothing.
//
//   OMP_NUM_THREADS=2 build/bench/bf16_peak    -> {"threads": 2, "gflops": ...}
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>

// Twelve named accumulators, as in fma_peak.cpp: an array would measure store forwarding.
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_chains(long iterations) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1.0, ~6e-8
  __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.2f), c3 = _mm512_set1_ps(0.3f);
  __m512 c4 = _mm512_set1_ps(0.4f), c5 = _mm512_set1_ps(0.5f), c6 = _mm512_set1_ps(0.6f), c7 = _mm512_set1_ps(0.7f);
  __m512 c8 = _mm512_set1_ps(0.8f), c9 = _mm512_set1_ps(0.9f), c10 = _mm512_set1_ps(1.0f), c11 = _mm512_set1_ps(1.1f);
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm512_dpbf16_ps(c0, a, b), c1 = _mm512_dpbf16_ps(c1, a, b), c2 = _mm512_dpbf16_ps(c2, a, b);
    c3 = _mm512_dpbf16_ps(c3, a, b), c4 = _mm512_dpbf16_ps(c4, a, b), c5 = _mm512_dpbf16_ps(c5, a, b);
    c6 = _mm512_dpbf16_ps(c6, a, b), c7 = _mm512_dpbf16_ps(c7, a, b), c8 = _mm512_dpbf16_ps(c8, a, b);
    c9 = _mm512_dpbf16_ps(c9, a, b), c10 = _mm512_dpbf16_ps(c10, a, b), c11 = _mm512_dpbf16_ps(c11, a, b);
  }
  __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return _mm512_reduce_add_ps(sum);
}

int main() {
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("{\"error\": \"this CPU lacks avx512_bf16\"}\n");
    return 1;
  }
  const long iterations = 200'000'000 / 12;
  double best = 0;
  int threads = omp_get_max_threads();
  volatile float sink = 0;
  for (int trial = 0; trial < 5; ++trial) {
    auto start = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    sink += dpbf16_chains(iterations);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double flops = 4.0 * 16 * 12 * static_cast<double>(iterations) * threads;
    if (flops / seconds / 1e9 > best) best = flops / seconds / 1e9;
  }
  std::printf("{\"threads\": %d, \"gflops\": %.1f}\n", threads, best);
  return 0;
}
