// embedding: indices int64 [*], weight [num, dim] -> [*, dim], a row gather.
// embedding_bag: indices [B, L], or indices [N] with offsets [B] ([B+1] with
// include_last_offset), weight [num, dim] -> [B, dim], reduced per bag by sum, mean or
// max as torch.nn.functional.embedding_bag: an empty bag gives zeros, entries equal to
// padding_idx are skipped (and not counted by mean).
// Indices and offsets are validated before any work, on one thread, so that a bad one
// raises a UserError instead of reading out of bounds.
//
// Backward: only the weight gets a gradient (indices and offsets are int64), accumulated
// into the dense dweight [num, dim], touching only the rows that were used; entries equal
// to padding_idx give nothing. Those rows are recorded (records_touched_rows), so that
// the trainer zeroes and updates only them (core/touched_rows.h); a `sparse: true`
// table's gradient is those rows alone, with no dense dweight (Note [row gradient]).
// Threads split the dim columns, so that repeated indices never race.
// A table stepped in its backward (BackwardArgs::table_step, plain SGD; not max bags, whose
// backward reads the table): an entry whose row no other entry touches goes into the
// table's row itself, w[idx[i]] = fma(dy[i] * scale, step, w[idx[i]]); a repeated row's
// entries are summed aside and the sum stepped once after them, by the thread that owns
// those columns: the bits of the update from a row gradient (runtime/exec/table_updates.h).
//   embedding:     dweight[idx[i]] += dy[i]
//   embedding_bag: sum:  dweight[idx] += dy[bag] for each entry of the bag;
//                  mean: the same divided by the bag's count of non-padding entries;
//                  max:  per column, dy[bag] goes to the entry forward chose (the first
//                        maximal one), found again from the weight in backward, so that
//                        forward stores nothing. The indices are those forward checked.
// look_up_again (a batch looked up before an update changed some rows): the entries
// (embedding) or whole bags (embedding_bag) that read a changed row are computed again by
// forward's own code, entry by entry or bag by bag, so they hold forward's bits.
// scale_grad_by_freq (torch's): each entry's gradient is divided by the number of times
// its index occurs among the batch's indices (all of them, across bags), so a frequent
// word's row is not pushed harder than a rare one's; max bags refuse it (schema).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backends/cpu/ops/op_factories.h"
#include "backends/optimizer_update.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

/// The touched rows of the weight's gradient, when the caller tracks them, else null.
TouchedRows* weight_rows(const BackwardArgs& args) {
  return args.grad_param_rows.empty() ? nullptr : args.grad_param_rows[0];
}

/// Whether backward has a weight gradient to add to: a dense one, or a row gradient
/// (`sparse: true`, core/touched_rows.h), which has no dense tensor.
bool wants_weight_gradient(const BackwardArgs& args) {
  const TouchedRows* rows = weight_rows(args);
  return args.table_step || args.grad_params[0].defined() || (rows && rows->holds_values());
}

/// Asks for columns [begin, end) of a row about to be written, a cache line (16 floats) at
/// a time.
inline void prefetch_columns(const float* row, int64_t begin, int64_t end) {
  for (int64_t d = begin; d < end; d += 16) __builtin_prefetch(row + d, /*write=*/1);
}

/// Where each entry's gradient row goes (row idx[i] of the dense gradient, that row's
/// values in a row gradient, or, stepping the table, the table's row; null for
/// padding_idx), and, for a row gradient, which entries are their row's first: those write
/// instead of adding (core/touched_rows.h, Note [first entry writes]; `first` empty: every
/// entry adds).
struct Destinations {
  std::vector<float*> row;
  std::vector<uint8_t> first;
  // stepping the table (BackwardArgs::table_step): no per-entry arrays; an entry's row is
  // found from its id, in the table or, for a repeated row, in its sum (`sums`)
  std::optional<float> step;
  TouchedRows* sums = nullptr;
  std::span<const int64_t> repeated;
  const int64_t* ids = nullptr;
  int64_t padding = -1;
  float* table = nullptr;
  int64_t dim = 0;

  /// Whether entry i gives nothing (padding_idx).
  bool skips(size_t i) const { return step ? ids[i] == padding : row[i] == nullptr; }
  /// Where entry i goes (not for an entry that skips()).
  float* target(size_t i) const {
    if (!step) return row[i];
    const int64_t id = ids[i];
    return sums->repeated(id) ? sums->sum_of(id) : table + id * dim;
  }

