// What the CUDA runtime sees: the GPUs there are, before any backend is opened. Its
// implementation is backends/cuda/cuda_devices.{cpp,cu}, linked by the runtime (it needs
// the CUDA runtime library only, not the backend's); a stub that reports no GPUs when
// Tandem is built without CUDA. With CUDA but no driver, also no GPUs (not an error).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tandem {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

/// Whether this build contains the CUDA sources.
bool cuda_compiled();
/// The GPUs the CUDA runtime reports (CUDA_VISIBLE_DEVICES honoured); empty when there
/// is no driver or no device. `why_none` receives the runtime's reason when empty.
std::vector<CudaDeviceInfo> cuda_devices(std::string* why_none = nullptr);

}  // namespace tandem
