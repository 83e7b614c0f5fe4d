// What the oracle tests share: the manifest make_cases.py wrote, and the error measure.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace oracle {

inline nlohmann::json manifest() {
  std::ifstream in(std::string(TANDEM_ORACLE_DIR) + "/manifest.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// max|a - b| / max|b|: the error relative to the tensor's scale; an all-zero (or
/// near-zero) expectation compares absolutely. int64 tensors: 0 when equal, else 1.
inline double relative_error(const tandem::Tensor& actual, const tandem::Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  REQUIRE(actual.dtype() == expected.dtype());
  if (actual.dtype() == tandem::DType::int64) return actual.to_vector<int64_t>() == expected.to_vector<int64_t>() ? 0 : 1;
  auto a = actual.span<float>(), b = expected.span<float>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 1e-6 ? diff / scale : diff;
}

/// ||actual - expected|| / ||expected|| (Euclidean norms over the whole tensor): an error
/// spread over the tensor, where relative_error is its worst element's.
inline double normwise_error(const tandem::Tensor& actual, const tandem::Tensor& expected) {
  REQUIRE(actual.shape() == expected.shape());
  auto a = actual.span<float>(), b = expected.span<float>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm > 1e-12 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

/// max |actual - expected| / max(max |expected|, floor): relative_error, but a tensor much
/// smaller than its siblings (`floor`: a fraction of the largest of them) is judged against
/// them, as torch.allclose's atol does. A gradient that is the sum of many terms nearly
/// cancelling (a batch norm's weight over thousands of pixels) carries float32 rounding of
/// the terms' size, not of its own.
inline double relative_error_floored(const tandem::Tensor& actual, const tandem::Tensor& expected, double floor) {
  double e = relative_error(actual, expected);
  if (actual.dtype() != tandem::DType::float32) return e;
  double scale = 0;
  for (float v : expected.span<float>()) scale = std::max(scale, std::abs(double(v)));
  return scale >= floor || scale <= 1e-6 ? e : e * scale / floor;
}

/// The largest |value| over every tensor of `tensors`.
inline double largest_magnitude(const tandem::TensorMap& tensors) {
  double m = 0;
  for (const auto& [name, t] : tensors)
    if (t.dtype() == tandem::DType::float32)
      for (float v : t.span<float>()) m = std::max(m, std::abs(double(v)));
  return m;
}

}  // namespace oracle
