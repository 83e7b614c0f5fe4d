// Dropout inside layers, in training: between a gru/lstm's stacked layers, and on
// multi_head_attention's weights. torch draws its masks from its own random stream, so
// the oracle cannot compare these; instead each is checked against a composition of
// pieces that are checked against torch elsewhere (single-layer recurrent kernels and
// the same mask applied between them) or against a plain double-precision loop with the
// same mask, forward and backward. And: the mask depends on the seed, and inference
// ignores it.
#include <cmath>

#include "backends/cpu/ops/apply_dropout.h"
#include "backward_test_util.h"

namespace tandem::test {
namespace {

Attributes rnn_attrs(int64_t hidden, int64_t layers, bool bidirectional, double dropout) {
  Attributes a;
  a.set("hidden_size", hidden);
  a.set("num_layers", layers);
  a.set("bidirectional", bidirectional);
  a.set("batch_first", false);
  a.set("bias", true);
  a.set("dropout", dropout);
  a.set("select", std::string("output"));
  return a;
}

/// A gru/lstm case over x [T, N, C] with torch's parameters for every layer and direction.
OpCase rnn_case(const std::string& op, int64_t t, int64_t n, int64_t c, int64_t h, int64_t layers, bool bidir,
                double dropout, std::mt19937& gen) {
  OpCase k(op, rnn_attrs(h, layers, bidir, dropout));
  const int64_t dirs = bidir ? 2 : 1, gates = op == "lstm" ? 4 : 3;
  k.inputs = {random_tensor({t, n, c}, gen)};
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t in = l == 0 ? c : dirs * h;
      k.params.push_back(random_tensor({gates * h, in}, gen, -0.4f, 0.4f));
      k.params.push_back(random_tensor({gates * h, h}, gen, -0.4f, 0.4f));
      k.params.push_back(random_tensor({gates * h}, gen, -0.4f, 0.4f));
      k.params.push_back(random_tensor({gates * h}, gen, -0.4f, 0.4f));
    }
  k.out_shape = {t, n, dirs * h};
  k.training = true;
  return k;
}

/// Layer l of a stacked case as a one-layer case reading `x`.
OpCase one_layer(const OpCase& stacked, int64_t l, const Tensor& x) {
  const int64_t h = stacked.attrs.get_int("hidden_size");
  const bool bidir = stacked.attrs.get_bool("bidirectional");
  const int64_t per_layer = (bidir ? 2 : 1) * 4;
  OpCase k(stacked.op, rnn_attrs(h, 1, bidir, 0.0));
  k.inputs = {x};
  k.params.assign(stacked.params.begin() + l * per_layer, stacked.params.begin() + (l + 1) * per_layer);
  k.out_shape = stacked.out_shape;
  k.training = true;
  k.seed = stacked.seed;
  return k;
}

Tensor dropped(const Tensor& x, uint64_t seed, double p) {
  Tensor y = Tensor::empty(x.shape(), DType::float32);
  cpu::apply_dropout(x.data<float>(), y.data<float>(), x.numel(), seed, static_cast<float>(p));
  return y;
}

TEST_CASE("gru and lstm drop between their layers in training as one-layer kernels and a dropout between them do",
          "[cpu][dropout]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const double p = 0.3;
  for (const std::string op : {"gru", "lstm"})
    for (bool bidir : {false, true}) {
      const int64_t layers = 3;
      OpCase stacked = rnn_case(op, 5, 3, 4, 6, layers, bidir, p, gen);
      stacked.seed = gen();
      INFO(op << (bidir ? " bidirectional" : ""));
      auto kernel = make_kernel(stacked);
      Tensor out = run_kernel(stacked, *kernel);
      const Tensor grad_out = random_tensor(out.shape(), gen);
      Grads g = make_grads(stacked, NAN);
      run_backward(stacked, *kernel, out, grad_out, g);

      // the same by hand: layer l, then the mask of inner_dropout_seed(seed, l), ...
      std::vector<OpCase> pieces;
      std::vector<std::unique_ptr<Kernel>> kernels;
      std::vector<Tensor> outs;
      Tensor x = stacked.inputs[0];
      for (int64_t l = 0; l < layers; ++l) {
        pieces.push_back(one_layer(stacked, l, x));
        kernels.push_back(make_kernel(pieces.back()));
        outs.push_back(run_kernel(pieces.back(), *kernels.back()));
        if (l + 1 < layers) x = dropped(outs.back(), inner_dropout_seed(stacked.seed, uint64_t(l)), p);
      }
      require_close(out, outs.back());
      // the dropout changed something: without it the output differs
      OpCase plain = stacked;
      plain.training = false;
      auto plain_kernel = make_kernel(plain);
      Tensor undropped = run_kernel(plain, *plain_kernel);
      double diff = 0;
      for (int64_t i = 0; i < out.numel(); ++i)
        diff = std::max(diff, double(std::abs(out.data<float>()[i] - undropped.data<float>()[i])));
      CHECK(diff > 1e-3);

      // ... and backward from the top down, the gradient through the same masks
      Tensor grad = grad_out;
      const int64_t per_layer = (bidir ? 2 : 1) * 4;
      for (int64_t l = layers - 1; l >= 0; --l) {
        Grads gl = make_grads(pieces[size_t(l)], NAN);
        run_backward(pieces[size_t(l)], *kernels[size_t(l)], outs[size_t(l)], grad, gl);
        for (int64_t i = 0; i < per_layer; ++i) {
          INFO("layer " << l << " parameter " << i);
          require_close(g.params[size_t(l * per_layer + i)], gl.params[size_t(i)], 1e-5);
        }
        if (l > 0) grad = dropped(gl.inputs[0], inner_dropout_seed(stacked.seed, uint64_t(l - 1)), p);
        else require_close(g.inputs[0], gl.inputs[0], 1e-5);
      }
    }
}

TEST_CASE("a recurrent layer's dropout depends on the seed and is ignored in inference", "[cpu][dropout]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  OpCase c = rnn_case("gru", 6, 2, 3, 5, 2, false, 0.5, gen);
  auto kernel = make_kernel(c);
  c.seed = 11;
  Tensor a = run_kernel(c, *kernel);
  Tensor a_again = run_kernel(c, *kernel);
  c.seed = 12;
  Tensor b = run_kernel(c, *kernel);
  require_close(a_again, a, 0.0);
  double diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
  CHECK(diff > 1e-3);
  // inference: the same whatever the seed, and equal to a dropout-free layer's
  c.training = false;
  Tensor e1 = run_kernel(c, *kernel);
  c.seed = 99;
  require_close(run_kernel(c, *kernel), e1, 0.0);
  OpCase no_dropout = c;
  no_dropout.attrs.set("dropout", 0.0);
  auto k0 = make_kernel(no_dropout);
  require_close(run_kernel(no_dropout, *k0), e1, 0.0);
}

/// multi_head_attention, self-attention over x [L, N, E], in double with the kernel's
/// mask (apply_dropout's over P [N, H, L, S]); the sum of out * g.
struct PlainAttention {
  int64_t l, n, e, h;
  double p;
  uint64_t seed;

