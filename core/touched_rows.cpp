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

void TouchedRows::reserve_slots(int64_t slots) {
  const int64_t capacity = values_.defined() ? values_.size(0) : 0;
  if (slots <= capacity) return;
  // grow by doubling: a step's rows settle after a few steps
  Tensor grown = Tensor::empty({std::max({int64_t{64}, capacity * 2, slots}), width_}, DType::float32);
  if (capacity > 0) std::memcpy(grown.raw_data(), values_.raw_data(), values_.nbytes());
  values_ = std::move(grown);
}

void TouchedRows::add_slot(int64_t row) {
  if (slot_of_.empty()) slot_of_.assign(static_cast<size_t>(rows_), -1);
  reserve_slots(slots_ + 1);
  slot_of_[static_cast<size_t>(row)] = static_cast<int32_t>(slots_++);
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
    ascending_current_ = false;
    list_.push_back(id);
  }
  // the new rows' values start at zero: their slots are consecutive, so one memset
  if (slots_ > first_new_slot)
    std::memset(values_.data<float>() + first_new_slot * width_, 0,
                sizeof(float) * static_cast<size_t>((slots_ - first_new_slot) * width_));
}

// Note [first entry writes]: a batch of 16,384 ids marks some 15,000 new rows of a
// 100,000-row table, and zeroing their values first was a pass over 1.9 MB that the
// accumulation then reads again. Instead the entry that makes a row new says so, and the
// kernel, visiting the entries in order, writes its gradient (0 + x is x, bit for bit) and
// adds the later ones. The pass itself reads and writes one array entry per id (the row's
// slot), on the kernel's thread before its parallel accumulation.
void TouchedRows::mark_entries(std::span<const int64_t> ids, int64_t skip, std::span<float*> row_of_entry,
                               std::span<uint8_t> first_of_entry) {
  TANDEM_ASSERT(holds_values() && row_of_entry.size() == ids.size() && first_of_entry.size() == ids.size(),
                "mark_entries: a row gradient, and a destination per id");
  if (bits_.empty()) bits_.assign(static_cast<size_t>((rows_ + 63) / 64), 0);
  if (slot_of_.empty()) slot_of_.assign(static_cast<size_t>(rows_), -1);
  // at most one new row per id: the values' storage moves now or never during the pass
  reserve_slots(std::min(rows_, slots_ + static_cast<int64_t>(ids.size())));
  float* values = values_.data<float>();
  int32_t* slot_of = slot_of_.data();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    first_of_entry[i] = 0;
    if (id == skip) {
      row_of_entry[i] = nullptr;
      continue;
    }
    TANDEM_ASSERT(id >= 0 && id < rows_, "touched row " + std::to_string(id) + " outside [0, " + std::to_string(rows_) + ")");
    int32_t slot = slot_of[id];
    if (slot < 0) {
      slot = static_cast<int32_t>(slots_++);
      slot_of[id] = slot;
      bits_[static_cast<size_t>(id >> 6)] |= uint64_t{1} << (id & 63);
      list_.push_back(id);
      first_of_entry[i] = 1;
    }
    row_of_entry[i] = values + static_cast<int64_t>(slot) * width_;
  }
  ascending_current_ = false;
}

