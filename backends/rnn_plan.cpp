#include "backends/rnn_plan.h"

#include "core/error.h"

namespace tandem {

RnnPlan plan_rnn(const KernelSpec& spec, bool lstm) {
  const Attributes& a = *spec.attrs;
  RnnPlan p;
  p.lstm = lstm;
  p.op = lstm ? "lstm" : "gru";
  p.batch_first = a.get_bool("batch_first");
  const Shape& x = spec.inputs.at(0).shape;
  TANDEM_ASSERT(x.size() == 3, p.op + ": input must be 3-D");
  p.t = p.batch_first ? x[1] : x[0];
  p.n = p.batch_first ? x[0] : x[1];
  p.c = x[2];
  p.h = a.get_int("hidden_size");
  p.layers = a.get_int("num_layers");
  p.dirs = a.get_bool("bidirectional") ? 2 : 1;
  p.has_bias = a.get_bool("bias");
  p.dropout = a.get_float("dropout");
  p.select = a.get_string("select");
  p.has_state = spec.inputs.size() > 1;
  p.gates = lstm ? 4 : 3;
  p.params_per_direction = p.has_bias ? 4 : 2;
  TANDEM_ASSERT(static_cast<int64_t>(spec.params.size()) == p.layers * p.dirs * p.params_per_direction,
                p.op + ": wrong parameter count");
  return p;
}

}  // namespace tandem
