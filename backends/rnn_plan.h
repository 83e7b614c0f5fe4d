// gru's and lstm's shapes and options, shared by the CPU and CUDA kernels
// (backends/cpu/ops/rnn.cpp has the ops' semantics): x [T, N, C] ([N, T, C] with
// batch_first), optional h0 (and c0) [L D, N, H]; per layer and direction torch's
// weight_ih, weight_hh and, with bias, bias_ih and bias_hh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/kernel.h"

namespace tandem {

struct RnnPlan {
  std::string op;                       // "gru" or "lstm": named in errors
  bool lstm = false;
  int64_t t = 0, n = 0, c = 0, h = 0;   // steps, batch, input size, hidden size
  int64_t layers = 1, dirs = 1;         // num_layers; 2 when bidirectional
  int64_t gates = 3;                    // G: 3 (gru: r, z, n) or 4 (lstm: i, f, g, o)
  int64_t params_per_direction = 4;     // 4 with biases, 2 without
  bool batch_first = false, has_bias = true;
  bool has_state = false;               // h0 (and c0) given
  double dropout = 0;                   // between layers, in training
  std::string select = "output";        // output, h_n or c_n

  /// Index in the parameter list of layer l, direction d's k-th tensor (weight_ih,
  /// weight_hh, bias_ih, bias_hh).
  size_t param_index(int64_t l, int64_t d, int64_t k) const {
    return static_cast<size_t>((l * dirs + d) * params_per_direction + k);
  }
};

RnnPlan plan_rnn(const KernelSpec& spec, bool lstm);

}  // namespace tandem
