#include "graph/sample_order.h"

#include <algorithm>
#include <vector>

#include "graph/batch_dim.h"
#include "graph/op_schema.h"

namespace tandem {
namespace {

// A name no model can write (symbols are identifiers): stands for a fixed extent while its
// order is followed.
const char* const kProbe = "<scattered>";

std::vector<int64_t> dims_mentioning(const SymShape& shape, const std::string& symbol) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::vector<std::string> names = shape[d].symbols();
    if (std::find(names.begin(), names.end(), symbol) != names.end()) dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

Dim product_before(const SymShape& shape, int64_t end) {
  Dim p(1);
  for (int64_t d = 0; d < end; ++d) p = p * shape[d];
  return p;
}

SampleOrder mixed(std::string why) { return {SampleOrder::Kind::mixed, Dim(1), std::move(why)}; }

class OrderFollower {
 public:
  OrderFollower(const Graph& g, const Block& block, int64_t scatter_dim) : g_(g), block_(block), dim_(scatter_dim) {}

  std::map<int, SampleOrder> run() {
    std::map<int, SampleOrder> orders;
    const int first = scattered_input(g_, block_);
    if (first < 0 || dim_ >= static_cast<int64_t>(g_.values[first].type.shape.size())) return orders;
    const Dim extent = g_.values[first].type.shape[dim_];
    const std::optional<std::string> symbol = extent.as_symbol();
    symbol_ = symbol ? *symbol : kProbe;
    const bool reinfer = !symbol;  // a fixed extent (or a product): follow it as a symbol
    std::map<int, TensorType> types;
    std::map<int, bool> followed;  // false: its type could not be inferred with the probe
    auto type_of = [&](int v) -> const TensorType& {
      if (!types.count(v)) {  // made outside the block: scattered when it has the extent at dim
        TensorType t = g_.values[v].type;
        const bool scattered = static_cast<int64_t>(t.shape.size()) > dim_ && t.shape[dim_] == extent;
        if (scattered && reinfer) t.shape[dim_] = Dim::symbol(symbol_);
        types[v] = t;
        followed[v] = true;
        orders[v] = scattered ? SampleOrder{SampleOrder::Kind::runs, Dim(1), ""} : SampleOrder{};
      }
      return types[v];
    };
    for (int n = block_.first_node; n < block_.end_node; ++n) {
      const Node& node = g_.nodes[n];
      std::vector<TensorType> in_types;
      bool all_followed = true;
      for (int v : node.inputs) {
        in_types.push_back(type_of(v));
        all_followed = all_followed && followed[v];
      }
      const int out = node.output;
      if (!reinfer) {
        types[out] = g_.values[out].type;
      } else if (all_followed) {
        try {
          types[out] = node.schema->infer(in_types, node.attrs);
        } catch (const std::exception&) {  // a layer that needs the fixed size: only the replicas' shapes can tell
          all_followed = false;
        }
      }
      followed[out] = all_followed;
      if (!all_followed) {
        orders[out] = SampleOrder{SampleOrder::Kind::unknown, Dim(1), ""};
        continue;
      }
      std::vector<SampleOrder> in_orders;
      for (int v : node.inputs) in_orders.push_back(orders[v]);
      orders[out] = order_after(node, in_types, in_orders, types[out]);
    }
    return orders;
  }