  /// row[i] += v * scale, or = for a first entry; stepping the table, the row's sum += v *
  /// scale for a repeated row, else the table's row = fma(v * scale, step, row); over
  /// columns [begin, end).
  void accumulate(size_t i, const float* v, float scale, int64_t begin, int64_t end) const {
    if (step) {
      const int64_t id = ids[i];
      if (!sums->repeated(id)) {
        float* to = table + id * dim;
        const float s = *step;
#pragma omp simd
        for (int64_t d = begin; d < end; ++d) to[d] = std::fma(v[d] * scale, s, to[d]);
        return;
      }
      float* to = sums->sum_of(id);
#pragma omp simd
      for (int64_t d = begin; d < end; ++d) to[d] += v[d] * scale;
      return;
    }
    float* to = row[i];
    if (!first.empty() && first[i]) {
#pragma omp simd
      for (int64_t d = begin; d < end; ++d) to[d] = v[d] * scale;
      return;
    }
#pragma omp simd
    for (int64_t d = begin; d < end; ++d) to[d] += v[d] * scale;
  }

  /// Stepping the table: zeroes the repeated rows' sums over columns [begin, end), on the
  /// thread that then adds into them (TouchedRows::zero_sums()), before its first entry.
  void zero_sums(int64_t begin, int64_t end) const {
    if (step) sums->zero_sums(begin, end);
  }

  /// Stepping the table: each repeated row by its summed entries, over columns [begin, end),
  /// after every entry: the optimizer's own row update.
  /// The repeated rows lie anywhere in the table, in the order they were found: each is
  /// asked for kRowsAhead rows ahead (Note [rows ahead] in runtime/optim/optimizer_impl.h);
  /// their sums are slot by slot, in order.
  void step_repeated(int64_t begin, int64_t end) const {
    if (!step) return;
    constexpr size_t kRowsAhead = 16;
    for (size_t k = 0; k < repeated.size(); ++k) {
      if (k + kRowsAhead < repeated.size()) prefetch_columns(table + repeated[k + kRowsAhead] * dim, begin, end);
      plain_sgd_row(*step, table + repeated[k] * dim + begin, sums->sum_in_slot(static_cast<int64_t>(k)) + begin,
                    end - begin);
    }
  }
};

/// Records the rows `idx` (but padding_idx) as touched and returns, per entry, where its
/// gradient row adds. Only for entries the accumulation then visits, in order: a first
/// entry's row holds nothing until it is written. `zeroed`: every destination starts at
/// zero, for a kernel that writes only some entries (max bags). On the calling thread,
/// before the parallel backward: recording may move a row gradient's values, and then no
/// pointer is handed out yet.
Destinations gradient_destinations(const BackwardArgs& args, const int64_t* idx, int64_t count, int64_t dim,
                                   int64_t padding_idx, bool zeroed = false) {
  TouchedRows* rows = weight_rows(args);
  Destinations out;
  const std::span<const int64_t> ids{idx, static_cast<size_t>(count)};
  if (args.table_step) {
    TANDEM_ASSERT(rows && rows->holds_values() && rows->width() == dim && !zeroed,
                  "a table stepped in backward has a row gradient");
    out.step = args.table_step;
    out.sums = rows;
    out.repeated = rows->mark_stepped(ids, padding_idx);
    out.ids = idx;
    out.padding = padding_idx;
    out.table = args.params[0].data<float>();
    out.dim = dim;
    return out;
  }
  out.row.assign(static_cast<size_t>(count), nullptr);
  if (rows && rows->holds_values() && !zeroed) {
    out.first.resize(static_cast<size_t>(count));
    rows->mark_entries(ids, padding_idx, out.row, out.first);
    return out;
  }
  if (rows) rows->mark(ids, padding_idx);
  const bool held = rows && rows->holds_values();
  float* dense = held ? nullptr : args.grad_params[0].data<float>();
  for (int64_t i = 0; i < count; ++i) {
    if (idx[i] == padding_idx) continue;
    out.row[static_cast<size_t>(i)] = held ? rows->values_of(idx[i]) : dense + idx[i] * dim;
  }
  return out;
}

