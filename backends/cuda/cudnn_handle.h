// CudnnHandle: an RAII cuDNN handle bound to one device and one stream, and the check of
// cuDNN statuses (cuda_error.h's conventions).
#pragma once

#include <cudnn.h>

namespace tandem::cuda {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) [[unlikely]]
    throw_cudnn_error(status, call, file, line);
}

/// Not thread-safe: one caller at a time.
class CudnnHandle {
 public:
  CudnnHandle(int cuda_device, cudaStream_t stream);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  cudnnHandle_t get() const { return handle_; }
  int cuda_device() const { return cuda_device_; }

 private:
  int cuda_device_;
  cudnnHandle_t handle_ = nullptr;
};

}  // namespace tandem::cuda

#define TANDEM_CUDNN_CHECK(call) ::tandem::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