 private:
  // The order of `node`'s output from its inputs' orders.
  SampleOrder order_after(const Node& node, const std::vector<TensorType>& in_types,
                          const std::vector<SampleOrder>& in_orders, const TensorType& out) const {
    std::vector<size_t> carrying;  // the inputs that hold the batch
    for (size_t i = 0; i < in_orders.size(); ++i) {
      if (in_orders[i].kind == SampleOrder::Kind::mixed || in_orders[i].kind == SampleOrder::Kind::unknown)
        return in_orders[i];
      if (in_orders[i].kind == SampleOrder::Kind::runs) carrying.push_back(i);
    }
    const std::vector<int64_t> out_dims = dims_mentioning(out.shape, symbol_);
    if (carrying.empty() || out_dims.empty()) return {};
    const std::string layer = "layer '" + node.path + "' (" + node.op + ")";
    if (out_dims.size() > 1) return mixed(layer + " spreads the batch over several dimensions");
    for (size_t i : carrying)
      if (dims_mentioning(in_types[i].shape, symbol_).size() != 1)
        return mixed(layer + " reads a value with the batch in several dimensions");
    const SampleOrder& first = in_orders[carrying[0]];
    const int64_t in_dim = dims_mentioning(in_types[carrying[0]].shape, symbol_)[0];

    if (node.schema->is_view) {  // flatten, reshape: the elements keep their row-major order
      // Everything before the batch's index in that order: the dimensions before it and its
      // runs. After the reshape, the dimensions before the batch's take what they can of
      // that; what is left is the new dimension's runs. A remainder that is no whole number
      // means the batch's index was split across dimensions.
      const Dim before = product_before(in_types[carrying[0]].shape, in_dim) * first.runs;
      const std::optional<Dim> runs = before.divided_by(product_before(out.shape, out_dims[0]));
      if (!runs || !out.shape[out_dims[0]].divided_by(*runs * Dim::symbol(symbol_)))
        return mixed(layer + " splits the batch's index across dimensions (" + sym_shape_str(in_types[carrying[0]].shape) +
                     " to " + sym_shape_str(out.shape) + ")");
      if (*runs == first.runs) return first;
      return {SampleOrder::Kind::runs, *runs,
              layer + " reshapes " + sym_shape_str(in_types[carrying[0]].shape) + " to " + sym_shape_str(out.shape) +
                  ", which puts the batch's samples in " + runs->str() + " runs along its dimension " +
                  std::to_string(out_dims[0])};
    }
    for (size_t i : carrying)
      if (!(in_orders[i].runs == first.runs))
        return mixed(layer + " combines values whose samples lie in different orders");
    if (node.op == "cat") {
      const int64_t cat_dim = normalize_dim(node.attrs.get_int("dim"), static_cast<int64_t>(out.shape.size()), "dim");
      if (cat_dim == in_dim) {  // along the batch's own dimension: one run per input
        if (carrying.size() != in_types.size())
          return mixed(layer + " concatenates the batch's samples with rows that are none of them");
        for (size_t i : carrying)
          if (!(in_types[i].shape[cat_dim] == in_types[carrying[0]].shape[cat_dim]))
            return mixed(layer + " concatenates values that hold the batch's samples in runs of different lengths");
        Dim runs(0);
        for (size_t i : carrying) runs = runs + in_orders[i].runs;
        return {SampleOrder::Kind::runs, runs,
                layer + " concatenates " + std::to_string(in_types.size()) + " values along dim " +
                    std::to_string(cat_dim) + ", the batch's, which puts the batch's samples in " + runs.str() +
                    " runs one after another"};
      }
    }
    return first;
  }

  const Graph& g_;
  const Block& block_;
  const int64_t dim_;
  std::string symbol_;
};

}  // namespace

std::map<int, SampleOrder> sample_orders(const Graph& graph, const Block& block, int64_t scatter_dim) {
  return OrderFollower(graph, block, scatter_dim).run();
}

std::string sample_order_problem(const Graph& graph, const std::map<int, SampleOrder>& orders, int value) {
  const auto it = orders.find(value);
  if (it == orders.end()) return "";
  const SampleOrder& order = it->second;
  switch (order.kind) {
    case SampleOrder::Kind::none:
    case SampleOrder::Kind::unknown:
      return "";
    case SampleOrder::Kind::runs:
      // a known number of runs is gathered run by run (placement/replicate.cpp)
      if (order.runs.is_constant()) return "";
      return order.why + ": each replica's output holds its own runs, so concatenating the replicas' outputs "
             "would put all of replica 0's runs before replica 1's, not the rows the block computes unwrapped; "
             "concatenate along another dimension, or after the block";
    case SampleOrder::Kind::mixed:
      return order.why + ", so no dimension of '" + graph.values[value].name +
             "' holds each replica's samples whole, and concatenating the replicas' outputs would not give what the "
             "block computes unwrapped; keep the batch in a dimension of its own, outermost in it";
  }
  return "";
}

}  // namespace tandem
