// DeviceGuard: makes a CUDA device current for a scope and restores the previous one.
// The CUDA runtime's current device is per host thread, and every allocation, stream,
// handle and kernel launch goes to it: code that serves several GPUs from one thread sets
// it around each call instead of assuming it.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_error.h"

namespace tandem::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    TANDEM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);  // a destructor does not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace tandem::cuda
