// Note [matching torch bit for bit]: torch's CPU kernels compute `a.add_(b, alpha=s)` as
// fma(b, s, a) (its vectorised and scalar loops are both contracted), with the python
// float scalars rounded to float32. We write those fmas explicitly and switch off the
// compiler's own contraction, which could fuse other pairs than torch does. Compiled with
// -fno-math-errno (CMakeLists.txt), so that Adam's sqrt vectorises, as in torch's build.
#include "core/no_fp_contraction.h"

#include "backends/optimizer_update.h"

#include "core/bfloat16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace tandem {
namespace {

/// Elements below which a loop stays on the calling thread: waking the team costs a few
/// microseconds, what ~10^4 elements of Adam take.
constexpr int64_t kTeamMinElements = 1 << 15;
/// Pieces start on whole 64-byte lines, so that no two threads write one line.
constexpr int64_t kPieceAlign = 16;

/// Runs body(begin, end) over [0, n) items of `item_elements` elements each: on this
/// thread, or in one piece per thread of its OpenMP team (Note [which threads update]).
/// Not inside a parallel region: there the caller already has its share of the cores.
template <class Body>
void for_pieces(int64_t n, HostThreads threads, Body&& body, int64_t item_elements = 1) {
  if (threads == HostThreads::one || n * item_elements < kTeamMinElements || omp_in_parallel() ||
      omp_get_max_threads() < 2) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n + nt - 1) / nt;
    const int64_t piece = (per + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
    const int64_t begin = std::min(n, t * piece), end = std::min(n, begin + piece);
    if (begin < end) body(begin, end);
  }
}

/// p, g, buf: n elements. The flags are template arguments so that the loop has no
/// branches and vectorises. kFirst: the buffer holds no history and becomes a copy of d_p.
template <bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_loop(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const optim_detail::SgdScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float d_p = g[i];
    if constexpr (kWeightDecay) d_p = std::fma(p[i], s.weight_decay, d_p);  // d_p.add(p, alpha=wd)
    if constexpr (kMomentum) {
      // buf = clone(d_p), or buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      float b = kFirst ? d_p : std::fma(d_p, s.one_minus_dampening, buf[i] * s.momentum);
      buf[i] = b;
      d_p = kNesterov ? std::fma(b, s.momentum, d_p) : b;  // d_p.add(buf, alpha=momentum)
    }
    p[i] = std::fma(d_p, s.neg_lr, p[i]);  // p.add_(d_p, alpha=-lr)
  }
}

/// Calls f(std::bool_constant<b>{}).
template <class F>
void with_bool(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// p, g, m (exp_avg), v (exp_avg_sq): n elements each. The weight decay is a template
/// argument so that the loop has no branches and vectorises.
template <bool kL2, bool kDecoupled>
void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
               const optim_detail::AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i];
    if constexpr (kL2) grad = std::fma(p[i], s.l2, grad);  // grad.add(p, alpha=weight_decay)
    float param = p[i];
    if constexpr (kDecoupled) param = param * s.decay;      // p.mul_(1 - lr * weight_decay)
    // m.mul_(b1).add_(g, alpha=1-b1)
    float exp_avg = std::fma(grad, s.one_minus_beta1, m[i] * s.beta1);
    // v.mul_(b2).addcmul_(g, g, value=1-b2)
    float exp_avg_sq = std::fma(s.one_minus_beta2 * grad, grad, v[i] * s.beta2);
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    float denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * exp_avg / denom;  // p.addcdiv_(m, denom, value=-step_size)
  }
}

/// update(i, j) over [begin, end); with a bf16 copy, in runs of kCopyRun elements, each
/// run's new p rounded into the copy while it is still in the core's cache (Note [a
/// weight's bf16 copy]). Two loops, not one: the update's loop stays the vectorised loop it
/// is alone (rounding inside it made it 1.5x slower), and the rounding reads from cache.
constexpr int64_t kCopyRun = 2048;
template <class Update>
void update_then_copy(const float* p, uint16_t* copy, int64_t begin, int64_t end, Update&& update) {
  if (copy == nullptr) return update(begin, end);
  for (int64_t i = begin; i < end; i += kCopyRun) {
    const int64_t j = std::min(end, i + kCopyRun);
    update(i, j);
#pragma omp simd
    for (int64_t k = i; k < j; ++k) copy[k] = float_to_bf16(p[k]);
  }
}

}  // namespace

void sgd_update_host(const optim_detail::SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first,
                     HostThreads threads, uint16_t* bf16_copy) {
  with_bool(s.has_weight_decay, [&](auto decay) {
    with_bool(s.has_momentum, [&](auto momentum) {
      with_bool(s.nesterov, [&](auto nesterov) {
        with_bool(first, [&](auto first_step) {
          for_pieces(n, threads, [&](int64_t b, int64_t e) {
            update_then_copy(p, bf16_copy, b, e, [&](int64_t i, int64_t j) {
              sgd_loop<decay(), momentum(), nesterov(), first_step()>(p + i, g + i, buf ? buf + i : nullptr, j - i, s);
            });
          });
        });
      });
    });
  });
}

void adam_update_host(const optim_detail::AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n,
                      HostThreads threads, uint16_t* bf16_copy) {
  for_pieces(n, threads, [&](int64_t b, int64_t e) {
    update_then_copy(p, bf16_copy, b, e, [&](int64_t i, int64_t j) {
      if (s.l2 != 0)
        adam_loop<true, false>(p + i, g + i, m + i, v + i, j - i, s);
      else if (s.decay != 1)
        adam_loop<false, true>(p + i, g + i, m + i, v + i, j - i, s);
      else
        adam_loop<false, false>(p + i, g + i, m + i, v + i, j - i, s);
    });
  });
}

double block_sum_of_squares_host(const float* x, int64_t n, int64_t b) {
  int64_t end = std::min(n, (b + 1) * kNormBlock);
  double lanes[8] = {};
  int64_t i = b * kNormBlock;
  for (; i + 8 <= end; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  for (; i < end; ++i) lanes[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  double s = 0;
  for (double lane : lanes) s += lane;
  return s;
}

double sum_of_squares_host(const float* x, int64_t n, HostThreads threads) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  if (threads == HostThreads::one || n < kTeamMinElements) {
    double total = 0;
    for (int64_t b = 0; b < blocks; ++b) total += block_sum_of_squares_host(x, n, b);
    return total;
  }
  // each block's sum by whichever thread, then the blocks added in order: the same bits
  std::vector<double> sums(static_cast<size_t>(blocks));
  for_pieces(
      blocks, threads,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sums[static_cast<size_t>(i)] = block_sum_of_squares_host(x, n, i);
      },
      kNormBlock);
  double total = 0;
  for (double block : sums) total += block;
  return total;
}

void scale_host(float* x, int64_t n, float factor, HostThreads threads) {
  for_pieces(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= factor;
  });
}

void zero_host(float* x, int64_t n, HostThreads threads) {
  for_pieces(n, threads, [&](int64_t b, int64_t e) { std::memset(x + b, 0, static_cast<size_t>(e - b) * sizeof(float)); });
}

void for_rows_host(int64_t n, int64_t row_elements, HostThreads threads,
                   const std::function<void(int64_t begin, int64_t end)>& body) {
  for_pieces(n, threads, body, std::max<int64_t>(row_elements, 1));
}

}  // namespace tandem
