// The CPU backend's shared state: the oneDNN engine and stream, and the cache of
// primitives keyed by (op, shapes, attributes), so that compiling the same layer shape
// twice (two identical layers, or a batch size seen before) builds no new primitive.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

namespace tandem {

/// Thread-safety: the cache is guarded by a mutex; the stream is for one thread at a time.
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

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;
  std::unordered_map<std::string, dnnl::primitive> primitives_;
  int64_t primitives_created_ = 0;
};

}  // namespace tandem
