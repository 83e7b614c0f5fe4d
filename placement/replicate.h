// Data parallelism as a graph rewrite, for one set of symbol values: each data_parallel
// block becomes PyTorch's nn.DataParallel, spelled out in ordinary layers that placement,
// partition and the executors already understand.
//
//   scatter   for each scattered input and each chunk k, a `narrow` along `dim` (the k-th
//             chunk as torch.chunk makes it, or as chunk_sizes says) on the device where
//             the input is; the partition then copies each chunk to its replica's device.
//   replicas  the block's layers once per chunk, chunk k on devices[k], reading its chunks
//             and the broadcast inputs whole (each crosses to a device once). Every replica
//             names the same parameters, so there is one master copy: each device holds a
//             copy of it (uploaded again only when it changed), each replica accumulates its
//             gradient on its device, and the runtime sums them into the master gradient,
//             which one optimizer step updates.
//   gather    for each block output, a `cat` along `dim` of the replicas' outputs on
//             output_device, which produces the block's original output value: every
//             reader outside the block is unchanged.
//
// Parallel loss (loss: {..., parallel: true}), in training graphs: the block's output that
// the loss scores is not gathered (unless a layer reads it); Graph::parallel_loss lists
// each replica's chunk of it and the rows of the target that chunk scores, and the runtime
// computes the loss on every replica's device, sending only scalars: the output device
// holds no more than the others.
//
// chunking: memory sizes the chunks in proportion to each device's memory (its capacity in
// the inventory: a 40 GiB device takes twice the rows of a 20 GiB one).
//
// Which inputs are scattered: every block input whose size along `dim` is that of the
// first block input (the batch); the others (a table, a mask of fixed size) are broadcast.
// A batch smaller than the device count makes fewer chunks, as torch.chunk does, and so
// uses fewer replicas. Inside a replica, a symbol that is exactly the scattered extent
// (`batch`) means the chunk's size, as x.size(0) does inside a replicated torch module.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/symbolic.h"

namespace tandem {

/// The sizes of the chunks `extent` splits into over `devices` devices: torch.chunk's
/// (ceil(extent / devices) each, the last one smaller, fewer chunks when extent is small),
/// or `requested` when given (UserError unless they are positive, at most one per device,
/// and add up to extent; `block` names the block in the message).
std::vector<int64_t> data_parallel_chunks(int64_t extent, int devices, const std::vector<int64_t>& requested,
                                          const std::string& block);

/// Chunks of `extent` in proportion to `memory` (one entry per device, bytes): each at
/// least 1 while there are rows enough, the remainders going to the largest fractions.
std::vector<int64_t> chunks_by_memory(int64_t extent, const std::vector<size_t>& memory);

/// `graph` with every data_parallel block replicated under `bindings` (every symbol of the
/// graph bound); null when it has no data_parallel block. Value ids of the original graph
/// keep their meaning (inputs, outputs, targets, the loss); node indices do not. With
/// `training`, a parallel loss is split over the replicas. `memory_of` gives a device's
/// memory for chunking: memory.
std::shared_ptr<const Graph> replicate_data_parallel(const Graph& graph, const Bindings& bindings, bool training,
                                                     const std::function<size_t(Device)>& memory_of = {});

}  // namespace tandem
