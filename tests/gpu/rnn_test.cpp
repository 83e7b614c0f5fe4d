// gru and lstm's CUDA kernels against the CPU's (oneDNN), forward and backward, on fresh
// random tensors (the seed is printed; TANDEM_TEST_SEED repeats it): stacked and
// bidirectional, batch_first, initial states with their gradients, every `select`, and
// dropout between layers in training (the same seed drops the same elements on both).
#include "gpu_test_util.h"

namespace tandem::test {
namespace {

struct RnnCase {
  bool lstm;
  int64_t t, n, c, h, layers;
  bool bidirectional, batch_first, bias, initial_state;
  std::string select;
  double dropout;
};

OpCase rnn_op_case(const RnnCase& k, std::mt19937& gen) {
  const std::string op = k.lstm ? "lstm" : "gru";
  OpCase c{op, op_attrs(op, {{"input_size", k.c}, {"hidden_size", k.h}, {"num_layers", k.layers},
                             {"bias", k.bias}, {"batch_first", k.batch_first}, {"dropout", k.dropout},
                             {"bidirectional", k.bidirectional}, {"select", k.select}})};
  if (k.lstm) c.attrs.set("proj_size", int64_t{0});
  const int64_t dirs = k.bidirectional ? 2 : 1, gates = k.lstm ? 4 : 3;
  c.inputs = {random_tensor(k.batch_first ? Shape{k.n, k.t, k.c} : Shape{k.t, k.n, k.c}, gen)};
  if (k.initial_state) {
    c.inputs.push_back(random_tensor({k.layers * dirs, k.n, k.h}, gen, -1.f, 1.f));
    if (k.lstm) c.inputs.push_back(random_tensor({k.layers * dirs, k.n, k.h}, gen, -1.f, 1.f));
  }
  const float bound = 1.f / std::sqrt(static_cast<float>(k.h));  // torch's init range
  for (int64_t l = 0; l < k.layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      c.params.push_back(random_tensor({gates * k.h, l == 0 ? k.c : dirs * k.h}, gen, -bound, bound));
      c.params.push_back(random_tensor({gates * k.h, k.h}, gen, -bound, bound));
      if (k.bias) {
        c.params.push_back(random_tensor({gates * k.h}, gen, -bound, bound));
        c.params.push_back(random_tensor({gates * k.h}, gen, -bound, bound));
      }
    }
  if (k.select == "output") c.out_shape = k.batch_first ? Shape{k.n, k.t, dirs * k.h} : Shape{k.t, k.n, dirs * k.h};
  else c.out_shape = {k.layers * dirs, k.n, k.h};
  c.training = k.dropout > 0;
  c.seed = gen();
  return c;
}

TEST_CASE("gru and lstm on a GPU match the CPU, stacked, bidirectional and with states", "[gpu][rnn]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (bool lstm : {false, true}) {
    for (const RnnCase& k : std::vector<RnnCase>{
             // lstm, t, n, c, h, layers, bidirectional, batch_first, bias, initial_state, select, dropout
             {lstm, 5, 3, 6, 8, 1, false, false, true, false, "output", 0},
             {lstm, 7, 2, 5, 16, 2, true, false, true, true, "output", 0},
             {lstm, 6, 4, 3, 8, 2, false, true, false, true, "h_n", 0},
             {lstm, 4, 3, 8, 8, 3, true, true, true, false, "output", 0.3},
             {lstm, 64, 8, 32, 64, 1, false, false, true, true, "output", 0},
         }) {
      INFO((lstm ? "lstm" : "gru") << " t " << k.t << " n " << k.n << " c " << k.c << " h " << k.h << " layers "
                                   << k.layers << " bidirectional " << k.bidirectional << " batch_first "
                                   << k.batch_first << " bias " << k.bias << " states " << k.initial_state
                                   << " select " << k.select << " dropout " << k.dropout);
      check_gpu_against_cpu(rnn_op_case(k, gen), gen, 1e-4);
    }
  }
  // lstm's cell state as the output
  RnnCase cn{true, 5, 2, 4, 8, 2, true, false, true, true, "c_n", 0};
  check_gpu_against_cpu(rnn_op_case(cn, gen), gen, 1e-4);
}

TEST_CASE("gru and lstm in bf16 or fp16 on a GPU: their products in half, within 1e-2 of the cpu", "[gpu][rnn][mixed]") {
  const uint32_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (Precision precision : {Precision::bf16, Precision::fp16})
    for (bool lstm : {false, true}) {
      INFO("precision " << precision_name(precision) << (lstm ? " lstm" : " gru"));
      // the cpu keeps recurrent layers in fp32 (torch's CPU autocast does), so this is
      // half precision against fp32 over 5 steps of 2 stacked, bidirectional layers
      OpCase c = rnn_op_case({lstm, 5, 3, 8, 16, 2, true, false, true, true, "output", 0}, gen);
      c.precision = precision;
      check_gpu_against_cpu(c, gen, 1e-2);
      CHECK(gpu_forward_differs_from_fp32(c));
    }
}

}  // namespace
}  // namespace tandem::test
