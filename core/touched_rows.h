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
//
// Note [row gradient]: a table declared `sparse: true` (torch's argument, which makes its
// gradient a sparse tensor) has no dense gradient at all: its gradient is the listed rows'
// values, held here (hold_values()). A 1,000,000 x 64 table then takes its own 256 MiB in
// training, not twice that. Its rows are kept in the order they were first marked, each
// starting at zero; values_of(row) finds one. Nothing can mark all of them: the model keeps
// a table this way only when embedding kernels on the cpu are its only writers, and refuses
// a placement that would put it on a GPU (runtime/params/device_parameter_cache.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem {

/// Not thread-safe: one writer at a time (an executor's backward, or the trainer).
class TouchedRows {
 public:
  /// For a gradient whose first dimension has `rows` rows (a bias or scalar: 1).
  explicit TouchedRows(int64_t rows = 1) : rows_(rows) {}

  /// Every row may be non-zero: the gradient is dense until the next clear(). Not for a
  /// row gradient (hold_values()), which has no dense form to fall back to.
  void mark_all();
  /// Rows `ids` (each in [0, rows)), except any equal to `skip` (an embedding's
  /// padding_idx, which receives no gradient). A row gradient gives each new row its
  /// values, zeroed.
  void mark(std::span<const int64_t> ids, int64_t skip = -1);

  /// For a row gradient (hold_values()): marks `ids` as mark() does, in one pass, and
  /// writes for each entry i where its gradient row goes: `row_of_entry[i]`, that row's
  /// values (null for `skip`), and `first_of_entry[i]`, 1 when entry i is the row's first
  /// since clear(). A new row's values are not zeroed: a kernel visiting the entries in
  /// order writes the first entry's gradient and adds the rest (Note [first entry writes]).
  /// Both spans as long as `ids`; the pointers stay valid until the next mark or clear().
  void mark_entries(std::span<const int64_t> ids, int64_t skip, std::span<float*> row_of_entry,
                    std::span<uint8_t> first_of_entry);

  /// Note [a table stepped in its backward] (runtime/exec/table_updates.h): marks `ids`
  /// (but `skip`) as mark() does, for a backward that applies the gradient to the table
  /// itself. A row one entry touched takes that entry's step; a row several entries
  /// touched (repeated()) gets values, sum_of(row), where its entries are summed before one
  /// step, as its row gradient would be; they hold garbage until zero_sums() has zeroed
  /// every column. Returns the repeated rows, those of slots 0, 1, ... (sum_in_slot());
  /// valid until the next mark or clear(). One pass over `ids`, reading and writing bits.
  /// A row gradient only (hold_values()), by the table's one writer, before any other mark
  /// since clear(). Afterwards stepped() is true and the table has no gradient: values_of()
  /// is null for every row until clear().
  std::span<const int64_t> mark_stepped(std::span<const int64_t> ids, int64_t skip);
  /// After mark_stepped(): whether several entries touched `row`, and where they are summed.
  bool repeated(int64_t row) const { return (repeated_bits_[static_cast<size_t>(row >> 6)] >> (row & 63)) & 1; }
  float* sum_of(int64_t row) { return values_.data<float>() + slot_of_[static_cast<size_t>(row)] * width_; }
  float* sum_in_slot(int64_t slot) { return values_.data<float>() + slot * width_; }
  bool stepped() const { return stepped_; }
  /// After mark_stepped(): zeroes columns [begin, end) of every repeated row's sum. For a
  /// kernel whose threads split the columns, each its own, so that the lines it then adds
  /// into are already in its core's cache, not in the marking thread's.
  void zero_sums(int64_t begin, int64_t end);

  /// From now on the gradient itself is kept here, as rows of `width` values (Note [row
  /// gradient]). Before any mark().
  void hold_values(int64_t width);
  bool holds_values() const { return width_ > 0; }
  int64_t width() const { return width_; }
  /// The gradient row of a listed `row` (`width()` floats), else null. Valid until the
  /// next mark() or clear().
  /// Inline: backward asks for every id of a batch, and the update for every listed row.
  float* values_of(int64_t row) {
    return const_cast<float*>(static_cast<const TouchedRows*>(this)->values_of(row));
  }
  const float* values_of(int64_t row) const {
    if (slot_of_.empty() || stepped_ || row < 0 || row >= rows_) return nullptr;
    const int32_t slot = slot_of_[static_cast<size_t>(row)];
    return slot < 0 ? nullptr : values_.data<float>() + static_cast<int64_t>(slot) * width_;
  }
  /// A row gradient's rows in the order of their values (row_in_slot()[k]'s values are
  /// values_in_slot(k)): for a pass over every held row that needs no order, reading the
  /// values front to back. Valid until the next mark() or clear().
  std::span<const int64_t> row_in_slot() const { return stepped_ ? std::span<const int64_t>() : list_; }
  const float* values_in_slot(int64_t slot) const { return values_.data<float>() + slot * width_; }
  /// The bytes the held rows take (their capacity): what the allocator counts.
  size_t values_bytes() const { return values_.defined() ? values_.nbytes() : 0; }

  bool all() const { return all_; }
  int64_t rows() const { return rows_; }
  /// The rows marked since the last clear(), ascending; meaningful when !all().
  std::span<const int64_t> list() const;
  /// How many rows may be non-zero: rows() when all().
  int64_t count() const { return all_ ? rows_ : static_cast<int64_t>(list_.size()); }
  /// The gradient was zeroed: nothing is touched.
  void clear();

 private:
  int64_t rows_;
  bool all_ = false;
  std::vector<uint64_t> bits_;  // a bit per row, allocated by the first mark()
  // the rows whose bit is set, in the order they were marked: a row gradient's row of slot k
  // is list_[k]
  std::vector<int64_t> list_;
  // list_ ascending, made by list() on demand (logically const)
  mutable std::vector<int64_t> ascending_;
  mutable bool ascending_current_ = true;
  // a row gradient (hold_values()): the rows' values, [capacity, width], a row per slot in
  // the order rows were first marked; from the cpu allocator, so reports count them
  int64_t width_ = 0;
  Tensor values_;
  // per row of the table, its slot, or -1: an array, not a hash map, because backward looks
  // a row up for every id of the batch (4 bytes a row, against the width's floats of a
  // dense gradient)
  std::vector<int32_t> slot_of_;
  int64_t slots_ = 0;  // rows holding values since the last clear()
  // mark_stepped() since the last clear(): the repeated rows, slot by slot (list_ then lists
  // every row, in the order first marked)
  bool stepped_ = false;
  std::vector<int64_t> repeated_;
  std::vector<uint64_t> repeated_bits_;  // a bit per row, as bits_

  void add_slot(int64_t row);
  /// The values hold at least `slots` rows (a row gradient), their contents kept.
  void reserve_slots(int64_t slots);
};

/// Touched rows by parameter name, beside a model's gradients. A std::map: its elements
/// stay where they are, so executors keep pointers to them.
using TouchedRowsMap = std::map<std::string, TouchedRows>;

}  // namespace tandem
