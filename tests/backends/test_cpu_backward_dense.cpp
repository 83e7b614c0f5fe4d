// Backward of linear, matmul, embedding and embedding_bag: against the reference,
// against finite differences, accumulation, and no primitive built by backward.
#include <cstring>
#include <set>

#include "backward_test_util.h"

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

TEST_CASE("linear backward matches the reference", "[cpu][backward][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  struct Shape3 { Shape x; int64_t out; };
  std::vector<Shape3> shapes = {
      {{1, 10}, 20},   {{3, 7}, 5},      {{10}, 20},        {{2, 3, 10}, 20}, {{1, 1}, 1},
      {{4, 0}, 3},     {{0, 5}, 3},      {{3, 5}, 0},       {{1, 300}, 301},  {{37, 129}, 65},
      {{2, 5, 64}, 130}, {{1, 1024}, 1024}, {{256, 256}, 256},
  };
  for (const auto& s : shapes)
    for (bool bias : {true, false}) {
      INFO("x " << shape_str(s.x) << " out " << s.out << " bias " << bias);
      check_backward(linear_case(gen, s.x, s.out, bias), gen);
    }
}

TEST_CASE("linear backward at the benchmark shape", "[cpu][backward][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_backward(linear_case(gen, {64, 1024}, 512, true), gen);
}

TEST_CASE("linear backward uses the plain weight, not forward's packed copy", "[cpu][backward][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c = linear_case(gen, {64, 256}, 256, true);  // the oneDNN path
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel, 1);
  c.params[0] = random_tensor({256, 256}, gen, -0.5f, 0.5f);  // a new weight after forward
  Tensor grad_out = random_tensor(c.out_shape, gen);
  Grads got = make_grads(c, NAN), want = make_grads(c, 0.f);
  run_backward(c, *kernel, out, grad_out, got);
  run_reference_backward(c, out, grad_out, want);
  require_close(got.inputs[0], want.inputs[0]);
}

TEST_CASE("linear backward skips undefined gradients", "[cpu][backward][linear]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (Shape x : {Shape{2, 8}, Shape{64, 128}}) {
    OpCase c = linear_case(gen, x, 32, true);
    auto kernel = make_kernel(c);
    Tensor out = run_kernel(c, *kernel);
    Tensor grad_out = random_tensor(c.out_shape, gen);
    Grads got = make_grads(c, NAN), want = make_grads(c, 0.f);
    got.inputs[0] = Tensor();  // x is a graph input
    got.params[1] = Tensor();  // a frozen bias
    run_backward(c, *kernel, out, grad_out, got);
    run_reference_backward(c, out, grad_out, want);
    require_close(got.params[0], want.params[0]);
  }
}

OpCase matmul_case(std::mt19937& gen, Shape a, Shape b, Shape out) {
  OpCase c{"matmul", op_attrs("matmul")};
  c.inputs = {random_tensor(a, gen), random_tensor(b, gen)};
  c.out_shape = std::move(out);
  return c;
}

struct MM { Shape a, b, out; };

const std::vector<MM>& matmul_shapes() {
  static const std::vector<MM> cases = {
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
      {{2, 1, 64, 48}, {1, 3, 48, 40}, {2, 3, 64, 40}},  // broadcast both ways, oneDNN path
      {{128, 96}, {96, 80}, {128, 80}},        // oneDNN path
      {{4, 64, 33}, {33, 48}, {4, 64, 48}},    // batch @ matrix, oneDNN path (db folded)
      {{1, 64, 33}, {3, 33, 48}, {3, 64, 48}}, // a broadcast, oneDNN path
      {{4, 96}, {3, 96, 80}, {3, 4, 80}},      // a broadcast (rank), oneDNN path
      {{3, 64, 33}, {3, 33, 48}, {3, 64, 48}}, // no broadcast, oneDNN path
      {{200}, {200, 300}, {300}},              // 1-D, oneDNN path
      {{300, 200}, {200}, {300}},              // 1-D, oneDNN path
      {{5, 300, 20}, {20}, {5, 300}},          // batch @ vector, oneDNN path
      {{3, 0}, {0, 4}, {3, 4}},                // empty inner dim
      {{0, 3}, {3, 4}, {0, 4}},                // empty rows
  };
  return cases;
}

