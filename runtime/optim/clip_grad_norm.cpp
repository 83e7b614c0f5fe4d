// Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_, norm type 2).
#include "core/no_fp_contraction.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <string>
#include <vector>

#include "backends/optimizer_update.h"
#include "runtime/optim/optimizer_impl.h"

namespace tandem {

namespace {

/// sum_of_squares of a gradient that is zero outside `rows` (ascending) of `width`
/// elements each, to the bit: a block without a touched row sums to +0, and adding +0
/// leaves the running total as it was, so only the blocks that hold a touched row count,
/// in the same order.
double sum_of_squares_rows(const float* x, int64_t n, std::span<const int64_t> rows, int64_t width) {
  std::vector<int64_t> blocks;
  for (int64_t r : rows) {
    if (width == 0) break;
    const int64_t first = r * width / kNormBlock, last = ((r + 1) * width - 1) / kNormBlock;
    for (int64_t b = blocks.empty() ? first : std::max(first, blocks.back() + 1); b <= last; ++b) blocks.push_back(b);
  }
  double total = 0;
  for (int64_t b : blocks) total += block_sum_of_squares_host(x, n, b);
  return total;
}

/// sum_of_squares of a row gradient (core/touched_rows.h) as if spread into its dense
/// tensor of `n` elements, to the bit: each element goes to the block and lane the dense
/// loop would add it to (a full group of 8: its offset mod 8; the block's tail: lane 0), in
/// ascending order, and the zeros between add nothing.
double sum_of_squares_held(const TouchedRows& rows, int64_t n) {
  const int64_t width = rows.width();
  double total = 0, lanes[8] = {};
  int64_t block = -1, tail = 0;  // the block being summed; where its tail starts
  auto finish_block = [&] {
    if (block < 0) return;
    double s = 0;
    for (double lane : lanes) s += lane;
    total += s;
  };
  for (int64_t r : rows.list()) {
    const float* v = rows.values_of(r);
    for (int64_t d = 0; d < width; ++d) {
      const int64_t at = r * width + d;
      if (at / kNormBlock != block) {
        finish_block();
        block = at / kNormBlock;
        std::fill(std::begin(lanes), std::end(lanes), 0.0);
        const int64_t start = block * kNormBlock, end = std::min(n, start + kNormBlock);
        tail = start + (end - start) / 8 * 8;
      }
      const double x = static_cast<double>(v[d]);
      lanes[at < tail ? (at - block * kNormBlock) % 8 : 0] += x * x;
    }
  }
  finish_block();
  return total;
}

/// The rows entry of gradient i when it lists some (not all) rows, else null.
TouchedRows* partial_rows(std::span<TouchedRows* const> rows, size_t i) {
  if (rows.empty() || rows[i] == nullptr || rows[i]->all() || rows[i]->rows() <= 0) return nullptr;
  return rows[i];
}

}  // namespace

namespace {

/// Every value of `grads` that can be other than zero: on_host(values, n) for each host
/// span (a row gradient's rows, a dense gradient's touched rows, or all of it; rows outside
/// the touched ones are zero), on_device(gradient) for a gradient a device holds.
template <class OnHost, class OnDevice>
void for_each_gradient_part(std::span<Tensor> grads, std::span<TouchedRows* const> rows, ParameterDevices& devices,
                            OnHost on_host, OnDevice on_device) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) {
      for (int64_t r : rows[i]->list()) on_host(rows[i]->values_of(r), rows[i]->width());
      continue;
    }
    if (grads[i].device() != Device::cpu() || devices.holds(grads[i])) {
      on_device(grads[i]);
      continue;
    }
    float* g = grads[i].data<float>();
    if (TouchedRows* touched = partial_rows(rows, i)) {
      const int64_t width = grads[i].numel() / touched->rows();
      for (int64_t r : touched->list()) on_host(g + r * width, width);
    } else {
      on_host(g, grads[i].numel());
    }
  }
}

/// x[0, n) *= factor; whether every x was finite before. An inf or NaN is a float whose
/// exponent bits are all ones; testing them with integer operations and no branch keeps
/// the loop vectorized.
bool scale_host_checking_finite(float* x, int64_t n, float factor) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t not_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    not_finite |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & kExponent) == kExponent);
    x[i] = v * factor;
  }
  return not_finite == 0;
}

}  // namespace

void scale_gradients(std::span<Tensor> grads, float factor, std::span<TouchedRows* const> rows,
                     ParameterDevices& devices) {
  // zero stays zero whatever the factor that is not NaN
  for_each_gradient_part(
      grads, rows, devices, [&](float* x, int64_t n) { scale_host(x, n, factor); },
      [&](Tensor& g) { devices.scale(g, factor); });
}

bool ParameterDevices::scale_checking_finite(std::span<const Tensor> grads, float factor) {
  bool finite = true;
  for (const Tensor& g : grads) {
    // a sum of squares in double is finite exactly when every value is (a float's square
    // stays below 1.2e77)
    finite = std::isfinite(sum_of_squares(g)) && finite;
    scale(g, factor);
  }
  return finite;
}

bool scale_gradients_checking_finite(std::span<Tensor> grads, float factor, std::span<TouchedRows* const> rows,
                                     ParameterDevices& devices) {
  bool finite = true;
  std::vector<Tensor> on_devices;  // checked together: one wait per device, not one per gradient
  for_each_gradient_part(
      grads, rows, devices, [&](float* x, int64_t n) { finite &= scale_host_checking_finite(x, n, factor); },
      [&](Tensor& g) { on_devices.push_back(g); });
  if (!on_devices.empty()) finite = devices.scale_checking_finite(on_devices, factor) && finite;
  return finite;
}

double clip_grad_norm(std::span<Tensor> grads, double max_norm, std::span<TouchedRows* const> rows,
                      ParameterDevices& devices) {
  if (!(max_norm > 0)) throw UserError("clip_grad_norm must be > 0, got " + std::to_string(max_norm));
  TANDEM_ASSERT(rows.empty() || rows.size() == grads.size(), "clip_grad_norm: one touched-rows entry per gradient");
  double sum = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) {  // a row gradient: its rows, no dense tensor
      TANDEM_ASSERT(!rows.empty() && rows[i] && rows[i]->holds_values(), "clip_grad_norm: gradient " +
                                                                             std::to_string(i) + " is missing");
      sum += sum_of_squares_held(*rows[i], rows[i]->rows() * rows[i]->width());
      continue;
    }
    TANDEM_ASSERT(g.dtype() == DType::float32, "clip_grad_norm: gradient " + std::to_string(i) + " is not float32");
    const bool on_host = g.device() == Device::cpu() && !devices.holds(g);
    if (TouchedRows* touched = on_host ? partial_rows(rows, i) : nullptr)
      sum += sum_of_squares_rows(g.data<float>(), g.numel(), touched->list(), g.numel() / touched->rows());
    else  // the host's loop on its threads, or summed where GPUs hold it (placed training)
      sum += devices.sum_of_squares(g);
  }
  double total_norm = std::sqrt(sum);
  double clip_coef = max_norm / (total_norm + 1e-6);
  // torch multiplies by the float32 coefficient; a non-finite norm gives 0 here (inf) or
  // no scaling (NaN), and the caller sees the norm it returns.
  if (clip_coef < 1) scale_gradients(grads, static_cast<float>(clip_coef), rows, devices);
  return total_norm;
}

}  // namespace tandem
