// CublasHandle: an RAII cuBLAS handle bound to one device and one stream, and the check
// of cuBLAS statuses (cuda_error.h's conventions). The handle's math mode is
// CUBLAS_DEFAULT_MATH: fp32 GEMMs stay fp32 (TF32 only when asked for, which Tandem never
// does, so results match the CPU's to float rounding); reductions inside a mixed-precision
// GEMM are kept in fp32 as well (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
#pragma once

#include <cublas_v2.h>

namespace tandem::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    throw_cublas_error(status, call, file, line);
}

/// Not thread-safe: one caller at a time (cuBLAS's rule for a handle).
class CublasHandle {
 public:
  CublasHandle(int cuda_device, cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  int cuda_device() const { return cuda_device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  int cuda_device_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace tandem::cuda

#define TANDEM_CUBLAS_CHECK(call) ::tandem::cuda::check_cublas((call), #call, __FILE__, __LINE__)
