// Every CUDA op kernel against the CPU backend's kernel for the same spec, forward and
// backward, on fresh random tensors (the seed is printed; TANDEM_TEST_SEED repeats it):
// fp32 within 1e-5 of max(1, max|cpu|).
#include "gpu_test_util.h"

namespace tandem::test {
namespace {

OpCase unary_case(std::mt19937& gen, const std::string& op, Shape shape, std::map<std::string, AttrValue> attrs = {}) {
  OpCase c{op, op_attrs(op, attrs)};
  c.inputs = {random_tensor(shape, gen, -4.f, 4.f)};
  c.out_shape = shape;
  return c;
}

TEST_CASE("linear on a GPU matches the CPU", "[gpu][linear]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape x; int64_t out; bool bias; };
  for (const Case& k : std::vector<Case>{{{1, 10}, 20, true},   {{7, 3}, 5, false},     {{4, 6, 33}, 17, true},
                                         {{256, 512}, 384, true}, {{0, 8}, 4, true},    {{3, 8}, 0, true},
                                         {{5, 0}, 3, true},       {{1024, 1024}, 1024, false}}) {
    INFO("x " << shape_str(k.x) << " out " << k.out << " bias " << k.bias);
    OpCase c{"linear", op_attrs("linear", {{"in_features", k.x.back()}, {"out_features", k.out}, {"bias", k.bias}})};
    c.inputs = {random_tensor(k.x, gen)};
    c.params = {random_tensor({k.out, k.x.back()}, gen)};
    if (k.bias) c.params.push_back(random_tensor({k.out}, gen));
    c.out_shape = k.x;
    c.out_shape.back() = k.out;
    check_gpu_against_cpu(c, gen);
  }
}

TEST_CASE("matmul on a GPU matches the CPU on every broadcast path", "[gpu][matmul]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape a, b, out; };
  for (const Case& k : std::vector<Case>{
           {{5, 6}, {6, 7}, {5, 7}},                {{4, 5, 6}, {6, 7}, {4, 5, 7}},      // fold into M
           {{5, 6}, {3, 6, 7}, {3, 5, 7}},          {{3, 5, 6}, {3, 6, 7}, {3, 5, 7}},   // strided batched
           {{2, 1, 5, 6}, {3, 6, 7}, {2, 3, 5, 7}}, {{2, 3, 5, 6}, {2, 1, 6, 7}, {2, 3, 5, 7}},  // per entry
           {{6}, {6, 7}, {7}},                       {{4, 5, 6}, {6}, {4, 5}},            // 1-D promotion
           {{6}, {6}, {}},                           {{0, 5, 6}, {6, 7}, {0, 5, 7}},
           {{3, 5, 0}, {3, 0, 7}, {3, 5, 7}},        {{8, 64, 128}, {8, 128, 96}, {8, 64, 96}}}) {
    INFO("a " << shape_str(k.a) << " b " << shape_str(k.b));
    OpCase c{"matmul", op_attrs("matmul")};
    c.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
    c.out_shape = k.out;
    check_gpu_against_cpu(c, gen);
  }
}

TEST_CASE("activations on a GPU match the CPU", "[gpu][activation]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  std::vector<std::pair<std::string, std::map<std::string, AttrValue>>> ops = {
      {"relu", {}}, {"tanh", {}}, {"sigmoid", {}},
      {"gelu", {{"approximate", std::string("none")}}}, {"gelu", {{"approximate", std::string("tanh")}}},
      {"relu6", {}}, {"hardswish", {}}, {"hardsigmoid", {}}, {"silu", {}}, {"mish", {}}, {"exp", {}},
      {"clamp", {{"min", -0.5}, {"max", 0.7}}}, {"clamp", {{"max", 0.3}}}};
  for (const auto& [op, attrs] : ops)
    for (Shape shape : {Shape{1}, Shape{7, 3}, Shape{}, Shape{0, 4}, Shape{64, 128}, Shape{300001}}) {
      INFO(op << " " << shape_str(shape));
      check_gpu_against_cpu(unary_case(gen, op, shape, attrs), gen);
    }
}

TEST_CASE("dropout on a GPU drops what the CPU drops for a seed", "[gpu][dropout]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (double p : {0.0, 0.3, 0.5, 1.0})
    for (bool training : {true, false})
      for (Shape shape : {Shape{1}, Shape{7, 9}, Shape{64, 513}}) {
        INFO("p " << p << " training " << training << " " << shape_str(shape));
        OpCase c{"dropout", op_attrs("dropout", {{"p", p}})};
        c.inputs = {random_tensor(shape, gen, 0.5f, 2.f)};
        c.out_shape = shape;
        c.training = training;
        c.seed = gen();
        check_gpu_against_cpu(c, gen, 0.0);  // the same mask and scale: equal bits
      }
}

TEST_CASE("softmax, log_softmax and normalize on a GPU match the CPU", "[gpu][softmax]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; int64_t dim; };
  for (const Case& k : std::vector<Case>{{{5}, 0},        {{3, 4, 5}, 0},   {{3, 4, 5}, 1},    {{3, 4, 5}, -1},
                                         {{1, 1}, -1},    {{2, 3, 700}, 1}, {{64, 128}, -1},  {{64, 128}, 0},
                                         {{}, 0},         {{0, 3}, 1},      {{16, 50000}, -1}, {{4, 3000, 2}, 1}})
    for (const char* op : {"softmax", "log_softmax", "normalize"}) {
      INFO(op << " " << shape_str(k.shape) << " dim " << k.dim);
      OpCase c = unary_case(gen, op, k.shape, {{"dim", k.dim}});
      check_gpu_against_cpu(c, gen);
    }
}

TEST_CASE("sum, mean, amax and amin on a GPU match the CPU", "[gpu][reduce]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; std::vector<int64_t> dims; bool keepdim; Shape out; };
  for (const Case& k : std::vector<Case>{{{3, 4, 5}, {2}, false, {3, 4}},
                                         {{3, 4, 5}, {0, 2}, true, {1, 4, 1}},
                                         {{2, 3, 4, 5}, {1, 3}, false, {2, 4}},
                                         {{6, 7}, {}, false, {}},                  // every dim
                                         {{64, 3000}, {1}, false, {64}},           // long rows: a block each
                                         {{3000, 64}, {0}, true, {1, 64}},         // along the outer dim
                                         {{4, 1, 5}, {1}, false, {4, 5}}})         // over a dimension of 1
    for (const char* op : {"sum", "mean", "amax", "amin"}) {
      INFO(op << " " << shape_str(k.shape) << " dims " << shape_str(k.dims) << " keepdim " << k.keepdim);
      OpCase c{op, op_attrs(op, {{"dim", k.dims}, {"keepdim", k.keepdim}})};
      c.inputs = {random_tensor(k.shape, gen)};
      c.out_shape = k.out;
      check_gpu_against_cpu(c, gen, 2e-5);  // sums in another order
    }
}

TEST_CASE("layer_norm on a GPU matches the CPU", "[gpu][layer_norm]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape shape; std::vector<int64_t> normalized; };
  for (const Case& k : std::vector<Case>{{{4, 8}, {8}},       {{2, 3, 5}, {3, 5}}, {{1, 17}, {17}},
                                         {{64, 256}, {256}},  {{0, 6}, {6}},       {{513, 33}, {33}},
                                         {{8192, 768}, {768}}, {{3, 4096}, {4096}}})
    for (auto [affine, bias] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
      INFO(shape_str(k.shape) << " affine " << affine << " bias " << bias);
      OpCase c{"layer_norm",
               op_attrs("layer_norm", {{"normalized_shape", k.normalized}, {"elementwise_affine", affine},
                                       {"bias", bias}})};
      c.inputs = {random_tensor(k.shape, gen)};
      if (affine) c.params.push_back(random_tensor(k.normalized, gen));
      if (bias) c.params.push_back(random_tensor(k.normalized, gen));
      c.out_shape = k.shape;
      check_gpu_against_cpu(c, gen, 2e-5);  // the CPU's own tolerance against its reference
    }
}

TEST_CASE("add and mul on a GPU broadcast like the CPU", "[gpu][elementwise]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape a, b, out; };
  for (const Case& k : std::vector<Case>{
           {{4}, {4}, {4}},                   {{}, {}, {}},                      {{3, 4}, {}, {3, 4}},
           {{4}, {3, 4}, {3, 4}},             {{3, 1}, {1, 4}, {3, 4}},          {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},
           {{5, 1, 1, 7}, {2, 3, 1}, {5, 2, 3, 7}}, {{0, 3}, {3}, {0, 3}},      {{256, 1024}, {1024}, {256, 1024}},
           {{64, 1, 512}, {64, 32, 1}, {64, 32, 512}}})
    for (const char* op : {"add", "mul"}) {
      INFO(op << " a " << shape_str(k.a) << " b " << shape_str(k.b));
      OpCase c{op, op_attrs(op, std::string(op) == "add" ? std::map<std::string, AttrValue>{{"alpha", -2.5}}
                                                          : std::map<std::string, AttrValue>{})};
      c.inputs = {random_tensor(k.a, gen), random_tensor(k.b, gen)};
      c.out_shape = k.out;
      check_gpu_against_cpu(c, gen);
    }
}

TEST_CASE("expand and parameter on a GPU match the CPU", "[gpu][expand][parameter]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Case { Shape in; std::vector<int64_t> shape; Shape out; };
  for (const Case& k : std::vector<Case>{{{1, 1, 8}, {5, -1, -1}, {5, 1, 8}},
                                         {{3, 4}, {2, 3, 4}, {2, 3, 4}},
                                         {{2, 1, 3}, {-1, 6, -1}, {2, 6, 3}}}) {
    INFO("expand " << shape_str(k.in) << " to " << shape_str(k.out));
    OpCase c{"expand", op_attrs("expand", {{"shape", k.shape}})};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_gpu_against_cpu(c, gen);
  }
  OpCase token{"parameter", op_attrs("parameter", {{"shape", std::vector<int64_t>{1, 3, 4}}})};
  token.inputs = {random_tensor({5, 2}, gen)};
  token.params = {random_tensor({1, 3, 4}, gen)};
  token.out_shape = {1, 3, 4};
  check_gpu_against_cpu(token, gen, 0.0);
}

TEST_CASE("scale, buffer and index_select on a GPU match the CPU", "[gpu][scale][buffer][index_select]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase scaled{"scale", op_attrs("scale", {{"factor", 0.125}})};
  scaled.inputs = {random_tensor({4, 3, 7, 7}, gen)};
  scaled.out_shape = {4, 3, 7, 7};
  check_gpu_against_cpu(scaled, gen, 0.0);
  OpCase mask{"buffer", op_attrs("buffer", {{"shape", std::vector<int64_t>{4, 1, 6, 6}}})};
  mask.inputs = {random_tensor({5, 2}, gen)};
  mask.params = {random_tensor({4, 1, 6, 6}, gen)};
  mask.out_shape = {4, 1, 6, 6};
  check_gpu_against_cpu(mask, gen, 0.0);
  for (int64_t dim : {0, 1, -1}) {
    INFO("index_select along " << dim);
    OpCase c{"index_select", op_attrs("index_select", {{"dim", dim}})};
    const Shape source{5, 6, 3};
    const int64_t size = source[static_cast<size_t>(dim < 0 ? dim + 3 : dim)];
    c.inputs = {random_tensor(source, gen), random_indices({9}, size, gen)};  // repeats: atomicAdd sums
    c.out_shape = source;
    c.out_shape[static_cast<size_t>(dim < 0 ? dim + 3 : dim)] = 9;
    check_gpu_against_cpu(c, gen, 1e-6);
  }
}

OpCase embedding_case(std::mt19937& gen, Shape idx_shape, int64_t num, int64_t dim) {
  OpCase c{"embedding", op_attrs("embedding", {{"num_embeddings", num}, {"embedding_dim", dim}})};
  c.inputs = {random_indices(idx_shape, num, gen)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = idx_shape;
  c.out_shape.push_back(dim);
  return c;
}

TEST_CASE("embedding on a GPU matches the CPU, repeated rows and padding included", "[gpu][embedding]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_gpu_against_cpu(embedding_case(gen, {4, 9}, 50, 33), gen);
  check_gpu_against_cpu(embedding_case(gen, {512, 64}, 20, 128), gen);  // many repeats: atomicAdd collisions
  check_gpu_against_cpu(embedding_case(gen, {0}, 10, 4), gen);
  OpCase padded = embedding_case(gen, {6, 5}, 8, 5);
  padded.attrs.set("padding_idx", int64_t{2});
  padded.inputs[0].span<int64_t>()[0] = 2;
  check_gpu_against_cpu(padded, gen);
}

OpCase bag_case(std::mt19937& gen, const std::vector<int64_t>& sizes, int64_t num, int64_t dim,
                const std::string& mode, bool include_last) {
  OpCase c{"embedding_bag", op_attrs("embedding_bag", {{"num_embeddings", num},
                                                        {"embedding_dim", dim},
                                                        {"mode", mode},
                                                        {"include_last_offset", include_last}})};
  std::vector<int64_t> offsets{0};
  for (int64_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t total = offsets.back();
  if (!include_last) offsets.pop_back();
  c.inputs = {random_indices({total}, num, gen), Tensor::from_vector<int64_t>({int64_t(offsets.size())}, offsets)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = {static_cast<int64_t>(sizes.size()), dim};
  return c;
}

TEST_CASE("embedding_bag on a GPU matches the CPU for sum, mean and max", "[gpu][embedding_bag]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (std::string mode : {"sum", "mean", "max"}) {
    INFO("mode " << mode);
    OpCase fixed{"embedding_bag", op_attrs("embedding_bag", {{"num_embeddings", int64_t{20}},
                                                              {"embedding_dim", int64_t{9}},
                                                              {"mode", mode}})};
    fixed.inputs = {random_indices({4, 7}, 20, gen)};
    fixed.params = {random_tensor({20, 9}, gen)};
    fixed.out_shape = {4, 9};
    check_gpu_against_cpu(fixed, gen);
    for (bool include_last : {false, true}) {
      check_gpu_against_cpu(bag_case(gen, {3, 0, 5, 1}, 30, 16, mode, include_last), gen);  // an empty bag
      check_gpu_against_cpu(bag_case(gen, std::vector<int64_t>(256, 40), 1000, 64, mode, include_last), gen);
    }
    OpCase padded = bag_case(gen, {4, 4}, 10, 6, mode, false);
    padded.attrs.set("padding_idx", int64_t{3});
    padded.inputs[0].span<int64_t>()[1] = 3;
    check_gpu_against_cpu(padded, gen);
  }
}

TEST_CASE("embedding and embedding_bag on a GPU reject bad indices and offsets as the CPU does",
          "[gpu][embedding][errors]") {
  std::mt19937 gen(7);
  OpCase c = embedding_case(gen, {2, 3}, 10, 4);
  c.inputs[0].span<int64_t>()[4] = 10;
  auto kernel = make_gpu_kernel(c);
  REQUIRE_THROWS_WITH(run_gpu_forward(c, *kernel),
                      Catch::Contains("index 10") && Catch::Contains("position 4") && Catch::Contains("[0, 10)"));
  OpCase bag = bag_case(gen, {2, 2}, 10, 4, "sum", false);
  bag.inputs[1].span<int64_t>()[1] = 7;  // past the 4 indices
  auto bag_kernel = make_gpu_kernel(bag);
  REQUIRE_THROWS_WITH(run_gpu_forward(bag, *bag_kernel), Catch::Contains("offsets[1] is 7"));
  bag.inputs[1].span<int64_t>()[1] = 2;
  bag.inputs[0].span<int64_t>()[3] = -1;
  REQUIRE_THROWS_WITH(run_gpu_forward(bag, *bag_kernel), Catch::Contains("index -1") && Catch::Contains("position 3"));
}

TEST_CASE("cat, narrow, flatten, reshape and permute on a GPU match the CPU", "[gpu][shape]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (int64_t dim : {0, 1, 2, -1}) {
    OpCase c{"cat", op_attrs("cat", {{"dim", dim}})};
    Shape a{2, 3, 4}, b{2, 3, 4};
    const int64_t d = dim < 0 ? dim + 3 : dim;
    b[d] = 5;
    c.inputs = {random_tensor(a, gen), random_tensor(b, gen), random_tensor(a, gen)};
    c.out_shape = a;
    c.out_shape[d] = a[d] * 2 + b[d];
    check_gpu_against_cpu(c, gen);
  }
  OpCase ints{"cat", op_attrs("cat", {{"dim", int64_t{0}}})};
  ints.inputs = {random_indices({3, 2}, 100, gen), random_indices({1, 2}, 100, gen)};
  ints.out_shape = {4, 2};
  ints.out_dtype = DType::int64;
  check_gpu_against_cpu(ints, gen, 0.0, false);
  OpCase narrow{"narrow", op_attrs("narrow", {{"dim", int64_t{1}}, {"start", int64_t{2}}, {"length", int64_t{3}}})};
  narrow.inputs = {random_tensor({4, 7, 5}, gen)};
  narrow.out_shape = {4, 3, 5};
  check_gpu_against_cpu(narrow, gen);
  OpCase flatten{"flatten", op_attrs("flatten")};
  flatten.inputs = {random_tensor({4, 3, 5}, gen)};
  flatten.out_shape = {4, 15};
  check_gpu_against_cpu(flatten, gen);
  OpCase reshape{"reshape", op_attrs("reshape")};
  reshape.inputs = {random_tensor({4, 3, 5}, gen)};
  reshape.out_shape = {5, 12};
  check_gpu_against_cpu(reshape, gen);
  // A channel shuffle's transpose (rows copied) and NCHW to NHWC (an element at a time)
  OpCase shuffle{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}})};
  shuffle.inputs = {random_tensor({3, 2, 5, 4, 6}, gen)};
  shuffle.out_shape = {3, 5, 2, 4, 6};
  check_gpu_against_cpu(shuffle, gen);
  OpCase nhwc{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{0, 2, 3, -3}}})};
  nhwc.inputs = {random_tensor({2, 7, 3, 5}, gen)};
  nhwc.out_shape = {2, 3, 5, 7};
  check_gpu_against_cpu(nhwc, gen);
  OpCase int_permute{"permute", op_attrs("permute", {{"dims", std::vector<int64_t>{1, 0}}})};
  int_permute.inputs = {random_indices({3, 4}, 100, gen)};
  int_permute.out_shape = {4, 3};
  int_permute.out_dtype = DType::int64;
  check_gpu_against_cpu(int_permute, gen, 0.0, false);
}

