// The file `tandem predict --outputs` writes, by its extension: safetensors (every output by
// name), NumPy .npy (the one output of a one-output model) or CSV (a line per sample, a
// header naming the columns as training data's header names them: `score`, `logits_0`, ...).
#pragma once

#include <string>

#include "core/tensor.h"

namespace tandem::cli {

/// UserError "--outputs 'PATH': ..." when the extension is none of .safetensors, .npy, .csv,
/// or when .npy is asked of a model with several outputs. `outputs`: the names a model
/// declares, in order. Checked before any work.
void check_prediction_path(const std::string& path, const std::vector<std::string>& outputs);

/// Writes `outputs` (host tensors; for CSV each with the samples along dimension 0, the
/// same count for all) in the format `path`'s extension names. `order`: the model's output
/// names, the CSV's column order.
void write_predictions(const std::string& path, const TensorMap& outputs, const std::vector<std::string>& order);

}  // namespace tandem::cli
