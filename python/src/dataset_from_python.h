// Training data from Python: arrays by column (samples first, as in a data file), a file
// path, or the model's own train: data:, checked as `tandem train` checks a file.
#pragma once

#include <pybind11/pybind11.h>

#include "runtime/data/dataset.h"
#include "runtime/model.h"

namespace tandem::python {

/// `data`: a dict {input or target name: array [samples, ...]} (arrays shared, not copied),
/// a path (CSV or safetensors, as --data), or None: the model's train: data:. `spec`'s data
/// entry is the model's (a path given here replaces it, as --data does). UserError naming
/// the column for a missing or unknown one, a wrong shape or dtype, or an index outside its
/// range. Needs the GIL.
Dataset dataset_from_python(const pybind11::handle& data, const Graph& graph, const TrainingSpec& spec);

}  // namespace tandem::python
