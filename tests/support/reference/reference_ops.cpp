#include "tests/support/reference/reference_ops.h"

namespace tandem::reference {

void forward(const KernelSpec& spec, const KernelArgs& args) {
  const std::string& op = spec.op;
  if (op == "linear") return linear(spec, args);
  if (op == "matmul") return matmul(spec, args);
  if (op == "embedding") return embedding(spec, args);
  if (op == "embedding_bag") return embedding_bag(spec, args);
  if (is_activation(op)) return activation(spec, args);
  if (op == "softmax" || op == "log_softmax") return softmax(spec, args);
  if (op == "normalize") return normalize(spec, args);
  if (op == "layer_norm") return layer_norm(spec, args);
  if (op == "dropout") return dropout(spec, args);
  if (op == "add" || op == "mul") return binary(spec, args);
  if (op == "cat") return cat(spec, args);
  if (op == "flatten" || op == "reshape") return copy(spec, args);
  if (op == "permute") return permute(spec, args);
  if (op == "pad" || op == "roll" || op == "interpolate") return resample(spec, args);
  if (op == "expand") return expand(spec, args);
  if (op == "parameter" || op == "buffer") return parameter(spec, args);
  if (op == "scale") return scale(spec, args);
  if (op == "index_select") return index_select(spec, args);
  TANDEM_ASSERT(false, "reference::forward: no reference for op " + op);
}

}  // namespace tandem::reference
