#include "core/touched_rows.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

void TouchedRows::mark(std::span<const int64_t> ids, int64_t skip) {
  if (all_) return;  // nothing more to learn until clear()
  if (bits_.empty()) bits_.assign(static_cast<size_t>((rows_ + 63) / 64), 0);
  for (int64_t id : ids) {
    if (id == skip) continue;
    TANDEM_ASSERT(id >= 0 && id < rows_, "touched row " + std::to_string(id) + " outside [0, " + std::to_string(rows_) + ")");
    uint64_t& word = bits_[static_cast<size_t>(id >> 6)];
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (word & bit) continue;
    word |= bit;
    sorted_ = sorted_ && (list_.empty() || list_.back() < id);
    list_.push_back(id);
  }
}

std::span<const int64_t> TouchedRows::list() {
  if (!sorted_) {
    std::sort(list_.begin(), list_.end());
    sorted_ = true;
  }
  return list_;
}

void TouchedRows::clear() {
  // O(rows listed), not O(rows): a step on a huge table clears what it marked
  for (int64_t id : list_) bits_[static_cast<size_t>(id >> 6)] &= ~(uint64_t{1} << (id & 63));
  list_.clear();
  sorted_ = true;
  all_ = false;
}

}  // namespace tandem
