// Small helpers shared by the CPU kernels: dim normalisation, shape products, the
// size threshold above which our own loops go parallel, and a oneDNN call whose
// argument list is built once so that forward() allocates nothing of ours.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/cpu_context.h"
#include "backends/kernel.h"
#include "core/error.h"

namespace tandem::cpu {

/// Units of cheap work (about one multiply-add or element copy each) below which a loop
/// stays on one thread: waking the OpenMP team costs 1-4 us on 2 cores (measured),
/// as much as ~10^5 vectorised operations.
inline constexpr int64_t kParallelThreshold = 1 << 16;

/// Multiply-adds below which a oneDNN primitive is built for one thread: for small
/// matrix products the team's wake-up costs more than the second thread saves.
inline constexpr int64_t kSingleThreadMaxFlops = 1 << 17;

/// `dim` in [-rank, rank) made non-negative; a rank-0 tensor accepts 0 and -1.
/// Throws UserError naming `op` when out of range.
inline int64_t normalize_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw UserError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range [" +
                    std::to_string(-r) + ", " + std::to_string(r - 1) + "] for a tensor of rank " +
                    std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

/// An embedding's padding_idx as a row number, or -1 when null; negative values count
/// from the end, as in torch. Throws UserError when out of range.
inline int64_t read_padding_idx(const Attributes& attrs, int64_t num_embeddings) {
  if (!attrs.has("padding_idx") || attrs.is_null("padding_idx")) return -1;
  int64_t p = attrs.get_int("padding_idx");
  if (p < -num_embeddings || p >= num_embeddings)
    throw UserError("padding_idx " + std::to_string(p) + " is out of range [" + std::to_string(-num_embeddings) +
                    ", " + std::to_string(num_embeddings) + ")");
  return p < 0 ? p + num_embeddings : p;
}

/// Product of shape[begin, end).
inline int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) n *= shape[i];
  return n;
}

/// "op:[2, 3]x[3]->[2]|attrs": a primitive-cache key from the whole spec.
std::string spec_key(const KernelSpec& spec);

/// Runs body(begin, end) over [0, n): on this thread when `n * cost_per_item` is small,
/// else split statically over the OpenMP threads. `body` must not throw.
template <class Body>
inline void parallel_for(int64_t n, int64_t cost_per_item, Body&& body) {
  if (n <= 0) return;
  if (n < 2 || n * cost_per_item < kParallelThreshold || omp_in_parallel()) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

/// While alive, OpenMP regions opened by this thread use at most `threads` threads.
/// oneDNN fixes a primitive's thread count when the primitive is created, so building
/// one inside this scope makes it single-threaded for good (and oneDNN's own cache
/// keys on the thread count, so it does not mix the two).
class ScopedMaxThreads {
 public:
  explicit ScopedMaxThreads(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ScopedMaxThreads() { omp_set_num_threads(saved_); }
  ScopedMaxThreads(const ScopedMaxThreads&) = delete;
  ScopedMaxThreads& operator=(const ScopedMaxThreads&) = delete;

 private:
  int saved_;
};

/// One oneDNN primitive with its memory objects, bound once; run() only swaps data
/// pointers and calls the C API, so it builds no argument map of ours per call. The
/// primitive must have been built with user_scratchpad_attr() (cpu_context.h): run() hands
/// it the context's scratchpad.
class DnnlCall {
 public:
  DnnlCall() = default;
  explicit DnnlCall(dnnl::primitive prim);
  /// Binds `arg` (DNNL_ARG_*) to a memory of `md`; returns its slot for set().
  size_t bind(int arg, const dnnl::memory::desc& md, dnnl::engine& engine, void* handle = DNNL_MEMORY_NONE);
  /// Binds `arg` to an existing (for example, owning) memory object.
  size_t bind(int arg, dnnl::memory mem);
  void set(size_t slot, const void* data) { mems_[slot].set_data_handle(const_cast<void*>(data)); }
  void run(CpuContext& ctx);
  bool valid() const { return static_cast<bool>(prim_); }

 private:
  static constexpr size_t kNoSlot = ~size_t{0};
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;  // {DNNL_ARG_*, mems_[i].get()}, built by bind()
  dnnl::memory::desc scratchpad_md_;   // what the primitive asks for (empty: nothing)
  size_t scratchpad_slot_ = kNoSlot;   // bound on the first run
};

/// into += from, elementwise over float32 tensors of one size (`into`'s storage is written:
/// gradients accumulated), over the calling thread's OpenMP team.
void add_into(const Tensor& into, const Tensor& from);

}  // namespace tandem::cpu
