#include "backends/cuda/cublas_handle.h"

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_guard.h"

namespace tandem::cuda {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const bool user_caused = status == CUBLAS_STATUS_ALLOC_FAILED || status == CUBLAS_STATUS_ARCH_MISMATCH ||
                           status == CUBLAS_STATUS_NOT_INITIALIZED;
  throw_failed_call({"cuBLAS", static_cast<int>(status), cublasGetStatusName(status), cublasGetStatusString(status),
                     call, file, line, user_caused});
}

CublasHandle::CublasHandle(int cuda_device, cudaStream_t stream) : cuda_device_(cuda_device), stream_(stream) {
  DeviceGuard guard(cuda_device);
  TANDEM_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    TANDEM_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    TANDEM_CUBLAS_CHECK(cublasSetMathMode(
        handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

}  // namespace tandem::cuda
