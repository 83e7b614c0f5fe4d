// Graph: the model as declared, after loading and validation. Layers are flattened to a
// list of leaf nodes in declaration order (which is a topological order: a layer may
// only read earlier tensors); blocks are kept as ranges over that list for placement
// and data parallelism. Knows nothing of memory or kernels.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/attributes.h"
#include "graph/op_schema.h"
#include "graph/precision.h"
#include "graph/training_spec.h"

namespace tandem {

/// Where something was written: 1-based line and column.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(column); }
};

/// A tensor of the graph: a graph input or one layer's output.
struct Value {
  std::string name;     // input name or producing layer's path
  TensorType type;
  int producer = -1;    // node index; -1 for a graph input
};

struct DataParallelSpec {
  /// The GPUs that hold a replica each; empty with all_devices until place() fills them in.
  std::vector<Device> devices;
  /// `devices: all`: every GPU of the inventory place() is given (the machine's, or
  /// --sim-gpus'), as nn.DataParallel(model) takes every visible GPU.
  bool all_devices = false;
  Device output_device;
  int64_t dim = 0;
  std::vector<int64_t> chunk_sizes;  // empty: torch.chunk's sizes (or by memory)
  bool chunk_by_memory = false;      // chunking: memory: in proportion to each device's memory
};

/// What a node made by replicating a data_parallel block is (placement/replicate.h).
struct ReplicaRole {
  enum class Kind { scatter, replica, gather } kind = Kind::replica;
  int block = -1;    // the data_parallel block
  int replica = 0;   // scatter and replica: which chunk; gather: 0
  int replicas = 1;  // how many chunks this batch makes
};

/// A leaf layer.
struct Node {
  std::string path;  // "encoder.0.fc"
  std::string op;
  const OpSchema* schema = nullptr;
  Attributes attrs;
  std::vector<int> inputs;  // value ids
  int output = -1;          // value id
  std::vector<ParamSpec> params;  // names are full: "encoder.0.fc.weight"
  std::optional<Device> device;   // as declared or inherited
  /// `precision:` as declared on the layer or inherited from a block; none: the model's.
  std::optional<Precision> precision;
  int block = -1;                 // innermost enclosing block, -1 at top level
  SourceLocation location;
  std::optional<ReplicaRole> replica;  // set only in a replicated graph
};

/// A block (`layers:`, `module:` or `repeat:`): nodes [first_node, end_node).
struct Block {
  std::string path;
  int parent = -1;
  int first_node = 0;
  int end_node = 0;
  std::optional<Device> device;
  std::optional<DataParallelSpec> data_parallel;
  SourceLocation location;
};

/// The top-level `placement:` key: a policy name and, for balanced, a per-GPU budget.
/// Kept as written; placement/ interprets it (docs/placement.md).
struct PlacementSpec {
  std::string policy;                      // "annotations", "embeddings-on-cpu" or "balanced"
  std::optional<std::string> max_memory;   // as written: "8GiB", "512MiB", "4096"
  SourceLocation location;                 // of max_memory when given, else of the key
};

struct GraphInput {
  std::string name;
  int value = -1;
  std::optional<int64_t> high;  // exclusive bound for random int64 values
  SourceLocation location;
};

struct GraphOutput {
  std::string name;
  int value = -1;
};

/// A parallel loss in a replicated training graph (placement/replicate.h): the loss's input
/// is never gathered; replica k's output scores rows [start, start + length) of the target
/// along `dim`.
struct ParallelLoss {
  struct Part {
    int value = -1;  // replica k's chunk of the loss's input
    int64_t start = 0;
    int64_t length = 0;
  };
  int64_t dim = 0;
  std::vector<Part> parts;
};

struct Graph {
  std::string name;
  std::string file;
  std::vector<GraphInput> inputs;
  std::vector<Node> nodes;
  std::vector<Value> values;
  std::vector<Block> blocks;
  std::vector<GraphOutput> outputs;
  std::vector<GraphInput> targets;     // fed by the data, read only by the loss
  std::optional<LossSpec> loss;
  std::optional<ParallelLoss> parallel_loss;  // replicated training graphs with loss parallel: true
  std::optional<TrainingSpec> training;  // the `train:` section, when present
  std::optional<PlacementSpec> placement;  // the `placement:` key, when present
  /// The model's precision: its top-level `precision:` key, or `--precision`, which
  /// replaces it. Layers and blocks that declare their own keep theirs.
  Precision precision = Precision::fp32;

  /// Trainable parameters only (buffers are not counted, as in torch).
  int64_t parameter_count() const;
  /// All parameters and buffers in node order.
  std::vector<ParamSpec> parameters() const;
  /// The symbols graph inputs use, in order of appearance.
  std::vector<std::string> symbols() const;
};

/// The precision `node`'s matrix work runs in: its own or its block's, else the model's;
/// always fp32 for an op that is not matrix work (graph/precision.h).
inline Precision layer_precision(const Graph& graph, const Node& node) {
  if (!op_runs_in_reduced_precision(node.op)) return Precision::fp32;
  return node.precision.value_or(graph.precision);
}

}  // namespace tandem
