// embedding and embedding_bag kernels against the reference, and their input checks.
#include "kernel_test_util.h"

namespace tandem::test {
namespace {

OpCase embedding_case(std::mt19937& gen, Shape idx_shape, int64_t num, int64_t dim) {
  OpCase c{"embedding", op_attrs("embedding", {{"num_embeddings", num}, {"embedding_dim", dim}})};
  c.inputs = {random_indices(idx_shape, num, gen)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = idx_shape;
  c.out_shape.push_back(dim);
  return c;
}

TEST_CASE("embedding gathers rows", "[cpu][embedding]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_against_reference(embedding_case(gen, {1}, 10, 4));
  check_against_reference(embedding_case(gen, {7}, 3, 1));
  check_against_reference(embedding_case(gen, {4, 9}, 50, 33));
  check_against_reference(embedding_case(gen, {2, 3, 5}, 1000, 64));
  check_against_reference(embedding_case(gen, {0}, 10, 4));
  check_against_reference(embedding_case(gen, {512, 64}, 5000, 128));  // parallel path
  OpCase padded = embedding_case(gen, {6}, 8, 5);
  padded.attrs.set("padding_idx", int64_t{2});  // no effect on forward
  padded.inputs[0].span<int64_t>()[0] = 2;
  check_against_reference(padded);
}

TEST_CASE("embedding rejects an index out of range", "[cpu][embedding][errors]") {
  std::mt19937 gen(7);
  OpCase c = embedding_case(gen, {2, 3}, 10, 4);
  auto kernel = make_kernel(c);
  c.inputs[0].span<int64_t>()[4] = 10;
  REQUIRE_THROWS_AS(run_kernel(c, *kernel), UserError);
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("index 10") && Catch::Contains("[0, 10)"));
  c.inputs[0].span<int64_t>()[4] = -1;
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("index -1") && Catch::Contains("position 4"));
}

OpCase bag_case_2d(std::mt19937& gen, int64_t bags, int64_t len, int64_t num, int64_t dim, const std::string& mode) {
  OpCase c{"embedding_bag",
           op_attrs("embedding_bag", {{"num_embeddings", num}, {"embedding_dim", dim}, {"mode", mode}})};
  c.inputs = {random_indices({bags, len}, num, gen)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = {bags, dim};
  return c;
}

/// Bags of the given sizes (0 allowed), flattened into indices + offsets.
OpCase bag_case_offsets(std::mt19937& gen, const std::vector<int64_t>& sizes, int64_t num, int64_t dim,
                        const std::string& mode, bool include_last) {
  OpCase c{"embedding_bag", op_attrs("embedding_bag", {{"num_embeddings", num},
                                                        {"embedding_dim", dim},
                                                        {"mode", mode},
                                                        {"include_last_offset", include_last}})};
  std::vector<int64_t> offsets{0};
  for (int64_t s : sizes) offsets.push_back(offsets.back() + s);
  int64_t total = offsets.back();
  if (!include_last) offsets.pop_back();
  c.inputs = {random_indices({total}, num, gen), Tensor::from_vector<int64_t>({int64_t(offsets.size())}, offsets)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = {static_cast<int64_t>(sizes.size()), dim};
  return c;
}

TEST_CASE("embedding_bag matches torch for sum, mean and max", "[cpu][embedding_bag]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (std::string mode : {"sum", "mean", "max"}) {
    INFO("mode " << mode);
    check_against_reference(bag_case_2d(gen, 1, 1, 5, 3, mode));
    check_against_reference(bag_case_2d(gen, 4, 7, 20, 9, mode));
    check_against_reference(bag_case_2d(gen, 3, 0, 20, 9, mode));  // empty bags
    check_against_reference(bag_case_2d(gen, 256, 40, 1000, 64, mode));  // parallel path
    for (bool include_last : {false, true}) {
      INFO("include_last_offset " << include_last);
      check_against_reference(bag_case_offsets(gen, {3, 0, 5, 1, 0}, 30, 7, mode, include_last));
      check_against_reference(bag_case_offsets(gen, {0}, 30, 7, mode, include_last));
      check_against_reference(bag_case_offsets(gen, {1}, 30, 1, mode, include_last));
      check_against_reference(bag_case_offsets(gen, {2, 4, 6, 8, 10, 12}, 100, 33, mode, include_last));
    }
    // padding_idx entries are skipped and not counted; an all-padding bag is zeros.
    for (int64_t padding : {int64_t{3}, int64_t{-2}}) {
      INFO("padding_idx " << padding);
      OpCase c = bag_case_offsets(gen, {4, 2, 3}, 6, 5, mode, false);
      c.attrs.set("padding_idx", padding);
      int64_t row = padding < 0 ? padding + 6 : padding;
      auto idx = c.inputs[0].span<int64_t>();
      idx[0] = row;
      idx[4] = row;
      idx[5] = row;  // bag 1 is all padding
      check_against_reference(c);
      Tensor out = run_kernel(c, *make_kernel(c));
      for (int64_t d = 0; d < 5; ++d) CHECK(out.span<float>()[5 + d] == 0.f);
    }
  }
}

TEST_CASE("embedding_bag mean of a known bag", "[cpu][embedding_bag]") {
  OpCase c{"embedding_bag", op_attrs("embedding_bag", {{"num_embeddings", int64_t{3}},
                                                        {"embedding_dim", int64_t{2}},
                                                        {"padding_idx", int64_t{0}}})};
  c.inputs = {Tensor::from_vector<int64_t>({4}, {1, 0, 2, 2}), Tensor::from_vector<int64_t>({2}, {0, 2})};
  c.params = {Tensor::from_vector<float>({3, 2}, {100, 100, 1, 2, 3, 5})};
  c.out_shape = {2, 2};
  Tensor out = run_kernel(c, *make_kernel(c));
  // Bag 0 = {1, pad}: mean over one row; bag 1 = {2, 2}.
  CHECK(out.to_vector<float>() == std::vector<float>{1, 2, 3, 5});
}

TEST_CASE("embedding_bag rejects bad indices and offsets", "[cpu][embedding_bag][errors]") {
  std::mt19937 gen(3);
  OpCase c = bag_case_offsets(gen, {2, 3, 1}, 10, 4, "sum", false);
  auto kernel = make_kernel(c);
  auto offsets = c.inputs[1].span<int64_t>();
  offsets[0] = 1;
  REQUIRE_THROWS_AS(run_kernel(c, *kernel), UserError);
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("offsets[0] is 1"));
  offsets[0] = 0;
  offsets[2] = 1;  // decreasing
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("offsets[2] is 1") && Catch::Contains("[2, 6]"));
  offsets[2] = 7;  // past the 6 indices
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("offsets[2] is 7"));
  offsets[2] = 5;
  REQUIRE_NOTHROW(run_kernel(c, *kernel));
  c.inputs[0].span<int64_t>()[5] = 99;
  REQUIRE_THROWS_WITH(run_kernel(c, *kernel), Catch::Contains("index 99") && Catch::Contains("[0, 10)"));

  OpCase last = bag_case_offsets(gen, {2, 3}, 10, 4, "mean", true);
  auto last_kernel = make_kernel(last);
  last.inputs[1].span<int64_t>()[2] = 6;  // end past N = 5
  REQUIRE_THROWS_WITH(run_kernel(last, *last_kernel), Catch::Contains("offsets[2] is 6"));
}

}  // namespace
}  // namespace tandem::test
