// Enumerates GPUs through the CUDA runtime. A missing driver makes cudaGetDeviceCount
// return an error rather than zero; Tandem treats that as "no GPUs" and keeps the reason.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda_devices.h"

namespace tandem {
namespace {

// In words a user can act on: the runtime's own message for a missing driver ("CUDA driver
// version is insufficient for CUDA runtime version") suggests an upgrade of a driver that
// is not there.
std::string why_no_gpus(cudaError_t status) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  if (driver == 0) return "no NVIDIA driver was found";
  if (status == cudaErrorInsufficientDriver)
    return "the NVIDIA driver supports CUDA " + version(driver) + ", older than this build's CUDA " + version(runtime) +
           ": update the driver";
  if (status == cudaErrorNoDevice) return "the NVIDIA driver reports no GPU";
  return std::string("the CUDA runtime reports no GPU: ") + cudaGetErrorString(status);
}

}  // namespace

bool cuda_compiled() { return true; }

std::vector<CudaDeviceInfo> cuda_devices(std::string* why_none) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    if (why_none) *why_none = why_no_gpus(status);
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
