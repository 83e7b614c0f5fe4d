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

}  // namespace oracle
