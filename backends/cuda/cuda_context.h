// CudaContext: what the CUDA kernels of one logical device share, as CpuContext is for
// the CPU's: the device, its compute stream (every kernel of the device runs on it, in
// order), a stream for copies in and one for copies out (overlapping compute, ordered
// against it by events), the device's caching allocator, and the cuBLAS and cuDNN
// handles, made on first use and bound to the compute stream.
//
// Several logical devices may share one physical GPU (cuda_device()); each has its own
// streams and allocator, so they run and count their memory apart.
//
// Thread-safety: the allocator is thread-safe; the handles and the compute stream are for
// one thread at a time, as a Kernel is (backends/kernel.h).
#pragma once

#include <memory>
#include <mutex>

#include "backends/cuda/cublas_handle.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cudnn_handle.h"
#include "backends/cuda/stream.h"
#include "core/device.h"
#include "graph/precision.h"

namespace tandem::cuda {

/// The precision of the GEMMs of linear kernels: f32 (fp32 throughout, as the CPU), or
/// bf16 / f16 copies of the fp32 inputs and weights on tensor cores, accumulating and
/// writing outputs and gradients in fp32 (mixed precision over fp32 master weights).
enum class MatmulPrecision { f32, bf16, f16 };

class CudaContext {
 public:
  /// Logical `device` on CUDA device `cuda_device`; `capacity` 0: the device's memory.
  CudaContext(Device device, int cuda_device, size_t capacity = 0);
  /// cuda:`cuda_device` on that device.
  explicit CudaContext(int cuda_device) : CudaContext(Device::cuda(cuda_device), cuda_device) {}
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  Device device() const { return device_; }
  int cuda_device() const { return cuda_device_; }
  Stream& stream() { return compute_; }
  Stream& copy_in_stream() { return copy_in_; }
  Stream& copy_out_stream() { return copy_out_; }
  CudaAllocator& allocator() { return *allocator_; }
  CublasHandle& cublas();
  CudnnHandle& cudnn();
  /// Blocks the host until the three streams have run everything queued.
  void synchronize();
  /// For the matrix-work kernels (linear, matmul, conv2d, attention, gru/lstm) made after
  /// the call whose layers declare no precision of their own; f32 by default.
  void set_matmul_precision(MatmulPrecision precision) { matmul_precision_ = precision; }
  MatmulPrecision matmul_precision() const { return matmul_precision_; }

 private:
  const Device device_;
  const int cuda_device_;
  Stream compute_, copy_in_, copy_out_;
  std::unique_ptr<CudaAllocator> allocator_;
  std::once_flag cublas_once_, cudnn_once_;
  std::unique_ptr<CublasHandle> cublas_;
  std::unique_ptr<CudnnHandle> cudnn_;
  MatmulPrecision matmul_precision_ = MatmulPrecision::f32;
};

/// What a layer's matrix work runs in on a GPU: the precision its model declares
/// (graph/precision.h: bf16, fp16), else the context's default (set_matmul_precision).
inline MatmulPrecision matmul_precision_of(Precision layer, const CudaContext& ctx) {
  switch (layer) {
    case Precision::bf16: return MatmulPrecision::bf16;
    case Precision::fp16: return MatmulPrecision::f16;
    default: return ctx.matmul_precision();
  }
}

}  // namespace tandem::cuda