  double loss(const std::vector<double>& x, const std::vector<double>& w_in, const std::vector<double>& b_in,
              const std::vector<double>& w_out, const std::vector<double>& b_out, const std::vector<double>& g,
              std::vector<double>* out = nullptr) const {
    const int64_t d = e / h, rows = l * n;
    std::vector<double> qkv(size_t(3 * rows * e));
    for (int64_t which = 0; which < 3; ++which)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < e; ++o) {
          double s = b_in[size_t(which * e + o)];
          for (int64_t i = 0; i < e; ++i) s += x[size_t(r * e + i)] * w_in[size_t((which * e + o) * e + i)];
          qkv[size_t((which * rows + r) * e + o)] = s;
        }
    auto at = [&](int64_t which, int64_t pos, int64_t batch, int64_t col) {
      return qkv[size_t((which * rows + pos * n + batch) * e + col)];
    };
    const double scale = p < 1 ? 1 / (1 - p) : 0;
    std::vector<double> ctx(size_t(rows * e), 0.0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t q = 0; q < l; ++q) {
          std::vector<double> w(static_cast<size_t>(l));
          double mx = -1e300;
          for (int64_t k = 0; k < l; ++k) {
            double s = 0;
            for (int64_t j = 0; j < d; ++j) s += at(0, q, b, hh * d + j) * at(1, k, b, hh * d + j);
            w[size_t(k)] = s / std::sqrt(double(d));
            mx = std::max(mx, w[size_t(k)]);
          }
          double z = 0;
          for (double& v : w) z += (v = std::exp(v - mx));
          for (int64_t k = 0; k < l; ++k) {
            const uint64_t idx = uint64_t(((b * h + hh) * l + q) * l + k);
            const double pk = dropout_keep(seed, idx, float(p)) ? w[size_t(k)] / z * scale : 0.0;
            for (int64_t j = 0; j < d; ++j) ctx[size_t((q * n + b) * e + hh * d + j)] += pk * at(2, k, b, hh * d + j);
          }
        }
    double total = 0;
    if (out) out->assign(size_t(rows * e), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < e; ++o) {
        double s = b_out[size_t(o)];
        for (int64_t i = 0; i < e; ++i) s += ctx[size_t(r * e + i)] * w_out[size_t(o * e + i)];
        if (out) (*out)[size_t(r * e + o)] = s;
        total += s * g[size_t(r * e + o)];
      }
    return total;
  }
};

