// Training data: datasets from CSV (gzip too) and safetensors, a seeded split, and a
// loader that batches, shuffles per epoch and prefetches on worker threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem {

/// One named column of the data: a model input or target, per sample.
struct ColumnSpec {
  std::string name;
  Shape sample_shape;            // without the batch dimension: {64} for x [batch, 64]; {} for label [batch]
  DType dtype = DType::float32;
  std::optional<int64_t> high;   // int64 values must lie in [0, high) (class count); nullopt: any
  /// Where the model takes the batch: 0 for [batch, 64]; 1 for a sequence-first [seq, batch].
  /// Data files always hold samples along dimension 0; to_model_layout moves them here.
  int batch_dim = 0;
  /// With high: one more value allowed, the loss's ignore_index (masked-token targets hold -100).
  std::optional<int64_t> ignored;
  /// What sets `high`, for a message: "the table of layer 'item_emb' (num_embeddings 1000)"
  /// for ids an embedding looks up; empty for class indices and a declared `high:`.
  std::string bound_by;
};

/// "input 'item' id 1500 is outside [0, 1000)" and what bounds it: the message of a value of
/// column `c` outside its range.
std::string out_of_range_text(const ColumnSpec& c, int64_t value);

// DataSpec (path, format, header, columns) is read from a model file's `train: data:`:
// it lives with the graph.

/// Samples along dimension 0 of every tensor. Immutable once loaded; safe to share.
class Dataset {
 public:
  Dataset() = default;
  explicit Dataset(TensorMap tensors);  // all with the same dimension 0
  int64_t size() const { return size_; }
  const TensorMap& tensors() const { return tensors_; }
  /// The samples at `indices`, in that order (a gather into fresh tensors, in `memory`).
  TensorMap gather(std::span<const int64_t> indices, Allocator& memory = cpu_allocator()) const;
  Dataset subset(std::span<const int64_t> indices) const { return Dataset(gather(indices)); }

 private:
  TensorMap tensors_;
  int64_t size_ = 0;
};

/// Loads `spec` into tensors named by `columns`. UserError naming the file and line for
/// a missing file, an empty file, a wrong column count, a cell that is not a number,
/// a float32 value that is NaN or infinite, an int64 value that is not an integer or lies
/// outside [0, high) (other than `ignored`).
Dataset load_dataset(const DataSpec& spec, const std::vector<ColumnSpec>& columns);

/// What a CSV's header line (`header: true`) does: name the columns, which are then read by
/// name (a model file's data), or, when it names none of them, nothing: skipped, the columns
/// taken in order (a header guessed from a file's first line: tandem run --inputs).
enum class CsvHeader { names_columns, may_name_columns };
Dataset load_dataset(const DataSpec& spec, const std::vector<ColumnSpec>& columns, CsvHeader header);

/// A batch gathered from a Dataset (samples along dimension 0) laid out as the model takes
/// it: each column's dimension 0 moved to its batch_dim ([B, T] -> [T, B] for batch_dim 1).
/// Columns with batch_dim 0 are passed through without a copy.
/// Moved columns are new tensors in `memory`.
TensorMap to_model_layout(TensorMap batch, const std::vector<ColumnSpec>& columns, Allocator& memory = cpu_allocator());

/// A seeded choice of round(fraction * N) samples to validate (the last of a seeded
/// permutation); both parts keep the file's order. Returns {train, validation}.
std::pair<Dataset, Dataset> split_dataset(const Dataset& data, double validation_fraction, uint64_t seed);

/// Batches of a dataset, epoch by epoch. The order of epoch e depends only on
/// (seed, e), so a resumed run sees the batches an uninterrupted one would.
/// Worker threads gather the next batches while the caller trains on the current one.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Dataset> data, int64_t batch, bool shuffle, bool drop_last, uint64_t seed,
              int workers = 1, int prefetch = 2);
  ~BatchLoader();
  /// From now on each epoch yields only rank `rank`'s share of the samples, of `ranks`
  /// (runtime/data/shard_order.h: torch's DistributedSampler); before start_epoch().
  void shard(int rank, int ranks);
  /// From now on batches are gathered into `memory` (Model::batch_memory(): pinned memory
  /// for a model on GPUs), which must outlive the loader; before start_epoch().
  void gather_into(Allocator& memory);
  int64_t batches_per_epoch() const;
  /// Starts epoch `epoch` (any number: resuming may begin past 0), skipping its first
  /// `skip_batches` batches.
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  /// The next batch of the current epoch, or nullopt at its end.
  std::optional<TensorMap> next();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
