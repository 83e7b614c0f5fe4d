// linear and matmul kernels against the reference; primitive reuse; weight re-packing.
#include "kernel_test_util.h"

namespace tandem::test {
namespace {

OpCase linear_case(std::mt19937& gen, Shape x_shape, int64_t out, bool bias) {
  int64_t in = x_shape.back();
  OpCase c{"linear", op_attrs("linear", {{"in_features", in}, {"out_features", out}, {"bias", bias}})};
  c.inputs = {random_tensor(x_shape, gen)};
  c.params = {random_tensor({out, in}, gen, -0.5f, 0.5f)};
  if (bias) c.params.push_back(random_tensor({out}, gen));
  c.out_shape = x_shape;
  c.out_shape.back() = out;
  return c;
}

TEST_CASE("linear matches the reference", "[cpu][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Shape3 { Shape x; int64_t out; };
  std::vector<Shape3> shapes = {
      {{1, 10}, 20},       {{3, 7}, 5},        {{10}, 20},          {{2, 3, 10}, 20},  {{1, 1}, 1},
      {{4, 0}, 3},         {{0, 5}, 3},        {{1, 300}, 301},     {{37, 129}, 65},   {{256, 256}, 256},
      {{2, 5, 64}, 130},   {{1, 1024}, 1024},  {{256, 1024}, 1024},  // the benchmark shape
  };
  for (const auto& s : shapes)
    for (bool bias : {true, false}) {
      INFO("x " << shape_str(s.x) << " out " << s.out << " bias " << bias);
      check_against_reference(linear_case(gen, s.x, s.out, bias));
    }
}

TEST_CASE("linear re-packs its weight when params_version or the weight changes", "[cpu][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c = linear_case(gen, {64, 256}, 256, true);  // large enough for the oneDNN path
  auto kernel = make_kernel(c);
  require_close(run_kernel(c, *kernel, 1), run_reference(c));
  // New values in the same buffer, new version: the result must follow.
  Tensor fresh = random_tensor({256, 256}, gen, -0.5f, 0.5f);
  std::copy(fresh.span<float>().begin(), fresh.span<float>().end(), c.params[0].span<float>().begin());
  require_close(run_kernel(c, *kernel, 2), run_reference(c));
  // Another buffer, same version: the pointer change must be noticed.
  c.params[0] = random_tensor({256, 256}, gen, -0.5f, 0.5f);
  require_close(run_kernel(c, *kernel, 2), run_reference(c));
}

TEST_CASE("repeated forwards and recompiles create no primitive", "[cpu][primitives]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  std::vector<OpCase> cases;
  cases.push_back(linear_case(gen, {128, 512}, 256, true));
  OpCase mm{"matmul", op_attrs("matmul")};
  mm.inputs = {random_tensor({4, 64, 32}, gen), random_tensor({32, 48}, gen)};
  mm.out_shape = {4, 64, 48};
  cases.push_back(mm);
  OpCase sm{"softmax", op_attrs("softmax", {{"dim", int64_t{-1}}})};
  sm.inputs = {random_tensor({64, 128}, gen)};
  sm.out_shape = {64, 128};
  cases.push_back(sm);
  OpCase act{"gelu", op_attrs("gelu")};
  act.inputs = {random_tensor({64, 128}, gen)};
  act.out_shape = {64, 128};
  cases.push_back(act);
  CpuContext ctx;  // its own cache, so that earlier tests' primitives do not count
  for (const OpCase& c : cases) {
    INFO("op " << c.op);
    int64_t before = ctx.primitives_created();
    auto kernel = make_kernel(c, ctx);
    run_kernel(c, *kernel, 1);
    int64_t after_first = ctx.primitives_created();
    CHECK(after_first > before);  // these shapes take the oneDNN path
    run_kernel(c, *kernel, 1);
    run_kernel(c, *kernel, 1);
    CHECK(ctx.primitives_created() == after_first);
    // Compiling the same layer shape again reuses the cached primitive.
    auto twin = make_kernel(c, ctx);
    run_kernel(c, *twin, 1);
    CHECK(ctx.primitives_created() == after_first);
  }
}

OpCase matmul_case(std::mt19937& gen, Shape a, Shape b, Shape out) {
  OpCase c{"matmul", op_attrs("matmul")};
  c.inputs = {random_tensor(a, gen), random_tensor(b, gen)};
  c.out_shape = std::move(out);
  return c;
}

TEST_CASE("matmul follows torch.matmul", "[cpu][matmul]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct MM { Shape a, b, out; };
  std::vector<MM> cases = {
      {{5}, {5}, {}},                          // dot
      {{300}, {300}, {}},                      // dot, large
      {{3}, {3, 4}, {4}},                      // vector @ matrix
      {{4, 3}, {3}, {4}},                      // matrix @ vector
      {{3}, {2, 3, 4}, {2, 4}},                // vector @ batch
      {{2, 4, 3}, {3}, {2, 4}},                // batch @ vector
      {{2, 3}, {3, 4}, {2, 4}},                // plain
      {{1, 1}, {1, 1}, {1, 1}},                // batch 1, tiny
      {{7, 2, 3}, {3, 5}, {7, 2, 5}},          // batch @ matrix
      {{2, 3}, {6, 3, 5}, {6, 2, 5}},          // matrix @ batch
      {{2, 1, 4, 3}, {5, 3, 6}, {2, 5, 4, 6}}, // broadcast both ways
      {{2, 1, 64, 48}, {1, 3, 48, 40}, {2, 3, 64, 40}},  // broadcast, oneDNN path
      {{128, 96}, {96, 80}, {128, 80}},        // oneDNN path
      {{4, 96}, {3, 96, 80}, {3, 4, 80}},      // oneDNN path, broadcast src
      {{200}, {200, 300}, {300}},              // 1-D, oneDNN path
      {{300, 200}, {200}, {300}},              // 1-D, oneDNN path
      {{3, 0}, {0, 4}, {3, 4}},                // empty inner dim: zeros
      {{0, 3}, {3, 4}, {0, 4}},                // empty rows
      {{0, 5, 6}, {6, 7}, {0, 5, 7}},          // empty batch against a broadcast matrix
      {{1, 4, 3}, {0, 3, 5}, {0, 4, 5}},       // a batch of 1 broadcast to an empty batch
      {{2, 1, 4, 3}, {0, 3, 5}, {2, 0, 4, 5}}, // empty batch dimension inside
  };
  for (const MM& m : cases) {
    INFO("a " << shape_str(m.a) << " @ b " << shape_str(m.b));
    check_against_reference(matmul_case(gen, m.a, m.b, m.out));
  }
}

TEST_CASE("matmul refuses mismatched shapes", "[cpu][matmul][errors]") {
  std::mt19937 gen(1);
  OpCase c = matmul_case(gen, {2, 3}, {4, 5}, {2, 5});
  REQUIRE_THROWS_WITH(make_kernel(c), Catch::Contains("inner dims differ"));
  OpCase d = matmul_case(gen, {2, 2, 3}, {3, 3, 4}, {3, 2, 4});
  REQUIRE_THROWS_AS(make_kernel(d), UserError);
}

TEST_CASE("find_cpu_kernel knows every documented op and nothing else", "[cpu]") {
  for (const char* op : {"linear", "matmul", "embedding", "embedding_bag", "index_select", "relu", "gelu", "tanh",
                         "sigmoid", "relu6", "hardswish", "hardsigmoid", "silu", "mish", "exp", "clamp",
                         "softmax", "log_softmax", "normalize", "layer_norm", "dropout", "add", "mul", "expand", "scale", "parameter",
                         "buffer", "cat",
                         "narrow", "flatten", "reshape", "permute", "pad", "roll", "interpolate", "conv2d", "max_pool2d",
                         "avg_pool2d", "batch_norm2d", "conv1d", "max_pool1d", "avg_pool1d", "batch_norm1d", "sum", "mean",
                         "amax", "amin", "gru", "lstm",
                         "multi_head_attention"}) {
    INFO(op);
    CHECK(find_cpu_kernel(op) != nullptr);
  }
  CHECK(find_cpu_kernel("conv3d") == nullptr);
  CHECK(find_cpu_kernel("") == nullptr);
}

}  // namespace
}  // namespace tandem::test