TEST_CASE("matmul backward follows torch.matmul", "[cpu][backward][matmul]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (const MM& m : matmul_shapes()) {
    INFO("a " << shape_str(m.a) << " @ b " << shape_str(m.b));
    check_backward(matmul_case(gen, m.a, m.b, m.out), gen);
  }
}

TEST_CASE("linear and matmul backward agree with finite differences", "[cpu][backward][fd]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_finite_differences(linear_case(gen, {3, 7}, 5, true), gen);
  check_finite_differences(linear_case(gen, {2, 2, 9}, 4, false), gen);
  check_finite_differences(linear_case(gen, {4, 24}, 96, true), gen);  // the oneDNN path
  for (MM m : std::vector<MM>{{{5}, {5}, {}},
                              {{3}, {2, 3, 4}, {2, 4}},
                              {{2, 1, 4, 3}, {5, 3, 6}, {2, 5, 4, 6}},
                              {{2, 1, 8, 6}, {1, 3, 6, 9}, {2, 3, 8, 9}}}) {  // broadcast, oneDNN path
    INFO("a " << shape_str(m.a) << " @ b " << shape_str(m.b));
    check_finite_differences(matmul_case(gen, m.a, m.b, m.out), gen);
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

TEST_CASE("embedding backward scatters into used rows", "[cpu][backward][embedding]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  check_backward(embedding_case(gen, {1}, 10, 4), gen);
  check_backward(embedding_case(gen, {7}, 3, 1), gen);  // repeated rows
  check_backward(embedding_case(gen, {4, 9}, 50, 33), gen);
  check_backward(embedding_case(gen, {0}, 10, 4), gen);
  check_backward(embedding_case(gen, {512, 64}, 5000, 128), gen);  // parallel path
  for (int64_t padding : {int64_t{2}, int64_t{-1}}) {
    INFO("padding_idx " << padding);
    OpCase c = embedding_case(gen, {6, 3}, 8, 5);
    c.attrs.set("padding_idx", padding);
    int64_t row = padding < 0 ? padding + 8 : padding;
    c.inputs[0].span<int64_t>()[0] = row;
    c.inputs[0].span<int64_t>()[7] = row;
    check_backward(c, gen);
    // The padding row gets nothing, however often it is used.
    auto kernel = make_kernel(c);
    Tensor out = run_kernel(c, *kernel);
    Grads g = make_grads(c, NAN);
    run_backward(c, *kernel, out, random_tensor(c.out_shape, gen), g);
    for (int64_t d = 0; d < 5; ++d) CHECK(g.params[0].span<float>()[row * 5 + d] == 0.f);
  }
  check_finite_differences(embedding_case(gen, {2, 3}, 4, 3), gen);
}

OpCase bag_case_2d(std::mt19937& gen, int64_t bags, int64_t len, int64_t num, int64_t dim, const std::string& mode) {
  OpCase c{"embedding_bag",
           op_attrs("embedding_bag", {{"num_embeddings", num}, {"embedding_dim", dim}, {"mode", mode}})};
  c.inputs = {random_indices({bags, len}, num, gen)};
  c.params = {random_tensor({num, dim}, gen)};
  c.out_shape = {bags, dim};
  return c;
}

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

/// Weights on a shuffled grid 0.05 apart: no two within a finite-difference step, so
/// max mode's choice is stable under the perturbation.
void spread_weights(OpCase& c, std::mt19937& gen) {
  auto w = c.params[0].span<float>();
  std::vector<int64_t> order(w.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), gen);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(order[i] - int64_t(w.size()) / 2);
}

TEST_CASE("embedding_bag backward for sum mean and max", "[cpu][backward][embedding_bag]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (std::string mode : {"sum", "mean", "max"}) {
    INFO("mode " << mode);
    check_backward(bag_case_2d(gen, 1, 1, 5, 3, mode), gen);
    check_backward(bag_case_2d(gen, 4, 7, 20, 9, mode), gen);
    check_backward(bag_case_2d(gen, 3, 0, 20, 9, mode), gen);  // empty bags
    check_backward(bag_case_2d(gen, 256, 40, 1000, 64, mode), gen);  // parallel path
    for (bool include_last : {false, true}) {
      INFO("include_last_offset " << include_last);
      check_backward(bag_case_offsets(gen, {3, 0, 5, 1, 0}, 30, 7, mode, include_last), gen);
      check_backward(bag_case_offsets(gen, {0}, 30, 7, mode, include_last), gen);
      check_backward(bag_case_offsets(gen, {1}, 30, 1, mode, include_last), gen);
      check_backward(bag_case_offsets(gen, {2, 4, 6, 8, 10, 12}, 10, 33, mode, include_last), gen);
    }
    for (int64_t padding : {int64_t{3}, int64_t{-2}}) {
      INFO("padding_idx " << padding);
      OpCase c = bag_case_offsets(gen, {4, 2, 3}, 6, 5, mode, false);
      c.attrs.set("padding_idx", padding);
      int64_t row = padding < 0 ? padding + 6 : padding;
      auto idx = c.inputs[0].span<int64_t>();
      idx[0] = row;
      idx[4] = row;
      idx[5] = row;  // bag 1 is all padding
      check_backward(c, gen);
      auto kernel = make_kernel(c);
      Tensor out = run_kernel(c, *kernel);
      Grads g = make_grads(c, NAN);
      run_backward(c, *kernel, out, random_tensor(c.out_shape, gen), g);
      for (int64_t d = 0; d < 5; ++d) CHECK(g.params[0].span<float>()[row * 5 + d] == 0.f);
      OpCase fd = c;
      spread_weights(fd, gen);
      check_finite_differences(fd, gen);
    }
    OpCase fd = bag_case_offsets(gen, {3, 0, 4, 1}, 6, 4, mode, true);
    spread_weights(fd, gen);
    check_finite_differences(fd, gen);
  }
}

