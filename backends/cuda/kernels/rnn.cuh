// The cells of gru and lstm on a GPU (backends/cuda/ops/rnn.cpp): one time step's gates
// from the input's and the hidden state's projections, forward and backward, with torch's
// formulas, plus the moves between batch-first and time-major layouts.
//
// Per step, xp [N, G H] = x_t W_ih^T + b_ih and hp [N, G H] = h W_hh^T + b_hh come from
// cuBLAS; the cell computes the rest elementwise, a thread per (n, j):
//   gru (gates r, z, n):  r = σ(xr + hr), z = σ(xz + hz), n = tanh(xn + r hn),
//                         h' = (1 - z) n + z h
//   lstm (gates i, f, g, o): i, f, o = σ(...), g = tanh(...), c' = f c + i g, h' = o tanh(c')
// Forward saves per step what backward reads: gru r, z, n and hn ([N, 4 H]); lstm i, f, g,
// o and c' ([N, 5 H]). Backward takes dh (from above and from the next step) and, for
// lstm, dc, and writes the gradients of the pre-activations for the input side (dxp) and
// the hidden side (dhp: the same but gru's n, which is r times), plus the direct part
// of dh for the previous step (gru: z dh; lstm: none) and lstm's dc for it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

struct CellShape {
  int64_t batch = 1;       // N
  int64_t hidden = 1;      // H
  int64_t out_stride = 1;  // the row length of `h_out` (D H: both directions side by side)
};

/// One gru step. h_prev [N, H]; writes h_out (row stride out_stride), h_next [N, H] (the
/// state for the next step) and saved [N, 4 H].
void gru_cell_forward(const CellShape& s, const float* xp, const float* hp, const float* h_prev, float* h_out,
                      float* h_next, float* saved, cudaStream_t stream);
/// dh [N, H] (the step's output gradient plus the next step's): dxp, dhp [N, 3 H]; dh_prev
/// [N, H] = z dh (the rest comes through W_hh).
void gru_cell_backward(const CellShape& s, const float* dh, const float* h_prev, const float* saved, float* dxp,
                       float* dhp, float* dh_prev, cudaStream_t stream);

/// One lstm step. h_prev, c_prev [N, H]; writes h_out (row stride out_stride), h_next,
/// c_next [N, H] and saved [N, 5 H].
void lstm_cell_forward(const CellShape& s, const float* xp, const float* hp, const float* c_prev, float* h_out,
                       float* h_next, float* c_next, float* saved, cudaStream_t stream);
/// dh [N, H] and dc [N, H] (from the next step; replaced by dc for the previous one):
/// the pre-activations' gradients [N, 4 H], which are both dxp and dhp for lstm.
void lstm_cell_backward(const CellShape& s, const float* dh, float* dc, const float* c_prev, const float* saved,
                        float* dgates, cudaStream_t stream);

/// y [T, N, C] = x [N, T, C] (or back, with `to_batch_first`): batch_first in and out.
void swap_time_and_batch(const float* x, float* y, int64_t first, int64_t second, int64_t c, cudaStream_t stream);

/// y [rows, H] = x [rows, H] taken with a row stride (a direction's columns of [T, N, D H]).
void gather_columns(const float* x, int64_t rows, int64_t h, int64_t stride, float* y, cudaStream_t stream);

}  // namespace tandem::cuda
