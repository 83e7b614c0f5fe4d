// The optimizer updates and the gradient norm on float32 arrays in host memory: what the
// host's optimizer (runtime/optim) runs for parameters whose master copy is on the host,
// and what the cpu's and the simulated GPUs' backends run for a parameter that a device
// holds (Backend::sgd_update, adam_update, sum_of_squares). One copy, so that both give
// torch's bits (Note [matching torch bit for bit] in optimizer_update.cpp).
//
// Note [which threads update]: each loop runs on the calling thread alone or over the
// calling thread's OpenMP team (HostThreads), and gives the same bits either way (the
// updates are elementwise; the norm sums fixed blocks in order). The team only where the
// caller is the thread that runs the cpu's oneDNN kernels, so that its team is theirs:
// the model on the cpu alone (its kernels run on the calling thread), or a host lane's
// compute thread: placed training runs the host's parameters' updates, gradient norms and
// zeroing as tasks on the cpu's compute lane and waits for them
// (runtime/params/parameter_devices.cpp, Model::zero_gradients). A thread beside them
// opening a second team fights theirs, which keeps spinning on every core for a while after
// its last kernel (measured: a one-GPU placed step went 17.3 -> 18.7 ms). Adam's loop is bound by its divisions and square roots, not
// by memory: on this 2-core machine the team halves it (4.2M parameters, 2.6 -> 1.4 ms).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>

#include "backends/update_scalars.h"

namespace tandem {

/// Who runs a loop below (Note [which threads update]).
enum class HostThreads {
  one,   // the calling thread
  team,  // the calling thread's OpenMP team, for arrays large enough to pay its wake-up
};

/// SGD without momentum or weight decay on one row, inline: sgd_update_host's arithmetic
/// (p = fma(g, -lr, p)) for the rows of a table's row gradient, a few dozen values each,
/// where that call's dispatch (threads, flags, a bf16 copy) costs more than the row.
inline void plain_sgd_row(float neg_lr, float* __restrict p, const float* __restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = std::fma(g[i], neg_lr, p[i]);
}

/// torch.optim.SGD's single-tensor update of p from g; buf: the momentum buffer (null
/// without momentum); first: it holds no history yet and becomes a copy of the step.
/// bf16_copy: where each updated p's bf16 rounding goes too (n values), or null (Note [a
/// weight's bf16 copy] in core/bf16_copy.h).
void sgd_update_host(const optim_detail::SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first,
                     HostThreads threads = HostThreads::one, uint16_t* bf16_copy = nullptr);
/// torch.optim.Adam's or AdamW's update of p from g; m, v: exp_avg, exp_avg_sq;
/// bf16_copy as sgd's.
void adam_update_host(const optim_detail::AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n,
                      HostThreads threads = HostThreads::one, uint16_t* bf16_copy = nullptr);

/// The sum of squares of x[0, n) in double, over blocks of kNormBlock elements summed in
/// order (each over 8 lanes added in a fixed order), so that the result does not depend on
/// how the work is split: the gradient norm of clip_grad_norm. A GPU sums each block in
/// one thread (the lanes' order is the host's), so blocks are small enough to give it
/// thousands of threads per million elements (with 16384, a 1024 x 1024 gradient was 64
/// threads, each walking 64 KiB alone).
inline constexpr int64_t kNormBlock = 1024;
double sum_of_squares_host(const float* x, int64_t n, HostThreads threads = HostThreads::one);
/// Block `b` of that sum (x[b * kNormBlock, ...) up to n), for sums over some rows only.
double block_sum_of_squares_host(const float* x, int64_t n, int64_t b);
/// x[0, n) *= factor.
void scale_host(float* x, int64_t n, float factor, HostThreads threads = HostThreads::one);
/// x[0, n) = 0.
void zero_host(float* x, int64_t n, HostThreads threads = HostThreads::one);

/// body(begin, end) over [0, n) rows of `row_elements` elements each, on the calling thread
/// or in one piece per thread of its team as the loops above: for updates that visit some
/// rows of a table (each row's arithmetic its own, so the bits do not depend on the split).
void for_rows_host(int64_t n, int64_t row_elements, HostThreads threads,
                   const std::function<void(int64_t begin, int64_t end)>& body);

}  // namespace tandem
