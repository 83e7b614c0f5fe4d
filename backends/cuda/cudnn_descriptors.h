// RAII owners of the cuDNN descriptors the conv2d, pooling and batch_norm2d kernels
// describe their tensors and operations with (cuDNN's legacy descriptor API, which cuDNN
// 9 still ships and marks deprecated in favour of its graph API). NCHW; float32 unless a
// conv2d in half precision asks for bf16 or fp16 tensors (computing in float32).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>

namespace tandem::cuda {

/// A 4-d NCHW tensor (float32 unless told).
class TensorDescriptor {
 public:
  TensorDescriptor(int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

/// A filter [O, C/groups, kh, kw] (torch's conv2d weight; float32 unless told).
class FilterDescriptor {
 public:
  FilterDescriptor(int64_t o, int64_t c, int64_t kh, int64_t kw, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

/// A 2-d cross-correlation (torch's convolution) computing in fp32. With fp32 tensors, FMA
/// math only: no TF32 tensor cores, so results match the CPU's to float rounding. With
/// `tensor_cores` (bf16 or fp16 tensors), tensor-op math.
class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(std::array<int64_t, 2> pad, std::array<int64_t, 2> stride, std::array<int64_t, 2> dilation,
                        int64_t groups, bool tensor_cores = false);
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolingDescriptor {
 public:
  PoolingDescriptor(cudnnPoolingMode_t mode, std::array<int64_t, 2> window, std::array<int64_t, 2> pad,
                    std::array<int64_t, 2> stride);
  ~PoolingDescriptor();
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

}  // namespace tandem::cuda
