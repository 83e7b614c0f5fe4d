#include <cmath>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/rnn.cuh"

namespace tandem::cuda {
namespace {

__device__ inline float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void gru_forward_kernel(CellShape s, const float* __restrict__ xp, const float* __restrict__ hp,
                                   const float* __restrict__ h_prev, float* __restrict__ h_out,
                                   float* __restrict__ h_next, float* __restrict__ saved) {
  const int64_t H = s.hidden, total = s.batch * H;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / H, j = i % H;
    const float* x = xp + n * 3 * H;
    const float* h = hp + n * 3 * H;
    const float r = sigmoid(x[j] + h[j]);
    const float z = sigmoid(x[H + j] + h[H + j]);
    const float hn = h[2 * H + j];
    const float nn = tanhf(x[2 * H + j] + r * hn);
    const float out = (1.f - z) * nn + z * h_prev[i];
    h_out[n * s.out_stride + j] = out;
    h_next[i] = out;
    float* sv = saved + n * 4 * H;
    sv[j] = r, sv[H + j] = z, sv[2 * H + j] = nn, sv[3 * H + j] = hn;
  }
}

__global__ void gru_backward_kernel(CellShape s, const float* __restrict__ dh, const float* __restrict__ h_prev,
                                    const float* __restrict__ saved, float* __restrict__ dxp,
                                    float* __restrict__ dhp, float* __restrict__ dh_prev) {
  const int64_t H = s.hidden, total = s.batch * H;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / H, j = i % H;
    const float* sv = saved + n * 4 * H;
    const float r = sv[j], z = sv[H + j], nn = sv[2 * H + j], hn = sv[3 * H + j];
    const float g = dh[i];
    const float dn = g * (1.f - z) * (1.f - nn * nn);  // through tanh
    const float dz = g * (h_prev[i] - nn) * z * (1.f - z);
    const float dr = dn * hn * r * (1.f - r);
    float* dx = dxp + n * 3 * H;
    float* dhh = dhp + n * 3 * H;
    dx[j] = dr, dx[H + j] = dz, dx[2 * H + j] = dn;
    dhh[j] = dr, dhh[H + j] = dz, dhh[2 * H + j] = dn * r;
    dh_prev[i] = g * z;
  }
}

__global__ void lstm_forward_kernel(CellShape s, const float* __restrict__ xp, const float* __restrict__ hp,
                                    const float* __restrict__ c_prev, float* __restrict__ h_out,
                                    float* __restrict__ h_next, float* __restrict__ c_next, float* __restrict__ saved) {
  const int64_t H = s.hidden, total = s.batch * H;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / H, j = i % H;
    const float* x = xp + n * 4 * H;
    const float* h = hp + n * 4 * H;
    const float ig = sigmoid(x[j] + h[j]);
    const float fg = sigmoid(x[H + j] + h[H + j]);
    const float gg = tanhf(x[2 * H + j] + h[2 * H + j]);
    const float og = sigmoid(x[3 * H + j] + h[3 * H + j]);
    const float c = fg * c_prev[i] + ig * gg;
    const float out = og * tanhf(c);
    h_out[n * s.out_stride + j] = out;
    h_next[i] = out;
    c_next[i] = c;
    float* sv = saved + n * 5 * H;
    sv[j] = ig, sv[H + j] = fg, sv[2 * H + j] = gg, sv[3 * H + j] = og, sv[4 * H + j] = c;
  }
}

__global__ void lstm_backward_kernel(CellShape s, const float* __restrict__ dh, float* __restrict__ dc,
                                     const float* __restrict__ c_prev, const float* __restrict__ saved,
                                     float* __restrict__ dgates) {
  const int64_t H = s.hidden, total = s.batch * H;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / H, j = i % H;
    const float* sv = saved + n * 5 * H;
    const float ig = sv[j], fg = sv[H + j], gg = sv[2 * H + j], og = sv[3 * H + j], c = sv[4 * H + j];
    const float tc = tanhf(c);
    const float g = dh[i];
    const float dcell = dc[i] + g * og * (1.f - tc * tc);
    float* d = dgates + n * 4 * H;
    d[j] = dcell * gg * ig * (1.f - ig);
    d[H + j] = dcell * c_prev[i] * fg * (1.f - fg);
    d[2 * H + j] = dcell * ig * (1.f - gg * gg);
    d[3 * H + j] = g * tc * og * (1.f - og);
    dc[i] = dcell * fg;
  }
}

__global__ void swap_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t first, int64_t second,
                            int64_t c) {
  const int64_t total = first * second * c;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t k = i % c, b = (i / c) % second, a = i / (c * second);  // x [a, b, k]
    y[(b * first + a) * c + k] = x[i];
  }
}

__global__ void gather_columns_kernel(const float* __restrict__ x, int64_t rows, int64_t h, int64_t stride,
                                      float* __restrict__ y) {
  const int64_t total = rows * h;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) y[i] = x[(i / h) * stride + i % h];
}

}  // namespace

void gru_cell_forward(const CellShape& s, const float* xp, const float* hp, const float* h_prev, float* h_out,
                      float* h_next, float* saved, cudaStream_t stream) {
  const int64_t total = s.batch * s.hidden;
  if (total == 0) return;
  gru_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(s, xp, hp, h_prev, h_out, h_next, saved);
  TANDEM_CUDA_CHECK_LAUNCH("gru cell forward");
}

void gru_cell_backward(const CellShape& s, const float* dh, const float* h_prev, const float* saved, float* dxp,
                       float* dhp, float* dh_prev, cudaStream_t stream) {
  const int64_t total = s.batch * s.hidden;
  if (total == 0) return;
  gru_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(s, dh, h_prev, saved, dxp, dhp, dh_prev);
  TANDEM_CUDA_CHECK_LAUNCH("gru cell backward");
}

void lstm_cell_forward(const CellShape& s, const float* xp, const float* hp, const float* c_prev, float* h_out,
                       float* h_next, float* c_next, float* saved, cudaStream_t stream) {
  const int64_t total = s.batch * s.hidden;
  if (total == 0) return;
  lstm_forward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(s, xp, hp, c_prev, h_out, h_next, c_next, saved);
  TANDEM_CUDA_CHECK_LAUNCH("lstm cell forward");
}

void lstm_cell_backward(const CellShape& s, const float* dh, float* dc, const float* c_prev, const float* saved,
                        float* dgates, cudaStream_t stream) {
  const int64_t total = s.batch * s.hidden;
  if (total == 0) return;
  lstm_backward_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(s, dh, dc, c_prev, saved, dgates);
  TANDEM_CUDA_CHECK_LAUNCH("lstm cell backward");
}

void swap_time_and_batch(const float* x, float* y, int64_t first, int64_t second, int64_t c, cudaStream_t stream) {
  const int64_t total = first * second * c;
  if (total == 0) return;
  swap_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(x, y, first, second, c);
  TANDEM_CUDA_CHECK_LAUNCH("swap time and batch");
}

void gather_columns(const float* x, int64_t rows, int64_t h, int64_t stride, float* y, cudaStream_t stream) {
  const int64_t total = rows * h;
  if (total == 0) return;
  gather_columns_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(x, rows, h, stride, y);
  TANDEM_CUDA_CHECK_LAUNCH("gather columns");
}

}  // namespace tandem::cuda
