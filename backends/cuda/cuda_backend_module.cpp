// The CUDA backend as a module the runtime loads when, and only when, a GPU is there
// (libtandem_cuda.so, as ggml loads its backends): a program that runs on the cpu never
// maps cuBLAS, cuDNN and NCCL (about 200 MiB and 70 ms at every start). The module holds
// its own copies of what it uses of core/, graph/ and backends/ (linked in and kept local
// to it); what crosses into the runtime are objects behind the Backend interface and
// exceptions, which match by type name.
#include <memory>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda_backend_module.h"

extern "C" __attribute__((visibility("default"))) void tandem_open_cuda_backend(
    const tandem::CudaGpuSpec& spec, std::unique_ptr<tandem::Backend>& backend) {
  backend = std::make_unique<tandem::cuda::CudaBackend>(spec);
}

extern "C" __attribute__((visibility("default"))) const char* tandem_cuda_backend_interface() {
  return tandem::kBackendInterfaceVersion;
}
