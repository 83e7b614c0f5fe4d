// Kernels that keep a derived form of their weights across calls (gru/lstm's packed and
// reordered gates, conv2d's reordered weight for forward and backward-data, attention's
// bf16 weight copies) give what a
// fresh kernel gives: after an optimizer-like change of the values with a new
// params_version, after a new weight buffer at the same version, and in the backward that
// follows a forward at the same version.
#include "backward_test_util.h"
#include "backends/cpu/cpu_precision.h"

namespace tandem::test {
namespace {

OpCase gru_case(std::mt19937& gen, bool lstm) {
  const int64_t t = 5, n = 3, c = 6, h = 8, g = lstm ? 4 : 3;
  // every attribute the kernel reads (op_attrs fills the defaults of a few ops only)
  OpCase oc{lstm ? "lstm" : "gru",
            op_attrs(lstm ? "lstm" : "gru", {{"input_size", c}, {"hidden_size", h}, {"num_layers", int64_t{2}},
                                             {"bias", true}, {"batch_first", false}, {"dropout", 0.0},
                                             {"bidirectional", false}, {"select", std::string("output")}})};
  oc.inputs = {random_tensor({t, n, c}, gen)};
  for (int64_t l = 0; l < 2; ++l) {
    oc.params.push_back(random_tensor({g * h, l == 0 ? c : h}, gen, -0.4f, 0.4f));
    oc.params.push_back(random_tensor({g * h, h}, gen, -0.4f, 0.4f));
    oc.params.push_back(random_tensor({g * h}, gen, -0.4f, 0.4f));
    oc.params.push_back(random_tensor({g * h}, gen, -0.4f, 0.4f));
  }
  oc.out_shape = {t, n, h};
  oc.training = true;
  return oc;
}

OpCase conv_case(std::mt19937& gen) {
  OpCase oc{"conv2d", op_attrs("conv2d", {{"in_channels", int64_t{8}}, {"out_channels", int64_t{16}},
                                          {"kernel_size", int64_t{3}}, {"padding", int64_t{1}},
                                          {"stride", int64_t{1}}, {"dilation", int64_t{1}}, {"groups", int64_t{1}},
                                          {"bias", true}})};
  oc.inputs = {random_tensor({4, 8, 12, 12}, gen)};  // large enough for oneDNN's blocked layouts
  oc.params = {random_tensor({16, 8, 3, 3}, gen, -0.3f, 0.3f), random_tensor({16}, gen)};
  oc.out_shape = {4, 16, 12, 12};
  oc.training = true;
  return oc;
}

struct Pass {
  Tensor out;
  Grads grads;
};

/// forward at `version`, then backward told the same version (kUnknownParamsVersion: as a
/// caller that does not track versions).
Pass forward_backward(const OpCase& c, Kernel& kernel, uint64_t version, const Tensor& grad_out) {
  Pass p;
  p.out = run_kernel(c, kernel, version);
  p.grads = make_grads(c, NAN);
  std::vector<Tensor> outs{p.out}, grad_outs{grad_out};
  BackwardArgs args{c.inputs, c.params, outs, grad_outs, p.grads.inputs, p.grads.params, c.training, c.seed, version};
  kernel.backward(args);
  return p;
}

void require_same(const Pass& got, const Pass& want) {
  require_close(got.out, want.out);
  for (size_t i = 0; i < want.grads.inputs.size(); ++i)
    if (want.grads.inputs[i].defined()) require_close(got.grads.inputs[i], want.grads.inputs[i]);
  for (size_t i = 0; i < want.grads.params.size(); ++i) require_close(got.grads.params[i], want.grads.params[i]);
}

/// What a kernel never run before computes on `c`.
Pass fresh(const OpCase& c, const Tensor& grad_out) {
  auto kernel = make_kernel(c);
  return forward_backward(c, *kernel, kUnknownParamsVersion, grad_out);
}

/// New values in the same buffers, in [-bound, bound]: what an optimizer step does.
void new_values(OpCase& c, std::mt19937& gen, float bound) {
  for (Tensor& p : c.params) {
    Tensor next = random_tensor(p.shape(), gen, -bound, bound);
    std::copy(next.span<float>().begin(), next.span<float>().end(), p.span<float>().begin());
  }
}

void check_rederives(OpCase c, std::mt19937& gen) {
  Tensor grad_out = random_tensor(c.out_shape, gen);
  auto kernel = make_kernel(c);
  require_same(forward_backward(c, *kernel, 1, grad_out), fresh(c, grad_out));
  require_same(forward_backward(c, *kernel, 1, grad_out), fresh(c, grad_out));  // reused as is
  // an optimizer step: new values in the same buffers, a new version
  new_values(c, gen, 0.4f);
  require_same(forward_backward(c, *kernel, 2, grad_out), fresh(c, grad_out));
  // other buffers (a replica's, loaded weights) at the same version
  for (Tensor& p : c.params) p = random_tensor(p.shape(), gen, -0.4f, 0.4f);
  require_same(forward_backward(c, *kernel, 2, grad_out), fresh(c, grad_out));
  // a caller that does not track versions
  new_values(c, gen, 0.4f);
  require_same(forward_backward(c, *kernel, kUnknownParamsVersion, grad_out), fresh(c, grad_out));
}

TEST_CASE("gru and lstm re-derive their packed weights when params_version or the weights change",
          "[cpu][rnn][weights]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (bool lstm : {false, true}) {
    INFO((lstm ? "lstm" : "gru"));
    check_rederives(gru_case(gen, lstm), gen);
  }
}

OpCase linear_case(std::mt19937& gen) {
  // large enough for oneDNN's matmul, which then wants the weight in a blocked layout
  OpCase oc{"linear", op_attrs("linear", {{"in_features", int64_t{256}}, {"out_features", int64_t{256}},
                                          {"bias", true}})};
  oc.inputs = {random_tensor({64, 256}, gen)};
  oc.params = {random_tensor({256, 256}, gen, -0.2f, 0.2f), random_tensor({256}, gen)};
  oc.out_shape = {64, 256};
  oc.training = true;
  return oc;
}

TEST_CASE("conv2d and linear re-derive their reordered weights when params_version or the weights change",
          "[cpu][conv2d][linear][weights]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  SECTION("conv2d") { check_rederives(conv_case(gen), gen); }
  SECTION("linear") { check_rederives(linear_case(gen), gen); }
}

OpCase attention_case(std::mt19937& gen, Precision precision) {
  Attributes a;
  a.set("embed_dim", int64_t{32});
  a.set("num_heads", int64_t{4});
  a.set("bias", true);
  a.set("batch_first", false);
  a.set("causal", false);
  a.set("dropout", 0.0);
  a.set("masks", std::string("none"));
  OpCase oc("multi_head_attention", a);
  oc.inputs = {random_tensor({5, 3, 32}, gen), random_tensor({7, 3, 32}, gen), random_tensor({7, 3, 32}, gen)};
  oc.params = {random_tensor({96, 32}, gen, -0.2f, 0.2f), random_tensor({96}, gen), random_tensor({32, 32}, gen, -0.2f, 0.2f),
               random_tensor({32}, gen)};
  oc.out_shape = {5, 3, 32};
  oc.training = true;
  oc.precision = precision;
  return oc;
}

TEST_CASE("multi_head_attention casts its bf16 weights again when params_version or the weights change",
          "[cpu][attention][weights]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  INFO("the cpu runs it in " << precision_name(cpu::cpu_precision(Precision::bf16)));
  check_rederives(attention_case(gen, Precision::bf16), gen);
}

TEST_CASE("linear in training reads the weight as it is and reorders a version used twice, giving what a fresh kernel gives",
          "[cpu][linear][weights]") {
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c = linear_case(gen);
  Tensor grad_out = random_tensor(c.out_shape, gen);
  auto kernel = make_kernel(c);
  // training: a new version after every forward (reordered once, then read as it is)
  for (uint64_t version = 1; version <= 4; ++version) {
    INFO("version " << version);
    require_same(forward_backward(c, *kernel, version, grad_out), fresh(c, grad_out));
    new_values(c, gen, 0.2f);
  }
  // evaluation: the same version again and again (reordered at its second forward)
  for (int i = 0; i < 3; ++i) {
    INFO("evaluation forward " << i);
    require_same(forward_backward(c, *kernel, 5, grad_out), fresh(c, grad_out));
  }
  // back to training, and a caller that does not track versions
  for (uint64_t version : {uint64_t{6}, uint64_t{7}, kUnknownParamsVersion, kUnknownParamsVersion}) {
    INFO("version " << version);
    new_values(c, gen, 0.2f);
    require_same(forward_backward(c, *kernel, version, grad_out), fresh(c, grad_out));
  }
}

}  // namespace
}  // namespace tandem::test

