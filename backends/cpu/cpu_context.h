// The CPU backend's shared state: the oneDNN engine and stream, the cache of primitives
// keyed by (op, shapes, attributes), so that compiling the same layer shape twice (two
// identical layers, or a batch size seen before) builds no new primitive, and the
// scratchpad its primitives share.
//
// Why a scratchpad of our own: by default oneDNN gives every primitive built on a thread
// that thread's one scratchpad, so two primitives built on one thread must never run at
// once. Simulated GPUs run several devices' kernels side by side (backends/host_lanes.h),
// each device with its own context; so every primitive is built with a user scratchpad
// (user_scratchpad_attr) and runs on its context's, which one device's queue uses at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

namespace tandem {

/// Thread-safety: the cache is guarded by a mutex; the stream and the scratchpad are for
/// one thread at a time.
class CpuContext {
 public:
  CpuContext();
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

  /// The primitive stored under `key`, built by `make()` on first use.
  /// `make` returns a dnnl::primitive (any primitive kind).
  template <class Make>
  dnnl::primitive cached_primitive(const std::string& key, Make&& make) {
    std::lock_guard lock(mutex_);
    auto it = primitives_.find(key);
    if (it != primitives_.end()) return it->second;
    ++primitives_created_;
    return primitives_.emplace(key, make()).first->second;
  }
  /// How many primitives were built: a repeated forward must not raise it.
  int64_t primitives_created() const { return primitives_created_; }

  /// At least `bytes` of scratch memory for one primitive execution; valid until the next
  /// call (it grows, never shrinks).
  void* scratchpad(size_t bytes);

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;
  std::unordered_map<std::string, dnnl::primitive> primitives_;
  int64_t primitives_created_ = 0;
  struct FreeAligned {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeAligned> scratchpad_;
  size_t scratchpad_bytes_ = 0;
};

/// Attributes that every primitive is built with: a user scratchpad (see above).
dnnl::primitive_attr user_scratchpad_attr();

}  // namespace tandem