TEST_CASE("embedding_bag mean backward of a known bag", "[cpu][backward][embedding_bag]") {
  OpCase c{"embedding_bag", op_attrs("embedding_bag", {{"num_embeddings", int64_t{3}},
                                                        {"embedding_dim", int64_t{2}},
                                                        {"padding_idx", int64_t{0}}})};
  c.inputs = {Tensor::from_vector<int64_t>({4}, {1, 0, 2, 2}), Tensor::from_vector<int64_t>({2}, {0, 2})};
  c.params = {Tensor::from_vector<float>({3, 2}, {100, 100, 1, 2, 3, 5})};
  c.out_shape = {2, 2};
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  Grads g = make_grads(c, NAN);
  run_backward(c, *kernel, out, Tensor::from_vector<float>({2, 2}, {1, 2, 4, 8}), g);
  // Bag 0 = {1, pad}: row 1 gets all of it; bag 1 = {2, 2}: row 2 gets 2 * half.
  CHECK(g.params[0].to_vector<float>() == std::vector<float>{0, 0, 1, 2, 4, 8});
  CHECK_FALSE(g.inputs[0].defined());
}

/// Backward of `c` twice (as two micro-batches add into one gradient), into a dense weight
/// gradient and into a row gradient (core/touched_rows.h, Note [row gradient]); `c`'s second
/// call reads `second`'s indices. The rows must hold the dense gradient's rows bit for bit,
/// and the rows not listed must be zero in the dense one.
void check_row_gradient(const OpCase& c, const OpCase& second, std::mt19937& gen) {
  INFO("op " << c.op << " [" << c.attrs.str() << "]");
  const int64_t num = c.params[0].size(0), dim = c.params[0].size(1);
  Grads dense = make_grads(c, NAN);
  TouchedRows rows(num);
  rows.hold_values(dim);
  TouchedRows* row_list[] = {&rows};
  for (const OpCase* call : {&c, &second}) {
    auto kernel = make_kernel(*call);
    Tensor out = run_kernel(*call, *kernel);
    Tensor grad_out = random_tensor(call->out_shape, gen);
    run_backward(*call, *kernel, out, grad_out, dense);
    std::vector<Tensor> outs{out}, grad_outs{grad_out};
    Grads held = make_grads(*call, NAN);
    std::vector<Tensor> no_dense(1);  // a row gradient has no dense tensor
    BackwardArgs args{call->inputs, call->params, outs, grad_outs, held.inputs, no_dense, call->training, call->seed};
    args.grad_param_rows = row_list;
    kernel->backward(args);
  }
  const float* d = dense.params[0].data<float>();
  std::set<int64_t> listed(rows.list().begin(), rows.list().end());
  for (int64_t r = 0; r < num; ++r) {
    INFO("row " << r);
    const float* held = rows.values_of(r);
    if (!listed.count(r)) {
      CHECK(held == nullptr);
      for (int64_t k = 0; k < dim; ++k) REQUIRE(d[r * dim + k] == 0.f);
      continue;
    }
    REQUIRE(held != nullptr);
    CHECK(std::memcmp(held, d + r * dim, sizeof(float) * static_cast<size_t>(dim)) == 0);
  }
}

