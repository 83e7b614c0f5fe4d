// add / mul with broadcasting, cat, flatten, reshape and permute against the reference.
#include "kernel_test_util.h"

namespace tandem::test {
namespace {

TEST_CASE("add and mul broadcast like torch", "[cpu][elementwise]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape a, b, out; };
  std::vector<Case> cases = {
      {{4}, {4}, {4}},                      {{1}, {1}, {1}},
      {{}, {}, {}},                         {{3, 4}, {}, {3, 4}},
      {{}, {3, 4}, {3, 4}},                 {{3, 4}, {4}, {3, 4}},
      {{4}, {3, 4}, {3, 4}},                {{3, 1}, {1, 4}, {3, 4}},
      {{3, 1}, {3, 4}, {3, 4}},             {{2, 3, 4}, {3, 1}, {2, 3, 4}},
      {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},    {{5, 1, 1, 7}, {2, 3, 1}, {5, 2, 3, 7}},
      {{1, 1, 1}, {2, 3, 4}, {2, 3, 4}},    {{0, 3}, {3}, {0, 3}},
      {{256, 1024}, {1024}, {256, 1024}},   {{64, 1, 512}, {64, 32, 1}, {64, 32, 512}},
      {{128, 300}, {128, 300}, {128, 300}},
  };
  for (const Case& k : cases) {
    INFO("a " << shape_str(k.a) << " b " << shape_str(k.b));
    for (const char* op : {"add", "mul"}) {
      OpCase c{op, op_attrs(op)};
      c.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
      c.out_shape = k.out;
      check_against_reference(c);
    }
    OpCase scaled{"add", op_attrs("add", {{"alpha", -2.5}})};
    scaled.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
    scaled.out_shape = k.out;
    check_against_reference(scaled);
  }
}

TEST_CASE("cat concatenates along any dim", "[cpu][cat]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { std::vector<Shape> ins; int64_t dim; Shape out; };
  std::vector<Case> cases = {
      {{{3}, {4}}, 0, {7}},
      {{{2, 3}, {4, 3}}, 0, {6, 3}},
      {{{2, 3}, {2, 1}, {2, 5}}, 1, {2, 9}},
      {{{2, 3}, {2, 1}, {2, 5}}, -1, {2, 9}},
      {{{2, 3, 4}, {2, 2, 4}}, -2, {2, 5, 4}},
      {{{2, 3, 4}, {2, 3, 0}, {2, 3, 1}}, 2, {2, 3, 5}},
      {{{1, 1}, {1, 1}}, 0, {2, 1}},
      {{{64, 300}, {64, 200}}, 1, {64, 500}},
  };
  for (const Case& k : cases) {
    INFO("dim " << k.dim << " out " << shape_str(k.out));
    OpCase c{"cat", op_attrs("cat", {{"dim", k.dim}})};
    for (const Shape& s : k.ins) c.inputs.push_back(random_tensor(s, gen));
    c.out_shape = k.out;
    check_against_reference(c);
  }
  OpCase ints{"cat", op_attrs("cat", {{"dim", int64_t{0}}})};
  ints.inputs = {random_indices({2, 2}, 100, gen), random_indices({1, 2}, 100, gen)};
  ints.out_shape = {3, 2};
  ints.out_dtype = DType::int64;
  check_against_reference(ints);
}

TEST_CASE("cat refuses an out-of-range dim", "[cpu][cat][errors]") {
  OpCase c{"cat", op_attrs("cat", {{"dim", int64_t{-3}}})};
  c.inputs = {Tensor::zeros({2, 3}, DType::float32), Tensor::zeros({2, 3}, DType::float32)};
  c.out_shape = {4, 3};
  REQUIRE_THROWS_WITH(make_kernel(c), Catch::Contains("dim -3 is out of range"));
}

TEST_CASE("flatten and reshape copy the data", "[cpu][reshape]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase f{"flatten", op_attrs("flatten")};
  f.inputs = {random_tensor({2, 3, 4}, gen)};
  f.out_shape = {2, 12};
  check_against_reference(f);
  require_close(run_kernel(f, *make_kernel(f)).view({24}), f.inputs[0].view({24}), 0.0);
  OpCase r{"reshape", op_attrs("reshape", {{"shape", std::vector<int64_t>{-1, 6}}})};
  r.inputs = {random_tensor({300, 1000}, gen)};
  r.out_shape = {50000, 6};
  check_against_reference(r);
  OpCase ints{"reshape", op_attrs("reshape", {{"shape", std::vector<int64_t>{4}}})};
  ints.inputs = {random_indices({2, 2}, 9, gen)};
  ints.out_shape = {4};
  ints.out_dtype = DType::int64;
  check_against_reference(ints);
  OpCase empty{"flatten", op_attrs("flatten")};
  empty.inputs = {random_tensor({0, 5}, gen)};
  empty.out_shape = {0, 5};
  check_against_reference(empty);
}

// vit's class token [1, 1, D] repeated over the batch, a new leading dim, a middle dim
// repeated between two kept ones, the identity and an empty batch.
TEST_CASE("expand repeats the size-1 dims", "[cpu][expand]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape in; std::vector<int64_t> shape; Shape out; };
  std::vector<Case> cases = {
      {{1, 1, 8}, {5, -1, -1}, {5, 1, 8}},
      {{3, 4}, {2, 3, 4}, {2, 3, 4}},
      {{2, 1, 3}, {-1, 6, -1}, {2, 6, 3}},
      {{3, 1}, {3, 7}, {3, 7}},
      {{2, 3}, {2, 3}, {2, 3}},
      {{1, 4}, {0, 4}, {0, 4}},
  };
  for (const Case& k : cases) {
    INFO("in " << shape_str(k.in) << " out " << shape_str(k.out));
    OpCase c{"expand", op_attrs("expand", {{"shape", k.shape}})};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_against_reference(c);
  }
}

// A learned tensor: its output is its parameter, whatever the input it reads.
TEST_CASE("parameter gives its weight", "[cpu][parameter]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c{"parameter", op_attrs("parameter", {{"shape", std::vector<int64_t>{1, 3, 4}}})};
  c.inputs = {random_tensor({5, 2}, gen)};
  c.params = {random_tensor({1, 3, 4}, gen)};
  c.out_shape = {1, 3, 4};
  check_against_reference(c);
  require_close(run_kernel(c, *make_kernel(c)), c.params[0], 0.0);
  OpCase ids = c;
  ids.inputs = {random_indices({4}, 10, gen)};
  require_close(run_kernel(ids, *make_kernel(ids)), c.params[0], 0.0);
}

// swin's relative position bias: rows of a table at indices that repeat, and a
// selection along a middle and the last dimension; an index out of range is named.
TEST_CASE("index_select takes the entries at the indices", "[cpu][index_select]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape source; int64_t dim; int64_t count; };
  for (const Case& k : std::vector<Case>{{{49, 3}, 0, 256}, {{2, 5, 4}, 1, 7}, {{2, 5, 4}, -1, 3}, {{6}, 0, 1}}) {
    OpCase c{"index_select", op_attrs("index_select", {{"dim", k.dim}})};
    const size_t d = static_cast<size_t>(k.dim < 0 ? k.dim + static_cast<int64_t>(k.source.size()) : k.dim);
    c.inputs = {random_tensor(k.source, gen), random_indices({k.count}, k.source[d], gen)};
    c.out_shape = k.source;
    c.out_shape[d] = k.count;
    check_against_reference(c, 0.0);
  }
  OpCase bad{"index_select", op_attrs("index_select", {{"dim", int64_t{0}}})};
  bad.inputs = {random_tensor({4, 2}, gen), Tensor::from_vector<int64_t>({3}, {1, 4, 0})};
  bad.out_shape = {3, 2};
  REQUIRE_THROWS_WITH(run_kernel(bad, *make_kernel(bad)), "index_select: index 4 at position 1 is out of range [0, 4)");
}

// A tensor that is not learned: its bytes, int64 ones too.
TEST_CASE("buffer gives its values, int64 ones too", "[cpu][buffer]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c{"buffer", op_attrs("buffer", {{"shape", std::vector<int64_t>{4, 1, 3}}})};
  c.inputs = {random_tensor({5, 2}, gen)};
  c.params = {random_tensor({4, 1, 3}, gen)};
  c.out_shape = {4, 1, 3};
  require_close(run_kernel(c, *make_kernel(c)), c.params[0], 0.0);
  OpCase ids{"buffer", op_attrs("buffer", {{"shape", std::vector<int64_t>{6}}, {"dtype", std::string("int64")}})};
  ids.inputs = {random_tensor({5, 2}, gen)};
  ids.params = {random_indices({6}, 1000, gen)};
  ids.out_shape = {6};
  KernelSpec spec = ids.spec();
  spec.outputs[0].dtype = DType::int64;
  auto kernel = find_cpu_kernel("buffer")(cpu_context(), spec);
  std::vector<Tensor> outs{Tensor::empty({6}, DType::int64)};
  kernel->forward({ids.inputs, ids.params, outs});
  const Tensor& out = outs[0];
  for (int64_t i = 0; i < 6; ++i) CHECK(out.data<int64_t>()[i] == ids.params[0].data<int64_t>()[i]);
}

// The dims of a channel shuffle (shufflenet), NCHW to NHWC and back (convnext), a full
// reversal, size-1 dims that drop out, negative dims, the identity, a 0-D and an empty one.
TEST_CASE("permute reorders the dimensions", "[cpu][permute]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape in; std::vector<int64_t> dims; Shape out; };
  std::vector<Case> cases = {
      {{3, 2, 5, 4, 6}, {0, 2, 1, 3, 4}, {3, 5, 2, 4, 6}},
      {{2, 5, 3, 4}, {0, 2, 3, 1}, {2, 3, 4, 5}},
      {{2, 3, 4, 5}, {0, 3, 1, 2}, {2, 5, 3, 4}},
      {{2, 3, 4, 5}, {3, 2, 1, 0}, {5, 4, 3, 2}},
      {{1, 4, 1, 3}, {3, 2, 1, 0}, {3, 1, 4, 1}},
      {{3, 4, 5}, {-1, 0, -2}, {5, 3, 4}},
      {{3, 4}, {0, 1}, {3, 4}},
      {{7}, {0}, {7}},
      {{}, {}, {}},
      {{0, 3, 2}, {2, 0, 1}, {2, 0, 3}},
      {{64, 96, 14, 14}, {0, 2, 3, 1}, {64, 14, 14, 96}},
  };
  for (const Case& k : cases) {
    INFO("in " << shape_str(k.in) << " out " << shape_str(k.out));
    OpCase c{"permute", op_attrs("permute", {{"dims", k.dims}})};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_against_reference(c);
  }
  OpCase ints{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{1, 0}}})};
  ints.inputs = {random_indices({3, 5}, 100, gen)};
  ints.out_shape = {5, 3};
  ints.out_dtype = DType::int64;
  check_against_reference(ints);
}

TEST_CASE("permute refuses dims that are not a permutation", "[cpu][permute][errors]") {
  OpCase twice{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{0, 0}}})};
  twice.inputs = {Tensor::zeros({2, 3}, DType::float32)};
  twice.out_shape = {2, 2};
  REQUIRE_THROWS_WITH(make_kernel(twice), Catch::Contains("names dimension 0 twice"));
  OpCase short_dims{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{1}}})};
  short_dims.inputs = {Tensor::zeros({2, 3}, DType::float32)};
  short_dims.out_shape = {3, 2};
  REQUIRE_THROWS_WITH(make_kernel(short_dims), Catch::Contains("1 entries for an input of rank 2"));
}

}  // namespace
}  // namespace tandem::test
