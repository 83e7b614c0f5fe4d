#include "backends/cuda/cudnn_handle.h"

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/device_guard.h"

namespace tandem::cuda {

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  // Memory, a missing or mismatched library or driver: the user's setup to fix.
  const bool user_caused = status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                           status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
                           status == CUDNN_STATUS_NOT_INITIALIZED ||
                           status == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH ||
                           status == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED ||
                           status == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH ||
                           status == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER ||
                           status == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART;
  const char* text = cudnnGetErrorString(status);
  throw_failed_call({"cuDNN", static_cast<int>(status), text, text, call, file, line, user_caused});
}

CudnnHandle::CudnnHandle(int cuda_device, cudaStream_t stream) : cuda_device_(cuda_device) {
  DeviceGuard guard(cuda_device);
  TANDEM_CUDNN_CHECK(cudnnCreate(&handle_));
  cudnnStatus_t status = cudnnSetStream(handle_, stream);
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(handle_);
    throw_cudnn_error(status, "cudnnSetStream(handle_, stream)", __FILE__, __LINE__);
  }
}

CudnnHandle::~CudnnHandle() {
  if (handle_) cudnnDestroy(handle_);
}

}  // namespace tandem::cuda
