// Failed CUDA, cuBLAS and NCCL calls become exceptions that name the call and the
// library's message; what a user can fix is a UserError.
#include "gpu_test_util.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/nccl_comms.h"

namespace tandem::test {
namespace {

TEST_CASE("a device that does not exist is the user's error, naming the call", "[gpu][errors]") {
  REQUIRE_THROWS_AS(TANDEM_CUDA_CHECK(cudaSetDevice(9999)), UserError);
  REQUIRE_THROWS_WITH(TANDEM_CUDA_CHECK(cudaSetDevice(9999)),
                      Catch::Contains("cudaSetDevice(9999)") && Catch::Contains("cudaErrorInvalidDevice"));
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);  // the failed call left nothing behind
}

TEST_CASE("a bad argument is a CudaError (a bug), with the library's words", "[gpu][errors]") {
  int* host = nullptr;
  REQUIRE_THROWS_AS(TANDEM_CUDA_CHECK(cudaMemcpy(host, host, 4, static_cast<cudaMemcpyKind>(77))),
                    cuda::CudaError);
  cublasHandle_t handle = gpu().cublas().get();
  float one = 1.f;
  try {
    TANDEM_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, -1, 1, 1, &one, nullptr, 1, nullptr, 1, &one,
                                    nullptr, 1));
    FAIL("no exception");
  } catch (const cuda::CudaError& e) {
    CHECK(e.library == "cuBLAS");
    CHECK_THAT(e.what(), Catch::Contains("cublasSgemm") && Catch::Contains("CUBLAS_STATUS_INVALID_VALUE"));
  }
}

TEST_CASE("an NCCL group refuses a device twice", "[gpu][errors][nccl]") {
  REQUIRE_THROWS_AS(cuda::NcclGroup({0, 0}), InternalError);
}

}  // namespace
}  // namespace tandem::test