/// The rows a batch's entries add into lie anywhere in a table of megabytes (or, for a row
/// gradient, in its rows' values), a trip to memory each that the hardware's prefetcher
/// cannot foresee: the accumulation asks for the row kEntriesAhead entries ahead, so that
/// many trips are under way at once (as the row updates do: Note [rows ahead] in
/// runtime/optim/optimizer_impl.h).
constexpr int64_t kEntriesAhead = 24;
inline void prefetch_destination(const Destinations& dst, int64_t entry, int64_t count, int64_t begin, int64_t end) {
  if (entry >= count || dst.skips(static_cast<size_t>(entry))) return;
  prefetch_columns(dst.target(static_cast<size_t>(entry)), begin, end);
}

/// A mark per row of a `num`-row table: those `rows` lists.
std::vector<uint8_t> marked_rows(std::span<const int64_t> rows, int64_t num) {
  std::vector<uint8_t> marked(static_cast<size_t>(num), 0);
  for (int64_t r : rows) marked[static_cast<size_t>(r)] = 1;
  return marked;
}

/// scale_grad_by_freq: per entry, 1 / (occurrences of its index among all `count`), as
/// torch's embedding_dense_backward scales each addition.
std::vector<float> inverse_frequencies(const int64_t* idx, int64_t count) {
  std::unordered_map<int64_t, int64_t> occurrences;
  for (int64_t i = 0; i < count; ++i) ++occurrences[idx[i]];
  std::vector<float> scale(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) scale[static_cast<size_t>(i)] = static_cast<float>(1.0 / occurrences[idx[i]]);
  return scale;
}

class EmbeddingKernel final : public Kernel {
 public:
  explicit EmbeddingKernel(const KernelSpec& spec) {
    num_ = spec.params.at(0).shape.at(0);
    dim_ = spec.params.at(0).shape.at(1);
    count_ = shape_numel(spec.inputs.at(0).shape);
    padding_idx_ = read_padding_idx(*spec.attrs, num_);
    scale_grad_by_freq_ = spec.attrs->has("scale_grad_by_freq") && spec.attrs->get_bool("scale_grad_by_freq");
  }

  bool backward_reads_output() const override { return false; }
  bool records_touched_rows(size_t) const override { return true; }
  bool steps_table_in_backward() const override { return true; }

  void backward(const BackwardArgs& args) override {
    if (!wants_weight_gradient(args)) return;
    const int64_t* idx = args.inputs[0].data<int64_t>();
    const Destinations dst = gradient_destinations(args, idx, count_, dim_, padding_idx_);
    const std::vector<float> freq = scale_grad_by_freq_ ? inverse_frequencies(idx, count_) : std::vector<float>{};
    const float* g = args.grad_outputs[0].data<float>();
    const int64_t dim = dim_, count = count_;
    cpu::parallel_for(dim, count, [&](int64_t begin, int64_t end) {
      dst.zero_sums(begin, end);
      for (int64_t i = 0; i < count; ++i) {
        prefetch_destination(dst, i + kEntriesAhead, count, begin, end);
        const auto entry = static_cast<size_t>(i);
        if (dst.skips(entry)) continue;  // padding_idx
        dst.accumulate(entry, g + i * dim, freq.empty() ? 1.f : freq[entry], begin, end);
      }
      dst.step_repeated(begin, end);
    });
  }

  void forward(const KernelArgs& args) override {
    const int64_t* idx = args.inputs[0].data<int64_t>();
    const float* w = args.params[0].data<float>();
    float* out = args.outputs[0].data<float>();
    cpu::check_indices(idx, count_, num_, "embedding");
    const int64_t dim = dim_;
    cpu::parallel_for(count_, dim, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memcpy(out + i * dim, w + idx[i] * dim, sizeof(float) * dim);
    });
  }

  bool looks_up_rows() const override { return true; }

  void look_up_again(const KernelArgs& args, std::span<const int64_t> rows) override {
    const int64_t* idx = args.inputs[0].data<int64_t>();  // those forward checked
    const float* w = args.params[0].data<float>();
    float* out = args.outputs[0].data<float>();
    const std::vector<uint8_t> changed = marked_rows(rows, num_);
    const int64_t dim = dim_;
    cpu::parallel_for(count_, dim, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        if (changed[static_cast<size_t>(idx[i])]) std::memcpy(out + i * dim, w + idx[i] * dim, sizeof(float) * dim);
    });
  }

 private:
  int64_t num_ = 0, dim_ = 0, count_ = 0;
  int64_t padding_idx_ = -1;
  bool scale_grad_by_freq_ = false;
};

enum class BagMode { sum, mean, max };