namespace tandem::test {
namespace {

TEST_CASE("bf16 linear and conv2d keep their bf16 weights while params_version holds and re-derive them when it changes",
          "[cpu][conv2d][linear][weights][bf16]") {
  if (!cpu::cpu_has_bf16()) {
    WARN("this CPU lacks avx512_bf16: these layers run fp32 (the tests above)");
    return;
  }
  uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase linear = linear_case(gen), conv = conv_case(gen);
  linear.precision = conv.precision = Precision::bf16;
  SECTION("linear") { check_rederives(linear, gen); }
  SECTION("conv2d") { check_rederives(conv, gen); }
  SECTION("linear in training, then inference") {
    Tensor grad_out = random_tensor(linear.out_shape, gen);
    auto kernel = make_kernel(linear);
    for (uint64_t version = 1; version <= 3; ++version) {  // a cast per version, read by forward and backward
      INFO("version " << version);
      require_same(forward_backward(linear, *kernel, version, grad_out), fresh(linear, grad_out));
      new_values(linear, gen, 0.2f);
    }
    // inference: one version read again and again is packed once and kept. Values changed in
    // place under the same version (which the runtime never does) show that it is kept.
    const Tensor first = run_kernel(linear, *kernel, 10);  // the weight as it is (a training-like first use)
    const Tensor second = run_kernel(linear, *kernel, 10);  // packed, and kept
    require_close(second, first);
    const Tensor weight = linear.params[0];
    Tensor next = random_tensor(weight.shape(), gen, -0.2f, 0.2f);
    std::copy(next.span<float>().begin(), next.span<float>().end(), weight.span<float>().begin());
    require_close(run_kernel(linear, *kernel, 10), second, 0);  // the kept bf16 weight, not the new values
    require_close(run_kernel(linear, *kernel, 11), fresh(linear, grad_out).out);  // a new version: re-derived
  }
}

}  // namespace
}  // namespace tandem::test
