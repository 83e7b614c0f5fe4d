#include "backends/cuda/cudnn_descriptors.h"

#include "backends/cuda/cudnn_handle.h"

namespace tandem::cuda {
namespace {

int as_int(int64_t v) { return static_cast<int>(v); }

}  // namespace

TensorDescriptor::TensorDescriptor(int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t type) {
  TANDEM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, type, as_int(n), as_int(c),
                                                as_int(h), as_int(w)));
}
TensorDescriptor::~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }

FilterDescriptor::FilterDescriptor(int64_t o, int64_t c, int64_t kh, int64_t kw, cudnnDataType_t type) {
  TANDEM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_));
  TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, type, CUDNN_TENSOR_NCHW, as_int(o), as_int(c),
                                                as_int(kh), as_int(kw)));
}
FilterDescriptor::~FilterDescriptor() { cudnnDestroyFilterDescriptor(desc_); }

ConvolutionDescriptor::ConvolutionDescriptor(std::array<int64_t, 2> pad, std::array<int64_t, 2> stride,
                                             std::array<int64_t, 2> dilation, int64_t groups, bool tensor_cores) {
  TANDEM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
  TANDEM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, as_int(pad[0]), as_int(pad[1]), as_int(stride[0]),
                                                     as_int(stride[1]), as_int(dilation[0]), as_int(dilation[1]),
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, as_int(groups)));
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, tensor_cores ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
}
ConvolutionDescriptor::~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(desc_); }

PoolingDescriptor::PoolingDescriptor(cudnnPoolingMode_t mode, std::array<int64_t, 2> window,
                                     std::array<int64_t, 2> pad, std::array<int64_t, 2> stride) {
  TANDEM_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc_));
  TANDEM_CUDNN_CHECK(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN, as_int(window[0]),
                                                 as_int(window[1]), as_int(pad[0]), as_int(pad[1]), as_int(stride[0]),
                                                 as_int(stride[1])));
}
PoolingDescriptor::~PoolingDescriptor() { cudnnDestroyPoolingDescriptor(desc_); }

}  // namespace tandem::cuda
