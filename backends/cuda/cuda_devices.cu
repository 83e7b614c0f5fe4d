// Enumerates GPUs through the CUDA runtime. A missing driver makes cudaGetDeviceCount
// return an error rather than zero; Tandem treats that as "no GPUs" and keeps the reason.
#include <cuda_runtime.h>

#include "backends/cuda/cuda_devices.h"

namespace tandem {

bool cuda_compiled() { return true; }

std::vector<CudaDeviceInfo> cuda_devices(std::string* why_none) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why_none) *why_none = std::string("CUDA runtime: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return {};
  }
  std::vector<CudaDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.total_bytes = prop.totalGlobalMem;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    if (cudaSetDevice(i) == cudaSuccess) cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
    devices.push_back(info);
  }
  if (devices.empty() && why_none) *why_none = "the CUDA runtime reports no devices";
  return devices;
}

}  // namespace tandem
