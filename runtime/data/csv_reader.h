// Private to runtime/data: the CSV half of load_dataset.
#pragma once

#include <vector>

#include "runtime/data/dataset.h"

namespace tandem {

/// Reads spec.path (plain or gzip, streamed line by line) into one tensor per column,
/// [N, *sample_shape]. `columns` are already checked (names unique, shapes valid).
/// UserError "PATH:LINE: ..." for a bad row, "PATH: no samples" when there is none.
/// `header_may_skip`: a header that names none of the columns is skipped, the columns read
/// in order (CsvHeader::may_name_columns).
TensorMap read_csv(const DataSpec& spec, const std::vector<ColumnSpec>& columns, bool header_may_skip);

}  // namespace tandem
