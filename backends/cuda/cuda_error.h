// Turning a failed CUDA, cuBLAS, cuDNN or NCCL call into an exception that names the
// call, where it was made, and the library's own message.
//
// Two kinds, after the two error channels of core/error.h: what a user can fix (memory
// exhausted, a device that does not exist, a driver too old or missing) is a UserError
// (the CLI exits 2); anything else (a bad argument, a launch failure, an illegal
// address) is a CudaError, which means a bug in Tandem or a broken system (exit 1).
// Nothing here exits or aborts.
//
// The checks of cuBLAS, cuDNN and NCCL live beside their handles (cublas_handle.h,
// cudnn_handle.h, nccl_comms.h), so that this header pulls in the CUDA runtime only.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tandem::cuda {

/// A CUDA library call failed for a reason the user cannot fix. `library` is "CUDA",
/// "cuBLAS", "cuDNN" or "NCCL"; `code` the library's status value.
class CudaError : public std::runtime_error {
 public:
  CudaError(std::string library, int code, const std::string& message)
      : std::runtime_error(message), library(std::move(library)), code(code) {}
  std::string library;
  int code;
};

/// How a failed call is reported; `user_caused` picks UserError over CudaError.
struct FailedCall {
  const char* library;
  int code;
  const char* status_name;  // e.g. "cudaErrorMemoryAllocation"
  const char* message;      // the library's description of the status
  const char* call;         // the source text of the call
  const char* file;
  int line;
  bool user_caused;
};

/// Throws UserError or CudaError with "<library> call `call` failed at file:line:
/// status_name: message" and, for a user-caused one, what to do.
[[noreturn]] void throw_failed_call(const FailedCall& failure);

/// Whether a CUDA runtime status is the user's to fix (memory, devices, driver).
bool cuda_status_is_user_caused(cudaError_t status);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) [[unlikely]]
    throw_cuda_error(status, call, file, line);
}

/// The error of the last kernel launch on this thread (launches return no status).
inline void check_launch(const char* kernel, const char* file, int line) {
  check_cuda(cudaGetLastError(), kernel, file, line);
}

}  // namespace tandem::cuda

/// Checks a CUDA runtime call: TANDEM_CUDA_CHECK(cudaMemcpyAsync(...)).
#define TANDEM_CUDA_CHECK(call) ::tandem::cuda::check_cuda((call), #call, __FILE__, __LINE__)
/// Checks the kernel launch just made on this thread.
#define TANDEM_CUDA_CHECK_LAUNCH(kernel) ::tandem::cuda::check_launch(kernel, __FILE__, __LINE__)
