// pad, roll and interpolate, forward and backward, against the reference and finite
// differences: swin's pad to whole windows and its roll by half a window (NHWC, dims 1
// and 2), crops (negative pads), a flattened roll, and nearest / bilinear resizes up and
// down by size and by scale_factor, with and without align_corners.
#include "backward_test_util.h"

namespace tandem::test {
namespace {

using Ints = std::vector<int64_t>;

struct Case {
  std::string op;
  std::map<std::string, AttrValue> attrs;
  Shape in, out;
};

std::vector<Case> cases() {
  const AttrValue null{std::monostate{}};
  return {
      {"pad", {{"pad", Ints{1, 2}}}, {2, 3, 4}, {2, 3, 7}},
      {"pad", {{"pad", Ints{0, 0, 0, 3, 0, 1}}, {"value", 0.5}}, {2, 5, 4, 6}, {2, 6, 7, 6}},  // swin: H, W of NHWC
      {"pad", {{"pad", Ints{-1, 2, 1, -2}}}, {3, 5, 6}, {3, 4, 7}},                           // crops and pads
      {"pad", {{"pad", Ints{1, 1, 1, 1, 1, 1}}, {"value", -1.0}}, {2, 3, 4}, {4, 5, 6}},       // every dim
      {"roll", {{"shifts", Ints{-2, -2}}, {"dims", Ints{1, 2}}}, {2, 6, 6, 5}, {2, 6, 6, 5}},  // swin's shift
      {"roll", {{"shifts", Ints{3, 7}}, {"dims", Ints{-1, 0}}}, {4, 3, 5}, {4, 3, 5}},        // past a whole turn
      {"roll", {{"shifts", Ints{1, 2}}, {"dims", Ints{1, 1}}}, {2, 5}, {2, 5}},               // a dim twice: added
      {"roll", {{"shifts", Ints{4}}, {"dims", null}}, {3, 5}, {3, 5}},                        // flattened
      {"interpolate", {{"scale_factor", 2.0}}, {2, 3, 4, 5}, {2, 3, 8, 10}},
      {"interpolate", {{"size", Ints{7, 3}}}, {2, 3, 4, 5}, {2, 3, 7, 3}},
      {"interpolate", {{"scale_factor", 1.7}}, {1, 2, 5}, {1, 2, 8}},
      {"interpolate", {{"size", Ints{3, 5, 2}}}, {1, 2, 2, 4, 6}, {1, 2, 3, 5, 2}},
      {"interpolate", {{"scale_factor", 2.0}, {"mode", std::string("bilinear")}}, {2, 3, 4, 5}, {2, 3, 8, 10}},
      {"interpolate", {{"size", Ints{9, 4}}, {"mode", std::string("bilinear")}}, {1, 2, 4, 7}, {1, 2, 9, 4}},
      {"interpolate", {{"size", Ints{9, 4}}, {"mode", std::string("bilinear")}, {"align_corners", true}},
       {1, 2, 4, 7}, {1, 2, 9, 4}},
      {"interpolate", {{"scale_factor", 0.6}, {"mode", std::string("bilinear")}, {"align_corners", true}},
       {2, 1, 5, 6}, {2, 1, 3, 3}},
      {"interpolate", {{"scale_factor", 2.5}, {"mode", std::string("bilinear")}}, {1, 2, 3, 4}, {1, 2, 7, 10}},
  };
}

OpCase op_case(const Case& k, std::mt19937& gen) {
  OpCase c{k.op, op_attrs(k.op, k.attrs)};
  c.inputs = {random_tensor(k.in, gen)};
  c.out_shape = k.out;
  return c;
}

TEST_CASE("pad, roll and interpolate match the reference", "[cpu][pad][roll][interpolate]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (const Case& k : cases()) {
    INFO(k.op << " in " << shape_str(k.in));
    check_against_reference(op_case(k, gen));
  }
  // roll moves bytes: int64 too
  OpCase ints{"roll", op_attrs("roll", {{"shifts", Ints{1}}, {"dims", Ints{0}}})};
  ints.inputs = {random_indices({4, 3}, 100, gen)};
  ints.out_shape = {4, 3};
  ints.out_dtype = DType::int64;
  check_against_reference(ints);
}

TEST_CASE("pad, roll and interpolate backward", "[cpu][backward][pad][roll][interpolate]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (const Case& k : cases()) {
    INFO(k.op << " in " << shape_str(k.in));
    check_backward(op_case(k, gen), gen, 1e-5);
  }
  check_finite_differences(op_case(cases()[2], gen), gen);
  check_finite_differences(op_case(cases()[4], gen), gen);
  check_finite_differences(op_case(cases()[13], gen), gen);
}

}  // namespace
}  // namespace tandem::test
