#include "core/touched_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tandem {

void TouchedRows::mark_all() {
  TANDEM_ASSERT(!holds_values(), "a row gradient (sparse: true) cannot take a dense one");
  all_ = true;
}

void TouchedRows::hold_values(int64_t width) {
  TANDEM_ASSERT(width > 0 && list_.empty() && !all_, "hold_values: on a fresh, unmarked gradient");
  width_ = width;
}

void TouchedRows::add_slot(int64_t row) {
  if (slot_of_.empty()) slot_of_.assign(static_cast<size_t>(rows_), -1);
  const int64_t slot = slots_++;
  const int64_t capacity = values_.defined() ? values_.size(0) : 0;
  if (slot == capacity) {  // grow by doubling: a step's rows settle after a few steps
    Tensor grown = Tensor::empty({std::max<int64_t>(64, capacity * 2), width_}, DType::float32);
    if (capacity > 0) std::memcpy(grown.raw_data(), values_.raw_data(), values_.nbytes());
    values_ = std::move(grown);
  }
  slot_of_[static_cast<size_t>(row)] = static_cast<int32_t>(slot);
}

void TouchedRows::mark(std::span<const int64_t> ids, int64_t skip) {
  if (all_) return;  // nothing more to learn until clear()
  if (bits_.empty()) bits_.assign(static_cast<size_t>((rows_ + 63) / 64), 0);
  const int64_t first_new_slot = slots_;
  for (int64_t id : ids) {
    if (id == skip) continue;
    TANDEM_ASSERT(id >= 0 && id < rows_, "touched row " + std::to_string(id) + " outside [0, " + std::to_string(rows_) + ")");
    uint64_t& word = bits_[static_cast<size_t>(id >> 6)];
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (word & bit) continue;
    word |= bit;
    if (holds_values()) add_slot(id);
    sorted_ = sorted_ && (list_.empty() || list_.back() < id);
    list_.push_back(id);
  }
  // the new rows' values start at zero: their slots are consecutive, so one memset
  if (slots_ > first_new_slot)
    std::memset(values_.data<float>() + first_new_slot * width_, 0,
                sizeof(float) * static_cast<size_t>((slots_ - first_new_slot) * width_));
}

std::span<const int64_t> TouchedRows::list() const {
  if (!sorted_) {
    // Ascending: from the bits when they are few words a listed row (one pass over them),
    // else by sorting the list.
    if (bits_.size() < list_.size() * 8) {
      size_t n = 0;
      for (size_t w = 0; w < bits_.size(); ++w)
        for (uint64_t word = bits_[w]; word != 0; word &= word - 1)
          list_[n++] = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
    } else {
      std::sort(list_.begin(), list_.end());
    }
    sorted_ = true;
  }
  return list_;
}

void TouchedRows::clear() {
  // O(rows listed), not O(rows): a step on a huge table clears what it marked
  for (int64_t id : list_) {
    bits_[static_cast<size_t>(id >> 6)] &= ~(uint64_t{1} << (id & 63));
    if (!slot_of_.empty()) slot_of_[static_cast<size_t>(id)] = -1;
  }
  list_.clear();
  slots_ = 0;  // the values' storage stays for the next step's rows
  sorted_ = true;
  all_ = false;
}

}  // namespace tandem
