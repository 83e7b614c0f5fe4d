// Small helpers shared by the CPU kernels (with backends/op_args.h): the
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
#include "backends/op_args.h"
#include "core/error.h"

namespace tandem::cpu {

/// Units of cheap work (about one multiply-add or element copy each) below which a loop
/// stays on one thread: waking the OpenMP team costs 1-4 us on 2 cores (measured),
/// as much as ~10^5 vectorised operations.
inline constexpr int64_t kParallelThreshold = 1 << 16;

/// Multiply-adds below which a oneDNN primitive is built for one thread: for small
/// matrix products the team's wake-up costs more than the second thread saves.
inline constexpr int64_t kSingleThreadMaxFlops = 1 << 17;

/// "op:[2, 3]x[3]->[2]|attrs": a primitive-cache key from the whole spec.
std::string spec_key(const KernelSpec& spec);

/// Whether oneDNN chose its reference implementation ("ref:any", "ref_int8:any", ...) for
/// `pd`: correct but far slower than a jit kernel, so a caller tries another layout.
bool is_reference_kernel(const dnnl::primitive_desc_base& pd);

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

/// UserError naming `op`, the position and the value of the first of `n` indices outside
/// [0, bound): checked on one thread before any kernel reads with them.
void check_indices(const int64_t* idx, int64_t n, int64_t bound, const char* op);

}  // namespace tandem::cpu
