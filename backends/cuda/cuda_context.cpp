#include "backends/cuda/cuda_context.h"

namespace tandem::cuda {

CudaContext::CudaContext(Device device, int cuda_device, size_t capacity)
    : device_(device),
      cuda_device_(cuda_device),
      compute_(cuda_device),
      copy_in_(cuda_device),
      copy_out_(cuda_device),
      allocator_(std::make_unique<CudaAllocator>(device, cuda_device, compute_.get(), capacity)) {}

CublasHandle& CudaContext::cublas() {
  std::call_once(cublas_once_, [&] { cublas_ = std::make_unique<CublasHandle>(cuda_device_, compute_.get()); });
  return *cublas_;
}

CudnnHandle& CudaContext::cudnn() {
  std::call_once(cudnn_once_, [&] { cudnn_ = std::make_unique<CudnnHandle>(cuda_device_, compute_.get()); });
  return *cudnn_;
}

void CudaContext::synchronize() {
  compute_.synchronize();
  copy_in_.synchronize();
  copy_out_.synchronize();
}

}  // namespace tandem::cuda