class EmbeddingBagKernel final : public Kernel {
 public:
  explicit EmbeddingBagKernel(const KernelSpec& spec) {
    const Attributes& attrs = *spec.attrs;
    num_ = spec.params.at(0).shape.at(0);
    dim_ = spec.params.at(0).shape.at(1);
    const std::string& mode = attrs.get_string("mode");
    if (mode == "sum") mode_ = BagMode::sum;
    else if (mode == "mean") mode_ = BagMode::mean;
    else if (mode == "max") mode_ = BagMode::max;
    else throw UserError("embedding_bag: mode '" + mode + "' is not one of sum, mean, max");
    padding_idx_ = read_padding_idx(attrs, num_);
    include_last_offset_ = attrs.get_bool("include_last_offset");
    scale_grad_by_freq_ = attrs.has("scale_grad_by_freq") && attrs.get_bool("scale_grad_by_freq");
    const Shape& in = spec.inputs.at(0).shape;
    bags_ = spec.outputs.at(0).shape.at(0);
    if (spec.inputs.size() == 1) {
      if (in.size() != 2)
        throw UserError("embedding_bag: indices of shape " + shape_str(in) + " need offsets (or shape [B, L])");
      bag_len_ = in[1];
      count_ = in[0] * in[1];
    } else {
      if (in.size() != 1) throw UserError("embedding_bag: with offsets, indices must be 1-D, got " + shape_str(in));
      count_ = in[0];
      num_offsets_ = spec.inputs[1].shape.at(0);
      TANDEM_ASSERT(bags_ == (include_last_offset_ ? std::max<int64_t>(num_offsets_ - 1, 0) : num_offsets_),
                    "embedding_bag: output batch does not match offsets");
    }
  }

  void forward(const KernelArgs& args) override {
    const int64_t* idx = args.inputs[0].data<int64_t>();
    const int64_t* offsets = args.inputs.size() > 1 ? args.inputs[1].data<int64_t>() : nullptr;
    const float* w = args.params[0].data<float>();
    float* out = args.outputs[0].data<float>();
    cpu::check_indices(idx, count_, num_, "embedding_bag");
    if (offsets) check_offsets(offsets);
    cpu::parallel_for(bags_, dim_ * std::max<int64_t>(1, count_ / std::max<int64_t>(bags_, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t b = begin; b < end; ++b) {
                          int64_t first = offsets ? offsets[b] : b * bag_len_;
                          int64_t last = offsets ? bag_end(offsets, b) : first + bag_len_;
                          reduce_bag(idx + first, last - first, w, out + b * dim_);
                        }
                      });
  }

  bool looks_up_rows() const override { return true; }

  void look_up_again(const KernelArgs& args, std::span<const int64_t> rows) override {
    const int64_t* idx = args.inputs[0].data<int64_t>();  // those forward checked
    const int64_t* offsets = args.inputs.size() > 1 ? args.inputs[1].data<int64_t>() : nullptr;
    const float* w = args.params[0].data<float>();
    float* out = args.outputs[0].data<float>();
    const std::vector<uint8_t> changed = marked_rows(rows, num_);
    cpu::parallel_for(bags_, dim_ * std::max<int64_t>(1, count_ / std::max<int64_t>(bags_, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t b = begin; b < end; ++b) {
                          const int64_t first = offsets ? offsets[b] : b * bag_len_;
                          const int64_t last = offsets ? bag_end(offsets, b) : first + bag_len_;
                          bool reads_changed = false;
                          for (int64_t i = first; i < last && !reads_changed; ++i)
                            reads_changed = changed[static_cast<size_t>(idx[i])] != 0;
                          if (reads_changed) reduce_bag(idx + first, last - first, w, out + b * dim_);
                        }
                      });
  }

  bool backward_reads_output() const override { return false; }  // max mode recomputes its arg-max
  bool records_touched_rows(size_t) const override { return true; }
  bool steps_table_in_backward() const override { return mode_ != BagMode::max; }  // max reads the table

