// The file a user gives `tandem run --inputs`: safetensors, a NumPy .npy or .npz, or CSV,
// told apart by content rather than by name, so that a file of another kind is named as
// what it is ("x.pt is a PyTorch file (torch.save), not ...").
#pragma once

#include <string>

#include "core/tensor.h"
#include "graph/graph.h"

namespace tandem {

/// The graph inputs in `path`, by name:
/// - safetensors: its tensors by name;
/// - .npz (numpy.savez / savez_compressed): its arrays by name;
/// - .npy (numpy.save): the one array, for a model with exactly one input;
/// - CSV (plain or gzip): one sample per line, the inputs in consecutive columns in
///   declaration order, as training data's CSV without targets (docs/training.md); a first
///   line holding a cell that is not a number is a header, skipped; the model's
///   `train: data:` header and columns settings apply when its data is CSV.
/// Float64 arrays become float32, narrower integers int64 (runtime/io/npy.h). UserError
/// naming the file and what is wrong; the names and shapes are for Model::bind to check.
TensorMap read_input_file(const std::string& path, const Graph& graph);

}  // namespace tandem
