#include <climits>
#include <cmath>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/loss.cuh"

namespace tandem::cuda {
namespace {

constexpr int kRowBlock = 128;
constexpr int kPartialBlocks = 256;  // blocks of the elementwise loss: each leaves one partial sum

/// The smallest `v` over the block, in every thread; as block_sum.
__device__ inline long long block_min(long long v, long long* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : LLONG_MAX;
  for (int offset = 16; offset > 0; offset /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Per row, in scratch: the row's loss [0, N) and whether its arg-max hit [N, 2N).
/// Then the count of targets not ignored at scratch[2N], and the first bad target. One block.
__global__ void count_kernel(ClassLossShape s, const int64_t* __restrict__ t, double* __restrict__ scratch,
                             LossResult* result) {
  __shared__ double partial[32];
  if (threadIdx.x == 0) result->bad_target = kNoBadTarget;
  __syncthreads();
  double counted = 0;
  for (int64_t i = threadIdx.x; i < s.n; i += blockDim.x) {
    if (t[i] == s.ignore_index) continue;
    if (t[i] < 0 || t[i] >= s.c) atomicMin(&result->bad_target, static_cast<unsigned long long>(i));
    else counted += 1;
  }
  counted = block_sum(counted, partial);
  if (threadIdx.x == 0) scratch[2 * s.n] = counted;
}

__global__ void row_kernel(ClassLossShape s, const float* __restrict__ x, const int64_t* __restrict__ t,
                           float* __restrict__ grad, double* __restrict__ scratch) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  __shared__ long long iscratch[32];
  const double counted = scratch[2 * s.n];
  const double scale = s.mean ? (counted > 0 ? 1.0 / counted : NAN) : 1.0;
  const double eps = s.label_smoothing;
  for (int64_t i = blockIdx.x; i < s.n; i += gridDim.x) {
    const float* row = x + i * s.c;
    float* g = grad ? grad + i * s.c : nullptr;
    const int64_t target = t[i];
    if (target == s.ignore_index || target < 0 || target >= s.c) {  // a bad one is reported, not read
      if (g)
        for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) g[k] = 0.f;
      if (threadIdx.x == 0) scratch[i] = 0, scratch[s.n + i] = 0;
      continue;
    }
    // arg-max: the first maximal element, as std::max_element. Each thread keeps the first
    // of its own maxima; the block takes the smallest index among threads at the maximum.
    float best = 0.f;
    int64_t best_at = s.c;
    for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x)
      if (best_at == s.c || row[k] > best) best = row[k], best_at = k;
    const float mx = block_max(best_at == s.c ? -INFINITY : best, fscratch, -INFINITY);
    const int64_t arg_max = block_min(best_at < s.c && best == mx ? best_at : s.c, iscratch);

    double log_sum = 0, inv_sum = 0;
    if (s.logits) {
      double sum = 0;
      for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) sum += exp(static_cast<double>(row[k]) - mx);
      sum = block_sum(sum, dscratch);
      log_sum = mx + log(sum);
      inv_sum = 1 / sum;
    }
    double smooth = 0;  // sum over the classes of -logp
    for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) smooth -= row[k] - log_sum;
    smooth = block_sum(smooth, dscratch);
    if (threadIdx.x == 0) {
      scratch[i] = (1 - eps) * -(row[target] - log_sum) + eps / s.c * smooth;
      scratch[s.n + i] = arg_max == target ? 1 : 0;
    }
    if (!g) continue;
    for (int64_t k = threadIdx.x; k < s.c; k += blockDim.x) {
      const double mass = (k == target ? 1 - eps : 0) + eps / s.c;
      const double d = s.logits ? exp(static_cast<double>(row[k]) - mx) * inv_sum - mass : -mass;
      g[k] = static_cast<float>(d * scale);
    }
  }
}

__global__ void class_total_kernel(ClassLossShape s, const double* __restrict__ scratch, LossResult* result) {
  __shared__ double partial[32];
  double loss = 0, correct = 0;
  for (int64_t i = threadIdx.x; i < s.n; i += blockDim.x) loss += scratch[i], correct += scratch[s.n + i];
  loss = block_sum(loss, partial);
  correct = block_sum(correct, partial);
  if (threadIdx.x == 0) {
    const double counted = scratch[2 * s.n];
    const double scale = s.mean ? (counted > 0 ? 1.0 / counted : NAN) : 1.0;
    result->loss = loss * scale;
    result->counted = counted;
    result->correct = correct;
  }
}

__global__ void point_kernel(PointLoss kind, double scale, int64_t n, const float* __restrict__ x,
                             const float* __restrict__ t, float* __restrict__ grad, double* __restrict__ partial) {
  __shared__ double scratch[32];
  double total = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const double xi = x[i], ti = t[i];
    if (kind == PointLoss::mse) {
      total += (xi - ti) * (xi - ti);
      if (grad) grad[i] = static_cast<float>(2 * (xi - ti) * scale);
    } else {  // numerically stable: max(x, 0) - x t + log(1 + exp(-|x|))
      total += fmax(xi, 0.0) - xi * ti + log1p(exp(-fabs(xi)));
      if (grad) grad[i] = static_cast<float>((1 / (1 + exp(-xi)) - ti) * scale);
    }
  }
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void point_total_kernel(int blocks, double scale, int64_t n, const double* __restrict__ partial,
                                   LossResult* result) {
  __shared__ double scratch[32];
  double total = 0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) total += partial[i];
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) {
    result->loss = total * scale;
    result->counted = static_cast<double>(n);
    result->correct = 0;
    result->bad_target = kNoBadTarget;
  }
}

}  // namespace

size_t class_loss_scratch(const ClassLossShape& s) { return static_cast<size_t>(2 * s.n + 1); }

void class_loss(const ClassLossShape& s, const float* x, const int64_t* t, float* grad, double* scratch,
                LossResult* result, cudaStream_t stream) {
  count_kernel<<<1, 1024, 0, stream>>>(s, t, scratch, result);
  TANDEM_CUDA_CHECK_LAUNCH("class_loss (count)");
  if (s.n > 0 && s.c > 0) {
    const unsigned rows = static_cast<unsigned>(s.n < 65536 ? s.n : 65536);
    row_kernel<<<rows, kRowBlock, 0, stream>>>(s, x, t, grad, scratch);
    TANDEM_CUDA_CHECK_LAUNCH("class_loss (rows)");
  }
  class_total_kernel<<<1, 1024, 0, stream>>>(s, scratch, result);
  TANDEM_CUDA_CHECK_LAUNCH("class_loss (total)");
}

size_t point_loss_scratch(int64_t) { return kPartialBlocks; }

void point_loss(PointLoss kind, bool mean, int64_t n, const float* x, const float* t, float* grad, double* scratch,
                LossResult* result, cudaStream_t stream) {
  const double scale = mean ? 1.0 / (n > 1 ? static_cast<double>(n) : 1.0) : 1.0;
  point_kernel<<<kPartialBlocks, kBlockSize, 0, stream>>>(kind, scale, n, x, t, grad, scratch);
  TANDEM_CUDA_CHECK_LAUNCH("point_loss");
  point_total_kernel<<<1, kBlockSize, 0, stream>>>(kPartialBlocks, scale, n, scratch, result);
  TANDEM_CUDA_CHECK_LAUNCH("point_loss (total)");
}

}  // namespace tandem::cuda
