// Without CUDA sources in the build, there are no GPUs to list.
#include "backends/cuda_devices.h"

namespace tandem {

#ifndef TANDEM_HAVE_CUDA
bool cuda_compiled() { return false; }
std::vector<CudaDeviceInfo> cuda_devices(std::string* why_none) {
  if (why_none) *why_none = "Tandem was built without CUDA (TANDEM_CUDA=OFF or no toolkit)";
  return {};
}
#endif

}  // namespace tandem
