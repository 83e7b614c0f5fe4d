#include "runtime/micro_batches.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/error.h"
#include "graph/batch_dim.h"

namespace tandem {
namespace {

/// Samples [lo, hi) of `t` along `dim`: a view along dimension 0, else a copy.
Tensor samples(const Tensor& t, int dim, int64_t lo, int64_t hi) {
  Shape shape = t.shape();
  shape[static_cast<size_t>(dim)] = hi - lo;
  size_t inner = dtype_size(t.dtype());
  for (size_t d = static_cast<size_t>(dim) + 1; d < t.shape().size(); ++d) inner *= static_cast<size_t>(t.shape()[d]);
  if (dim == 0) {
    const auto offset = static_cast<size_t>(static_cast<char*>(t.raw_data()) - static_cast<char*>(t.storage()->data()));
    return Tensor::from_storage(t.storage(), shape, t.dtype(), offset + static_cast<size_t>(lo) * inner);
  }
  int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= t.shape()[static_cast<size_t>(d)];
  Tensor out = Tensor::empty(shape, t.dtype());
  const char* from = static_cast<const char*>(t.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  const int64_t all = t.shape()[static_cast<size_t>(dim)];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(to + o * (hi - lo) * inner, from + (o * all + lo) * inner, (hi - lo) * inner);
  return out;
}

/// How many terms the loss averages over in `target`: the targets not ignored of a
/// classification loss, else its elements (torch's mean reductions).
double loss_terms(const LossSpec& loss, const Tensor& target) {
  if ((loss.op == "cross_entropy" || loss.op == "nll_loss") && target.dtype() == DType::int64) {
    int64_t counted = 0;
    for (int64_t t : target.span<int64_t>()) counted += t != loss.ignore_index;
    return static_cast<double>(counted);
  }
  return static_cast<double>(target.numel());
}

/// Flat ids with offsets: an embedding_bag's two inputs, both fed by the batch. A
/// micro-batch takes its bags' ids, and their offsets rebased to them.
struct FlatBags {
  const GraphInput* ids = nullptr;
  const GraphInput* offsets = nullptr;
  bool include_last_offset = false;  // offsets has one entry more than bags: the ids' end
};

std::vector<FlatBags> flat_bags(const Graph& graph) {
  auto input_of = [&](int value) -> const GraphInput* {
    for (const GraphInput& in : graph.inputs)
      if (in.value == value) return &in;
    return nullptr;
  };
  std::vector<FlatBags> out;
  for (const Node& node : graph.nodes)
    if (node.op == "embedding_bag" && node.inputs.size() == 2)
      if (const GraphInput *ids = input_of(node.inputs[0]), *offsets = input_of(node.inputs[1]); ids && offsets)
        out.push_back({ids, offsets, node.attrs.get_bool("include_last_offset")});
  return out;
}

bool is_flat_bag_input(const std::vector<FlatBags>& bags, const GraphInput& decl) {
  return std::any_of(bags.begin(), bags.end(), [&](const FlatBags& b) { return b.ids == &decl || b.offsets == &decl; });
}

/// Bags [lo, hi) of `bags` out of `batch` (`size` bags): their ids (a view) and offsets
/// (rebased to start at 0) into `part`.
void take_bags(const FlatBags& bags, const TensorMap& batch, int64_t size, int64_t lo, int64_t hi, TensorMap& part) {
  const Tensor& ids = batch.at(bags.ids->name);
  const Tensor& offsets = batch.at(bags.offsets->name);
  const int64_t entries = size + (bags.include_last_offset ? 1 : 0);
  if (offsets.dim() != 1 || offsets.size(0) != entries || offsets.dtype() != DType::int64 || ids.dim() != 1)
    throw UserError("'" + bags.offsets->name + "' must hold " + std::to_string(entries) + " int64 offsets into '" +
                    bags.ids->name + "', one per bag of the batch, to cut the batch into micro-batches; got " +
                    shape_str(offsets.shape()));
  const auto off = offsets.span<int64_t>();
  const int64_t start = off[static_cast<size_t>(lo)];
  const int64_t end = hi < entries ? off[static_cast<size_t>(hi)] : ids.size(0);
  if (start < 0 || start > end || end > ids.size(0))
    throw UserError("the offsets in '" + bags.offsets->name + "' must rise from 0 to at most the " +
                    std::to_string(ids.size(0)) + " ids of '" + bags.ids->name + "'; bag " + std::to_string(lo) +
                    " starts at " + std::to_string(start) + " and bag " + std::to_string(hi) + " at " + std::to_string(end));
  part.emplace(bags.ids->name, samples(ids, 0, start, end));
  const int64_t count = hi - lo + (bags.include_last_offset ? 1 : 0);
  Tensor rebased = Tensor::empty({count}, DType::int64);
  auto r = rebased.span<int64_t>();
  for (int64_t i = 0; i < count; ++i) r[static_cast<size_t>(i)] = off[static_cast<size_t>(lo + i)] - start;
  part.emplace(bags.offsets->name, std::move(rebased));
}

/// `batch` cut at sample bounds: part j takes samples [ends[j-1], ends[j]) (from 0) of every
/// input and target it holds along its batch dimension, flat bags by bag.
std::vector<TensorMap> cut(const TensorMap& batch, const Graph& graph, const std::function<std::vector<int64_t>(int64_t)>& ends_for) {
  // Each input and target, and its batch dimension (graph/batch_dim.h): 0 when it has no
  // symbolic dimension or several, as data_columns would refuse to feed it from data anyway.
  // Flat ids with offsets are cut by bag (take_bags). Targets only where the batch has them
  // (inference cuts inputs alone).
  const std::vector<FlatBags> bags = flat_bags(graph);
  std::vector<std::pair<const GraphInput*, int>> columns;
  for (const std::vector<GraphInput>* decls : {&graph.inputs, &graph.targets})
    for (const GraphInput& decl : *decls)
      if (!is_flat_bag_input(bags, decl) && (decls == &graph.inputs || batch.count(decl.name)))
        columns.emplace_back(&decl, batch_dim_of(graph.values[decl.value].type.shape).value_or(0));
  TANDEM_ASSERT(!columns.empty(), "a batch with no input or target to count its samples by");
  const auto& [first, first_dim] = columns.front();
  const int64_t size = batch.at(first->name).size(first_dim);
  for (const auto& [decl, dim] : columns) {
    const Tensor& t = batch.at(decl->name);
    if (t.size(dim) != size)
      throw UserError("'" + decl->name + "' has " + std::to_string(t.size(dim)) + " samples along its batch dimension, '" +
                      first->name + "' " + std::to_string(size) + ": a batch's inputs and targets must agree");
  }
  std::vector<TensorMap> out;
  int64_t lo = 0;
  for (int64_t hi : ends_for(size)) {
    TensorMap& part = out.emplace_back();
    for (const auto& [decl, dim] : columns) part.emplace(decl->name, samples(batch.at(decl->name), dim, lo, hi));
    for (const FlatBags& b : bags) take_bags(b, batch, size, lo, hi, part);
    lo = hi;
  }
  return out;
}

}  // namespace

std::vector<MicroBatch> split_micro_batches(const TensorMap& batch, int64_t parts, const Graph& graph) {
  TANDEM_ASSERT(parts >= 1, "split_micro_batches: at least one part");
  std::vector<MicroBatch> out;
  for (TensorMap& part : cut(batch, graph, [&parts](int64_t size) {
         parts = std::min(parts, size);  // an epoch's last batch may hold fewer samples than parts
         std::vector<int64_t> ends;
         for (int64_t j = 0, hi = 0; j < parts; ++j) ends.push_back(hi += size / parts + (j < size % parts ? 1 : 0));
         return ends;
       }))
    out.push_back({std::move(part), 1});
  // A mean loss weighs each part by its share of the batch's terms; a sum adds them.
  if (graph.loss && graph.loss->reduction == "mean") {
    const std::string& target = graph.values[graph.loss->target].name;
    double total = 0;
    for (MicroBatch& m : out) total += (m.weight = loss_terms(*graph.loss, m.batch.at(target)));
    for (MicroBatch& m : out) m.weight = total > 0 ? m.weight / total : 1.0 / static_cast<double>(parts);
  }
  return out;
}

std::vector<TensorMap> split_batches(const TensorMap& batch, int64_t batch_size, const Graph& graph) {
  TANDEM_ASSERT(batch_size >= 1, "split_batches: at least one sample a batch");
  return cut(batch, graph, [batch_size](int64_t size) {
    std::vector<int64_t> ends;
    for (int64_t hi = std::min(batch_size, size); ends.empty() || ends.back() < size; hi = std::min(hi + batch_size, size))
      ends.push_back(hi);
    return ends;
  });
}

Tensor join_batches(const std::vector<Tensor>& parts, int dim) {
  TANDEM_ASSERT(!parts.empty(), "join_batches: no batch to join");
  if (parts.size() == 1) return parts.front();
  Shape shape = parts.front().shape();
  shape[static_cast<size_t>(dim)] = 0;
  for (const Tensor& p : parts) shape[static_cast<size_t>(dim)] += p.size(dim);
  Tensor out = Tensor::empty(shape, parts.front().dtype());
  // each part's samples are one run of bytes in every slice outside `dim`
  int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[static_cast<size_t>(d)];
  const size_t slices = static_cast<size_t>(std::max<int64_t>(outer, 1));
  const size_t out_slice = out.nbytes() / slices;
  size_t at = 0;
  for (const Tensor& p : parts) {
    const size_t run = p.nbytes() / slices;
    for (size_t o = 0; o < slices; ++o)
      std::memcpy(static_cast<char*>(out.raw_data()) + o * out_slice + at, static_cast<const char*>(p.raw_data()) + o * run, run);
    at += run;
  }
  return out;
}

}  // namespace tandem
