// cuBLAS GEMM on row-major tensors: fp32 against a double reference (which TF32 would
// miss by orders of magnitude), every transpose, the strided batched form with a
// repeated operand, and bf16/fp16 inputs with fp32 accumulation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu_test_util.h"
#include "backends/cuda/gemm.h"

namespace tandem::test {
namespace {

/// Row-major op(A) [m, k] op(B) [k, n] in double; A is [k, m] when trans_a, B [n, k] when trans_b.
std::vector<double> reference_gemm(const std::vector<float>& a, const std::vector<float>& b, bool trans_a,
                                   bool trans_b, int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * m + i] : a[i * k + p];
        const double bv = trans_b ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
      }
      c[i * n + j] = acc;
    }
  return c;
}

void require_near(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  double max_ref = 1, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(want[i]));
    max_err = std::max(max_err, std::abs(got[i] - want[i]));
  }
  INFO("max error " << max_err << ", max |ref| " << max_ref);
  REQUIRE(max_err <= rel * max_ref);
}

TEST_CASE("fp32 GEMM matches a double reference to 1e-5, so TF32 is off", "[gpu][gemm]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 5, 3}, {128, 96, 1024}, {333, 257, 129}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(m << "x" << n << "x" << k << " trans_a " << ta << " trans_b " << tb);
        Tensor a = random_tensor({m * k}, gen), b = random_tensor({k * n}, gen), c0 = random_tensor({m * n}, gen);
        Tensor da = to_gpu(a), db = to_gpu(b), dc = to_gpu(c0);
        cuda::gemm(gpu().cublas(), {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f,
                                    .a = da.raw_data(), .b = db.raw_data(), .beta = 2.f, .c = dc.raw_data()});
        std::vector<double> want = reference_gemm(a.to_vector<float>(), b.to_vector<float>(), ta, tb, m, n, k);
        for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * c0.span<float>()[i];
        require_near(to_cpu(dc).to_vector<float>(), want, 1e-5);
      }
}

TEST_CASE("an empty sum with beta 0 writes zeros", "[gpu][gemm]") {
  Tensor c = gpu_garbage({6}, DType::float32);
  cuda::gemm(gpu().cublas(), {.m = 2, .n = 3, .k = 0, .a = nullptr, .b = nullptr, .c = c.raw_data()});
  CHECK(to_cpu(c).to_vector<float>() == std::vector<float>(6, 0.f));
}

TEST_CASE("strided batched GEMM, with an operand repeated across the batch", "[gpu][gemm]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const int64_t batch = 5, m = 17, n = 9, k = 31;
  Tensor a = random_tensor({batch * m * k}, gen), b = random_tensor({k * n}, gen);
  Tensor da = to_gpu(a), db = to_gpu(b), dc = gpu_garbage({batch * m * n}, DType::float32);
  cuda::gemm_strided_batched(gpu().cublas(), {.m = m, .n = n, .k = k, .a = da.raw_data(), .b = db.raw_data(),
                                              .c = dc.raw_data()},
                             {.batch = batch, .a = m * k, .b = 0, .c = m * n});
  std::vector<float> got = to_cpu(dc).to_vector<float>(), av = a.to_vector<float>();
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<float> ai(av.begin() + i * m * k, av.begin() + (i + 1) * m * k);
    std::vector<float> gi(got.begin() + i * m * n, got.begin() + (i + 1) * m * n);
    require_near(gi, reference_gemm(ai, b.to_vector<float>(), false, false, m, n, k), 1e-5);
  }
}

/// `values` as 16-bit floats (bf16 or fp16), uploaded.
template <class Half>
std::shared_ptr<Storage> upload_half(const std::vector<float>& values, std::vector<float>& rounded) {
  std::vector<Half> h(values.size());
  rounded.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<Half, __nv_bfloat16>)
      h[i] = __float2bfloat16(values[i]), rounded[i] = __bfloat162float(h[i]);
    else
      h[i] = __float2half(values[i]), rounded[i] = __half2float(h[i]);
  }
  auto s = gpu().allocator().allocate(h.size() * sizeof(Half));
  cuda::copy_to_device(s->data(), h.data(), h.size() * sizeof(Half), gpu().stream().get());
  return s;
}

TEMPLATE_TEST_CASE("bf16 and fp16 GEMMs accumulate in fp32", "[gpu][gemm][mixed]", __nv_bfloat16, __half) {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const cuda::GemmType type = std::is_same_v<TestType, __nv_bfloat16> ? cuda::GemmType::bf16 : cuda::GemmType::f16;
  const int64_t m = 256, n = 128, k = 512;
  std::vector<float> a = random_tensor({m * k}, gen).to_vector<float>();
  std::vector<float> b = random_tensor({n * k}, gen).to_vector<float>();
  std::vector<float> ra, rb;
  auto da = upload_half<TestType>(a, ra), db = upload_half<TestType>(b, rb);
  Tensor dc = gpu_garbage({m * n}, DType::float32);
  cuda::gemm(gpu().cublas(), {.trans_b = true, .m = m, .n = n, .k = k, .a = da->data(), .b = db->data(),
                              .c = dc.raw_data(), .types = {type, cuda::GemmType::f32}});
  std::vector<float> got = to_cpu(dc).to_vector<float>();
  // Against the fp32 inputs: the rounding of the inputs only (the bound, 1e-2).
  require_near(got, reference_gemm(a, b, false, true, m, n, k), 1e-2);
  // Against the rounded inputs: accumulation in fp32 (in 16 bits the error would be ~1e-2).
  require_near(got, reference_gemm(ra, rb, false, true, m, n, k), 1e-4);
}

}  // namespace
}  // namespace tandem::test