  void backward(const BackwardArgs& args) override {
    if (!wants_weight_gradient(args)) return;
    const int64_t* idx = args.inputs[0].data<int64_t>();
    const int64_t* offsets = args.inputs.size() > 1 ? args.inputs[1].data<int64_t>() : nullptr;
    // The entries in a bag: every one but those past the last bag's end, which
    // include_last_offset leaves out. Every one may be written (max mode writes a subset:
    // a superset is allowed, its destinations zeroed).
    const int64_t covered = offsets ? (bags_ > 0 ? bag_end(offsets, bags_ - 1) : 0) : count_;
    const Destinations dst =
        gradient_destinations(args, idx, covered, dim_, padding_idx_, /*zeroed=*/mode_ == BagMode::max);
    const float* w = args.params[0].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    const std::vector<float> freq = scale_grad_by_freq_ ? inverse_frequencies(idx, count_) : std::vector<float>{};
    const int64_t dim = dim_, padding = padding_idx_;
    cpu::parallel_for(dim, std::max<int64_t>(count_, bags_), [&](int64_t begin, int64_t end) {
      dst.zero_sums(begin, end);
      for (int64_t b = 0; b < bags_; ++b) {
        const int64_t first = offsets ? offsets[b] : b * bag_len_;
        const int64_t last = offsets ? bag_end(offsets, b) : first + bag_len_;
        const float* gb = g + b * dim;
        if (mode_ == BagMode::max) {
          for (int64_t d = begin; d < end; ++d) {
            int64_t best = -1;  // the entry whose row forward chose
            for (int64_t i = first; i < last; ++i) {
              if (idx[i] == padding) continue;
              if (best < 0 || w[idx[i] * dim + d] > w[idx[best] * dim + d]) best = i;
            }
            if (best >= 0) dst.row[static_cast<size_t>(best)][d] += gb[d];
          }
          continue;
        }
        float scale = 1.f;
        if (mode_ == BagMode::mean) {
          int64_t used = 0;
          for (int64_t i = first; i < last; ++i) used += idx[i] != padding;
          if (used == 0) continue;
          scale = 1.f / static_cast<float>(used);
        }
        for (int64_t i = first; i < last; ++i) {
          prefetch_destination(dst, i + kEntriesAhead, covered, begin, end);
          const auto entry = static_cast<size_t>(i);
          if (dst.skips(entry)) continue;  // padding_idx
          dst.accumulate(entry, gb, freq.empty() ? scale : scale * freq[entry], begin, end);
        }
      }
      dst.step_repeated(begin, end);
    });
  }

 private:
  int64_t bag_end(const int64_t* offsets, int64_t b) const {
    return b + 1 < num_offsets_ ? offsets[b + 1] : count_;
  }

  void check_offsets(const int64_t* offsets) const {
    if (num_offsets_ == 0) return;
    if (offsets[0] != 0)
      throw UserError("embedding_bag: offsets[0] is " + std::to_string(offsets[0]) + ", must be 0");
    for (int64_t i = 1; i < num_offsets_; ++i) {
      if (offsets[i] < offsets[i - 1] || offsets[i] > count_)
        throw UserError("embedding_bag: offsets[" + std::to_string(i) + "] is " + std::to_string(offsets[i]) +
                        ", must be in [" + std::to_string(offsets[i - 1]) + ", " + std::to_string(count_) +
                        "] (offsets are non-decreasing and at most the number of indices)");
    }
  }

  void reduce_bag(const int64_t* idx, int64_t n, const float* w, float* out) const {
    const int64_t dim = dim_;
    int64_t used = 0;
    if (mode_ == BagMode::max) {
      for (int64_t i = 0; i < n; ++i) {
        if (idx[i] == padding_idx_) continue;
        const float* row = w + idx[i] * dim;
        if (used++ == 0) {
          std::memcpy(out, row, sizeof(float) * dim);
          continue;
        }
        for (int64_t d = 0; d < dim; ++d) out[d] = std::max(out[d], row[d]);
      }
      if (used == 0) std::fill(out, out + dim, 0.f);
      return;
    }
    std::fill(out, out + dim, 0.f);
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] == padding_idx_) continue;
      const float* row = w + idx[i] * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) out[d] += row[d];
      ++used;
    }
    if (mode_ == BagMode::mean && used > 0) {
      const float count = static_cast<float>(used);
      for (int64_t d = 0; d < dim; ++d) out[d] /= count;
    }
  }

  int64_t num_ = 0, dim_ = 0, bags_ = 0, count_ = 0, bag_len_ = 0, num_offsets_ = 0;
  int64_t padding_idx_ = -1;
  bool include_last_offset_ = false, scale_grad_by_freq_ = false;
  BagMode mode_ = BagMode::mean;
};

}  // namespace

std::unique_ptr<Kernel> make_embedding_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<EmbeddingKernel>(spec);
}

std::unique_ptr<Kernel> make_embedding_bag_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<EmbeddingBagKernel>(spec);
}

}  // namespace tandem
