#include "backends/cuda/cuda_error.h"

#include "core/error.h"

namespace tandem::cuda {

bool cuda_status_is_user_caused(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
    case cudaErrorInvalidDevice:
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return true;
    default:
      return false;
  }
}

void throw_failed_call(const FailedCall& f) {
  std::string text = std::string(f.library) + " call `" + f.call + "` failed at " + f.file + ":" +
                     std::to_string(f.line) + ": " + f.status_name + ": " + f.message;
  if (f.user_caused) {
    text += "; check the GPUs with `tandem devices` and nvidia-smi (driver, memory in use by other processes, "
            "CUDA_VISIBLE_DEVICES), or use fewer or smaller batches on this device";
    throw UserError(text);
  }
  throw CudaError(f.library, f.code, text);
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error is cleared, so the next call starts clean
  throw_failed_call({"CUDA", static_cast<int>(status), cudaGetErrorName(status), cudaGetErrorString(status), call,
                     file, line, cuda_status_is_user_caused(status)});
}

}  // namespace tandem::cuda