std::span<const int64_t> TouchedRows::mark_stepped(std::span<const int64_t> ids, int64_t skip) {
  TANDEM_ASSERT(holds_values() && !all_ && list_.empty(), "mark_stepped: a row gradient's one writer, first");
  if (bits_.empty()) bits_.assign(static_cast<size_t>((rows_ + 63) / 64), 0);
  if (repeated_bits_.empty()) repeated_bits_.assign(bits_.size(), 0);
  if (slot_of_.empty()) slot_of_.assign(static_cast<size_t>(rows_), -1);
  stepped_ = true;
  // Without branches on the bits: for a small table whose rows repeat, whether an id was
  // seen is a coin toss a branch predictor loses half the time. Each id is written at the
  // lists' ends and kept by advancing their lengths or not.
  list_.resize(ids.size());
  repeated_.resize(ids.size());
  size_t listed = 0, repeats = 0;
  uint64_t* bits = bits_.data();
  uint64_t* repeated_bits = repeated_bits_.data();
  for (const int64_t id : ids) {
    if (id == skip) continue;
    TANDEM_ASSERT(id >= 0 && id < rows_, "touched row " + std::to_string(id) + " outside [0, " + std::to_string(rows_) + ")");
    const auto w = static_cast<size_t>(id >> 6);
    const auto b = static_cast<unsigned>(id & 63);
    const uint64_t seen = (bits[w] >> b) & 1;
    // its second entry makes it a repeated row, summed in a slot
    const uint64_t second = seen & ~(repeated_bits[w] >> b) & 1;
    bits[w] |= uint64_t{1} << b;
    repeated_bits[w] |= seen << b;
    list_[listed] = id;
    listed += 1 - seen;
    repeated_[repeats] = id;
    repeats += second;
  }
  list_.resize(listed);
  repeated_.resize(repeats);
  reserve_slots(static_cast<int64_t>(repeated_.size()));
  for (const int64_t id : repeated_) slot_of_[static_cast<size_t>(id)] = static_cast<int32_t>(slots_++);
  ascending_current_ = false;
  return repeated_;
}

void TouchedRows::zero_sums(int64_t begin, int64_t end) {
  TANDEM_ASSERT(stepped_ && begin >= 0 && begin <= end && end <= width_, "zero_sums: columns of the sums");
  if (slots_ == 0 || begin == end) return;  // no values at all while no row repeats
  // summed from +0, as a dense gradient is
  float* values = values_.data<float>();
  // a loop the compiler vectorises, not a memset call per row of a few cache lines
  for (int64_t k = 0; k < slots_; ++k) {
    float* row = values + k * width_;
#pragma omp simd
    for (int64_t d = begin; d < end; ++d) row[d] = 0.f;
  }
}

std::span<const int64_t> TouchedRows::list() const {
  if (!ascending_current_) {
    // Ascending: from the bits when they are few words a listed row (one pass over them),
    // else by sorting the list.
    ascending_.resize(list_.size());
    if (bits_.size() < list_.size() * 8) {
      size_t n = 0;
      for (size_t w = 0; w < bits_.size(); ++w)
        for (uint64_t word = bits_[w]; word != 0; word &= word - 1)
          ascending_[n++] = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
    } else {
      std::copy(list_.begin(), list_.end(), ascending_.begin());
      std::sort(ascending_.begin(), ascending_.end());
    }
    ascending_current_ = true;
  }
  return ascending_;
}

void TouchedRows::clear() {
  // O(rows listed), not O(rows): a step on a huge table clears what it marked; but when the
  // rows listed are more than a sixteenth of the table, one pass over the arrays is faster
  // than a scattered write per row (16,000 of 100,000 rows: 0.13 ms one by one)
  if (static_cast<int64_t>(list_.size()) * 16 > rows_) {
    std::fill(bits_.begin(), bits_.end(), 0);
    std::fill(slot_of_.begin(), slot_of_.end(), -1);
  } else {
    for (int64_t id : list_) {
      bits_[static_cast<size_t>(id >> 6)] &= ~(uint64_t{1} << (id & 63));
      if (!slot_of_.empty()) slot_of_[static_cast<size_t>(id)] = -1;
    }
  }
  list_.clear();
  for (const int64_t id : repeated_) repeated_bits_[static_cast<size_t>(id >> 6)] &= ~(uint64_t{1} << (id & 63));
  repeated_.clear();
  stepped_ = false;
  ascending_.clear();
  slots_ = 0;  // the values' storage stays for the next step's rows
  ascending_current_ = true;
  all_ = false;
}

}  // namespace tandem
