#include "backends/cpu/cpu_context.h"

#include <cstdlib>
#include <new>

namespace tandem {

CpuContext::CpuContext() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

void CpuContext::FreeAligned::operator()(void* p) const { std::free(p); }

void* CpuContext::scratchpad(size_t bytes) {
  if (bytes > scratchpad_bytes_) {
    constexpr size_t kAlign = 64;  // a cache line, as oneDNN's own scratchpad
    size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw std::bad_alloc();
    scratchpad_.reset(p);
    scratchpad_bytes_ = rounded;
  }
  return scratchpad_.get();
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace tandem
