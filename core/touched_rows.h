// TouchedRows: which rows of a parameter's gradient may be non-zero since it was last
// zeroed. An embedding table's backward writes only the rows its batch looked up: a
// DLRM-sized table (1,000,000 x 64) gets a few hundred of them per step. Knowing which, the
// gradient is zeroed row by row instead of all 256 MiB, and SGD without momentum or weight
// decay updates only those rows (its update of a row whose gradient is zero is the
// identity), as torch's `sparse=True` tables with SGD do, and to the same bits as the
// dense update.
//
// Note [touched rows]: the contract is one-sided. A row not listed must hold a zero
// gradient; a listed row may hold zero too. A writer that does not record its rows (a
// kernel without the ability, a reduction of device gradients into the host's) marks all
// of them, which falls back to the dense behaviour exactly.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace tandem {

/// Not thread-safe: one writer at a time (an executor's backward, or the trainer).
class TouchedRows {
 public:
  /// For a gradient whose first dimension has `rows` rows (a bias or scalar: 1).
  explicit TouchedRows(int64_t rows = 1) : rows_(rows) {}

  /// Every row may be non-zero: the gradient is dense until the next clear().
  void mark_all() { all_ = true; }
  /// Rows `ids` (each in [0, rows)), except any equal to `skip` (an embedding's
  /// padding_idx, which receives no gradient).
  void mark(std::span<const int64_t> ids, int64_t skip = -1);

  bool all() const { return all_; }
  int64_t rows() const { return rows_; }
  /// The rows marked since the last clear(), ascending; meaningful when !all().
  std::span<const int64_t> list();
  /// How many rows may be non-zero: rows() when all().
  int64_t count() const { return all_ ? rows_ : static_cast<int64_t>(list_.size()); }
  /// The gradient was zeroed: nothing is touched.
  void clear();

 private:
  int64_t rows_;
  bool all_ = false;
  bool sorted_ = true;
  std::vector<uint64_t> bits_;  // a bit per row, allocated by the first mark()
  std::vector<int64_t> list_;   // the rows whose bit is set
};

/// Touched rows by parameter name, beside a model's gradients. A std::map: its elements
/// stay where they are, so executors keep pointers to them.
using TouchedRowsMap = std::map<std::string, TouchedRows>;

}  // namespace tandem