// swin's pad and shift (NHWC, H and W), a crop, a flattened roll, and interpolate's modes:
// the bilinear backward adds with atomics, so its sums may differ in the last bits.
TEST_CASE("pad, roll and interpolate on a GPU match the CPU", "[gpu][pad][roll][interpolate]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  using Ints = std::vector<int64_t>;
  struct Case {
    std::string op;
    std::map<std::string, AttrValue> attrs;
    Shape in, out;
  };
  const std::vector<Case> cases = {
      {"pad", {{"pad", Ints{0, 0, 0, 3, 0, 1}}, {"value", 0.5}}, {2, 5, 4, 6}, {2, 6, 7, 6}},
      {"pad", {{"pad", Ints{-1, 2, 1, -2}}}, {3, 5, 6}, {3, 4, 7}},
      {"roll", {{"shifts", Ints{-2, -2}}, {"dims", Ints{1, 2}}}, {2, 6, 6, 5}, {2, 6, 6, 5}},
      {"roll", {{"shifts", Ints{4}}, {"dims", AttrValue{std::monostate{}}}}, {3, 5}, {3, 5}},
      {"interpolate", {{"scale_factor", 1.7}}, {1, 2, 5}, {1, 2, 8}},
      {"interpolate", {{"size", Ints{7, 3}}}, {2, 3, 4, 5}, {2, 3, 7, 3}},
      {"interpolate", {{"scale_factor", 2.0}, {"mode", std::string("bilinear")}}, {2, 3, 4, 5}, {2, 3, 8, 10}},
      {"interpolate", {{"size", Ints{9, 4}}, {"mode", std::string("bilinear")}, {"align_corners", true}},
       {1, 2, 4, 7}, {1, 2, 9, 4}},
  };
  for (const Case& k : cases) {
    OpCase c{k.op, op_attrs(k.op, k.attrs)};
    c.inputs = {random_tensor(k.in, gen)};
    c.out_shape = k.out;
    check_gpu_against_cpu(c, gen, 1e-5);
  }
  OpCase ints{"roll", op_attrs("roll", {{"shifts", Ints{1}}, {"dims", Ints{0}}})};
  ints.inputs = {random_indices({4, 3}, 100, gen)};
  ints.out_shape = {4, 3};
  ints.out_dtype = DType::int64;
  check_gpu_against_cpu(ints, gen, 0.0, false);
}

TEST_CASE("make_cuda_kernel says why it has no kernel", "[gpu][registry]") {
  // The CUDA backend has every op the CPU has today, so an op no backend knows stands for
  // the one it lacks (placement asks the same question of every layer).
  Attributes attrs = op_attrs("relu");
  KernelSpec unknown{"fft2d", &attrs, {{{1, 3, 8, 8}, DType::float32}}, {}, {{{1, 3, 8, 8}, DType::float32}}};
  cuda::CudaKernelChoice choice = cuda::make_cuda_kernel(gpu(), unknown);
  CHECK(choice.kernel == nullptr);
  CHECK_THAT(choice.unsupported, Catch::Contains("no kernel for op 'fft2d'"));
  KernelSpec ints{"relu", &attrs, {{{4}, DType::int64}}, {}, {{{4}, DType::int64}}};
  choice = cuda::make_cuda_kernel(gpu(), ints);
  CHECK(choice.kernel == nullptr);
  CHECK_THAT(choice.unsupported, Catch::Contains("int64"));
  for (std::string_view op : cuda::cuda_ops()) CHECK(find_cpu_kernel(op) != nullptr);  // a subset of the CPU's
}

}  // namespace
}  // namespace tandem::test
