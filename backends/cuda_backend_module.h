// How the runtime and the CUDA backend's module (libtandem_cuda.so, built from
// backends/cuda/cuda_backend_module.cpp) find each other: two C symbols. The module is
// loaded with dlopen when a real GPU is to be opened, so that programs on machines without
// a GPU never load the CUDA libraries.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda_devices.h"

namespace tandem {

/// Changes whenever backends/backend.h, lane.h or compute_ops.h change in a way that
/// breaks a module built against the old ones: a module of another build is refused.
inline constexpr const char kBackendInterfaceVersion[] = "tandem-backend-5";  // 3: communicators between processes, scale_checking_finite; 4: device-timed trace spans; 5: inference regions

/// One logical GPU cuda:`logical` on a physical GPU (several logical devices may share
/// one: each has its streams and memory pool, and collectives among them stay on the GPU).
struct CudaGpuSpec {
  CudaDeviceInfo gpu;                     // the physical GPU
  int logical = 0;                        // cuda:logical
  std::vector<int> physical_of_logical;   // every logical device's physical GPU, by index
  size_t capacity = 0;                    // its pool's bytes; 0: the GPU's memory
};

/// `void tandem_open_cuda_backend(const CudaGpuSpec&, std::unique_ptr<Backend>&)`:
/// opens the backend of one logical GPU; throws UserError (no driver, no memory) or
/// CudaError.
using OpenCudaBackendFn = void (*)(const CudaGpuSpec&, std::unique_ptr<Backend>&);
inline constexpr const char kOpenCudaBackendSymbol[] = "tandem_open_cuda_backend";
/// `const char* tandem_cuda_backend_interface()`: the kBackendInterfaceVersion it was built with.
using CudaBackendInterfaceFn = const char* (*)();
inline constexpr const char kCudaBackendInterfaceSymbol[] = "tandem_cuda_backend_interface";
/// The module's file name.
inline constexpr const char kCudaBackendModule[] = "libtandem_cuda.so";

}  // namespace tandem