TEST_CASE("embedding and embedding_bag backward into row gradients: the dense gradient's rows, bit for bit",
          "[cpu][backward][embedding_bag][row_gradient]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (std::string mode : {"sum", "mean", "max"}) {
    INFO("mode " << mode);
    check_row_gradient(bag_case_2d(gen, 6, 5, 9, 4, mode), bag_case_2d(gen, 6, 5, 9, 4, mode), gen);
    check_row_gradient(bag_case_2d(gen, 256, 40, 1000, 64, mode), bag_case_2d(gen, 256, 40, 1000, 64, mode), gen);
    for (bool include_last : {false, true}) {
      INFO("include_last_offset " << include_last);
      OpCase a = bag_case_offsets(gen, {3, 0, 5, 1, 0, 4}, 7, 5, mode, include_last);
      OpCase b = bag_case_offsets(gen, {2, 6}, 7, 5, mode, include_last);
      for (OpCase* c : {&a, &b}) {  // repeats, and padding row 3 in and out of a bag
        c->attrs.set("padding_idx", int64_t{3});
        c->inputs[0].data<int64_t>()[1] = c->inputs[0].data<int64_t>()[0];
        c->inputs[0].data<int64_t>()[2] = 3;
      }
      if (include_last) {
        // ids past the last offset belong to no bag: torch reads none, and no row of theirs
        // may be listed with values nobody wrote
        for (OpCase* c : {&a, &b}) {
          Tensor ids = c->inputs[0];
          const int64_t n = ids.numel();
          Tensor longer = Tensor::empty({n + 3}, DType::int64);
          std::memcpy(longer.raw_data(), ids.raw_data(), ids.nbytes());
          for (int64_t k = 0; k < 3; ++k) longer.data<int64_t>()[n + k] = 6 - k;
          c->inputs[0] = longer;
        }
      }
      check_row_gradient(a, b, gen);
    }
  }
  OpCase word{"embedding", op_attrs("embedding", {{"num_embeddings", int64_t{40}}, {"embedding_dim", int64_t{33}},
                                                 {"padding_idx", int64_t{2}}})};
  word.inputs = {random_indices({4, 9}, 40, gen)};
  word.inputs[0].data<int64_t>()[3] = 2;
  word.inputs[0].data<int64_t>()[5] = word.inputs[0].data<int64_t>()[4];
  word.params = {random_tensor({40, 33}, gen)};
  word.out_shape = {4, 9, 33};
  OpCase again = word;
  again.inputs = {random_indices({4, 9}, 40, gen)};
  check_row_gradient(word, again, gen);
}

}  // namespace
}  // namespace tandem::test