std::vector<double> as_doubles(const Tensor& t) {
  auto s = t.span<float>();
  return {s.begin(), s.end()};
}

TEST_CASE("multi_head_attention drops its attention weights in training forward and backward", "[cpu][dropout]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  const int64_t l = 5, n = 2, e = 8, h = 2;
  const double p = 0.25;
  Attributes a;
  a.set("embed_dim", e);
  a.set("num_heads", h);
  a.set("bias", true);
  a.set("batch_first", false);
  a.set("causal", false);
  a.set("dropout", p);
  a.set("masks", std::string("none"));
  OpCase c("multi_head_attention", a);
  c.inputs = {random_tensor({l, n, e}, gen)};
  c.params = {random_tensor({3 * e, e}, gen, -0.5f, 0.5f), random_tensor({3 * e}, gen, -0.5f, 0.5f),
              random_tensor({e, e}, gen, -0.5f, 0.5f), random_tensor({e}, gen, -0.5f, 0.5f)};
  c.out_shape = {l, n, e};
  c.training = true;
  c.seed = gen();
  auto kernel = make_kernel(c);
  Tensor out = run_kernel(c, *kernel);
  Tensor g = random_tensor(out.shape(), gen);
  Grads grads = make_grads(c, NAN);
  run_backward(c, *kernel, out, g, grads);

  PlainAttention ref{l, n, e, h, p, c.seed};
  std::vector<std::vector<double>> args{as_doubles(c.inputs[0]), as_doubles(c.params[0]), as_doubles(c.params[1]),
                                        as_doubles(c.params[2]), as_doubles(c.params[3])};
  const std::vector<double> gd = as_doubles(g);
  auto loss = [&] { return ref.loss(args[0], args[1], args[2], args[3], args[4], gd); };
  std::vector<double> want;
  ref.loss(args[0], args[1], args[2], args[3], args[4], gd, &want);
  Tensor want_t = Tensor::empty(out.shape(), DType::float32);
  for (size_t i = 0; i < want.size(); ++i) want_t.data<float>()[i] = float(want[i]);
  require_close(out, want_t, 1e-5);

  // some weights are dropped: the output differs from inference's
  OpCase eval = c;
  eval.training = false;
  auto eval_kernel = make_kernel(eval);
  Tensor plain = run_kernel(eval, *eval_kernel);
  double diff = 0;
  for (int64_t i = 0; i < out.numel(); ++i) diff = std::max(diff, double(std::abs(out.data<float>()[i] - plain.data<float>()[i])));
  CHECK(diff > 1e-3);

  // backward against central differences of the double loop (the mask held fixed)
  const std::vector<Tensor*> got{&grads.inputs[0], &grads.params[0], &grads.params[1], &grads.params[2],
                                 &grads.params[3]};
  for (size_t which = 0; which < args.size(); ++which) {
    double scale = 0;
    for (float v : got[which]->span<float>()) scale = std::max(scale, double(std::abs(v)));
    std::uniform_int_distribution<size_t> pick(0, args[which].size() - 1);
    for (int k = 0; k < 12; ++k) {
      const size_t i = pick(gen);
      const double keep = args[which][i], step = 1e-5;
      args[which][i] = keep + step;
      const double up = loss();
      args[which][i] = keep - step;
      const double down = loss();
      args[which][i] = keep;
      INFO("tensor " << which << " element " << i);
      CHECK(std::abs(got[which]->data<float>()[i] - (up - down) / (2 * step)) <= 1e-4 * std::max(1.0, scale));
    }
  }
}

}  // namespace
}  // namespace tandem::test
