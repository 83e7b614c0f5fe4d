// Helpers for the CPU kernel tests: attributes with the op defaults of
// docs/yaml-format.md, random tensors from a printed seed, and a check that runs a
// kernel and the reference (backends/cpu/reference) on the same inputs and compares.
#pragma once

#include "../support/fresh_seed.h"
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "tests/support/reference/reference_ops.h"

namespace tandem::test {

inline CpuContext& cpu_context() {
  static CpuContext ctx;
  return ctx;
}

using testing::fresh_seed;  // a seed from std::random_device, or TANDEM_TEST_SEED to repeat one

/// The op's attributes with their documented defaults; `overrides` replace or add.
inline Attributes op_attrs(const std::string& op, const std::map<std::string, AttrValue>& overrides = {}) {
  Attributes a;
  auto null = AttrValue{std::monostate{}};
  if (op == "linear") a.set("bias", true);
  if (op == "embedding" || op == "embedding_bag") {
    a.set("padding_idx", null);
    a.set("max_norm", null);
    a.set("norm_type", 2.0);
    a.set("scale_grad_by_freq", false);
    a.set("sparse", false);
  }
  if (op == "embedding_bag") {
    a.set("mode", std::string("mean"));
    a.set("include_last_offset", false);
  }
  if (op == "relu" || op == "dropout") a.set("inplace", false);
  if (op == "gelu") a.set("approximate", std::string("none"));
  if (op == "clamp") {
    a.set("min", null);
    a.set("max", null);
  }
  if (op == "normalize") {
    a.set("p", 2.0);
    a.set("dim", int64_t{1});
    a.set("eps", 1e-12);
  }
  if (op == "layer_norm") {
    a.set("eps", 1e-5);
    a.set("elementwise_affine", true);
    a.set("bias", true);
  }
  if (op == "dropout") a.set("p", 0.5);
  if (op == "add") a.set("alpha", 1.0);
  if (op == "scale") a.set("shift", 0.0);
  if (op == "cat") a.set("dim", int64_t{0});
  if (op == "flatten") {
    a.set("start_dim", int64_t{1});
    a.set("end_dim", int64_t{-1});
  }
  if (op == "pad") {
    a.set("mode", std::string("constant"));
    a.set("value", 0.0);
  }
  if (op == "roll") a.set("dims", null);
  if (op == "interpolate") {
    a.set("size", null);
    a.set("scale_factor", null);
    a.set("mode", std::string("nearest"));
    a.set("align_corners", false);
  }
  for (const auto& [name, value] : overrides) a.set(name, value);
  return a;
}

inline Tensor random_tensor(const Shape& shape, std::mt19937& gen, float lo = -2.f, float hi = 2.f) {
  Tensor t = Tensor::empty(shape, DType::float32);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& v : t.span<float>()) v = dist(gen);
  return t;
}

inline Tensor random_indices(const Shape& shape, int64_t high, std::mt19937& gen) {
  Tensor t = Tensor::empty(shape, DType::int64);
  std::uniform_int_distribution<int64_t> dist(0, high - 1);
  for (int64_t& v : t.span<int64_t>()) v = dist(gen);
  return t;
}

inline std::vector<TensorDesc> descs(const std::vector<Tensor>& ts) {
  std::vector<TensorDesc> out;
  for (const Tensor& t : ts) out.push_back({t.shape(), t.dtype()});
  return out;
}

/// One kernel invocation: spec, tensors, and the options of KernelArgs.
struct OpCase {
  OpCase(std::string op_name, Attributes attributes) : op(std::move(op_name)), attrs(std::move(attributes)) {}

  std::string op;
  Attributes attrs;
  std::vector<Tensor> inputs;
  std::vector<Tensor> params;
  Shape out_shape;
  DType out_dtype = DType::float32;
  bool training = false;
  uint64_t seed = 0;
  Precision precision = Precision::fp32;  // what the op's matrix work runs in

  KernelSpec spec() const {
    return {op, &attrs, descs(inputs), descs(params), {{out_shape, out_dtype}}, precision};
  }
  KernelArgs args(std::vector<Tensor>& outputs, uint64_t params_version = 0) const {
    return {inputs, params, outputs, training, seed, params_version};
  }
};

/// Runs `c` through its CPU kernel (fresh output filled with NaN, so an unwritten
/// element shows) and returns the output.
inline Tensor run_kernel(const OpCase& c, Kernel& kernel, uint64_t params_version = 0) {
  std::vector<Tensor> out{Tensor::empty(c.out_shape, c.out_dtype)};
  if (c.out_dtype == DType::float32)
    for (float& v : out[0].span<float>()) v = NAN;
  else
    for (int64_t& v : out[0].span<int64_t>()) v = -777;
  kernel.forward(c.args(out, params_version));
  return out[0];
}

inline std::unique_ptr<Kernel> make_kernel(const OpCase& c, CpuContext& ctx = cpu_context()) {
  CpuKernelFactory factory = find_cpu_kernel(c.op);
  REQUIRE(factory != nullptr);
  return factory(ctx, c.spec());
}

inline Tensor run_reference(const OpCase& c) {
  std::vector<Tensor> out{Tensor::zeros(c.out_shape, c.out_dtype)};
  reference::forward(c.spec(), c.args(out));
  return out[0];
}

/// max|a - b| <= 1e-5 * max(1, max|ref|); NaN must match NaN.
inline void require_close(const Tensor& got, const Tensor& ref, double rel = 1e-5) {
  REQUIRE(got.shape() == ref.shape());
  if (ref.dtype() == DType::int64) {
    REQUIRE(got.to_vector<int64_t>() == ref.to_vector<int64_t>());
    return;
  }
  auto g = got.span<float>();
  auto r = ref.span<float>();
  double max_ref = 0.0, max_err = 0.0;
  int64_t worst = -1, nan_mismatch = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::isnan(r[i]) || std::isnan(g[i])) {
      nan_mismatch += std::isnan(r[i]) != std::isnan(g[i]);
      continue;
    }
    max_ref = std::max(max_ref, std::abs(double(r[i])));
    double err = std::abs(double(g[i]) - double(r[i]));
    if (err > max_err) max_err = err, worst = static_cast<int64_t>(i);
  }
  INFO("max error " << max_err << " at element " << worst << ", max |ref| " << max_ref << ", "
                    << nan_mismatch << " NaN mismatches, " << r.size() << " elements");
  REQUIRE(nan_mismatch == 0);
  REQUIRE(max_err <= rel * std::max(1.0, max_ref));
}

/// Kernel vs reference on `c`; also checks that a second forward builds no primitive
/// and gives the same result.
inline void check_against_reference(const OpCase& c, double rel = 1e-5) {
  INFO("op " << c.op << " [" << c.attrs.str() << "] out " << shape_str(c.out_shape));
  auto kernel = make_kernel(c);
  int64_t created = cpu_context().primitives_created();
  Tensor got = run_kernel(c, *kernel);
  Tensor again = run_kernel(c, *kernel);
  REQUIRE(cpu_context().primitives_created() == created);
  require_close(got, run_reference(c), rel);
  require_close(again, got, 0.0);
}

}  // namespace tandem::test
