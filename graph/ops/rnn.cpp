// gru (torch.nn.GRU) and lstm (torch.nn.LSTM).
//
// A layer has one output tensor, so which of torch's (output, h_n) / (output, (h_n, c_n))
// the layer exposes is the attribute `select` (output, h_n, or c_n for lstm); a model that
// needs two of them, which torch would get from one call, uses the output (the last
// time step of `output` is h_n of the last layer for a unidirectional RNN). Optional
// inputs after x: h0 (gru), h0 and c0 (lstm, both or neither, as torch's tuple).
#include <cmath>

#include "graph/ops/op_schemas.h"

namespace tandem {
namespace {

/// torch.nn.GRU has 3 gates (r, z, n), torch.nn.LSTM 4 (i, f, g, o).
OpSchema recurrent(const std::string& op, int64_t gates) {
  const bool lstm = gates == 4;
  OpSchema s;
  s.name = op;
  s.summary = lstm ? "multi-layer LSTM over [T, N, C] (torch.nn.LSTM); select: output, h_n or c_n"
                   : "multi-layer GRU over [T, N, C] (torch.nn.GRU); select: output or h_n";
  s.attrs = {{"input_size", AttrType::integer, {}, true, false, {}, 1.0},
             {"hidden_size", AttrType::integer, {}, true, false, {}, 1.0},
             {"num_layers", AttrType::integer, int64_t{1}, false, false, {}, 1.0},
             {"bias", AttrType::boolean, true},
             {"batch_first", AttrType::boolean, false},
             {"dropout", AttrType::number, 0.0, false, false, {}, 0.0, 1.0},
             {"bidirectional", AttrType::boolean, false},
             {"select", AttrType::string, std::string("output"), false, false,
              lstm ? std::vector<std::string>{"output", "h_n", "c_n"} : std::vector<std::string>{"output", "h_n"}}};
  if (lstm) s.attrs.push_back({"proj_size", AttrType::integer, int64_t{0}, false, false, {}, 0.0});
  s.min_inputs = 1;
  s.max_inputs = lstm ? 3 : 2;
  s.validate = [lstm](Attributes& a) {
    if (lstm && a.get_int("proj_size") != 0) throw SchemaError("proj_size is not supported (0 only)");
  };
  s.params = [gates](const Attributes& a) {
    // torch's flat weights, in its state_dict order: per layer, per direction,
    // weight_ih, weight_hh, bias_ih, bias_hh; each gate-major ([gates * hidden, in]).
    const int64_t h = a.get_int("hidden_size"), layers = a.get_int("num_layers");
    const int64_t dirs = a.get_bool("bidirectional") ? 2 : 1;
    const double bound = 1.0 / std::sqrt(static_cast<double>(h));
    const ParamInit init{ParamInit::Kind::uniform, -bound, bound};
    std::vector<ParamSpec> p;
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t d = 0; d < dirs; ++d) {
        const std::string suffix = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
        const int64_t in = l == 0 ? a.get_int("input_size") : h * dirs;
        p.push_back({"weight_ih" + suffix, {gates * h, in}, init});
        p.push_back({"weight_hh" + suffix, {gates * h, h}, init});
        if (a.get_bool("bias")) {
          p.push_back({"bias_ih" + suffix, {gates * h}, init});
          p.push_back({"bias_hh" + suffix, {gates * h}, init});
        }
      }
    return p;
  };
  s.infer = [lstm](const std::vector<TensorType>& in, const Attributes& a) {
    const TensorType& x = in[0];
    require_dtype(x, DType::float32, "the input");
    const bool bf = a.get_bool("batch_first");
    if (x.shape.size() != 3)
      throw SchemaError(std::string("the input must be ") + (bf ? "[N, T, C] (batch_first)" : "[T, N, C]") +
                        ", got shape " + sym_shape_str(x.shape) +
                        (x.shape.size() == 2 ? " (an unbatched sequence is not supported: add a batch dimension)" : ""));
    if (!(x.shape[2] == Dim(a.get_int("input_size"))))
      throw SchemaError("the input's last dimension is " + x.shape[2].str() + " but input_size is " +
                        std::to_string(a.get_int("input_size")) + " (input shape " + sym_shape_str(x.shape) + ")");
    if (lstm && in.size() == 2)
      throw SchemaError("lstm takes h0 and c0 together (torch's (h_0, c_0)), got only one initial state input");
    const int64_t h = a.get_int("hidden_size"), dirs = a.get_bool("bidirectional") ? 2 : 1;
    const Dim t = bf ? x.shape[1] : x.shape[0], n = bf ? x.shape[0] : x.shape[1];
    const SymShape state{Dim(a.get_int("num_layers") * dirs), n, Dim(h)};
    for (size_t i = 1; i < in.size(); ++i) {
      const std::string what = i == 1 ? "h0 (input 2)" : "c0 (input 3)";
      require_dtype(in[i], DType::float32, what);
      if (!(in[i].shape == state))
        throw SchemaError(what + " must be [num_layers * num_directions, N, hidden_size] = " + sym_shape_str(state) +
                          ", got " + sym_shape_str(in[i].shape));
    }
    if (a.get_string("select") != "output") return TensorType{state, DType::float32};
    return TensorType{bf ? SymShape{n, t, Dim(h * dirs)} : SymShape{t, n, Dim(h * dirs)}, DType::float32};
  };
  return s;
}

}  // namespace

std::vector<OpSchema> rnn_schemas() { return {recurrent("gru", 3), recurrent("lstm", 4)}; }

}  // namespace tandem
