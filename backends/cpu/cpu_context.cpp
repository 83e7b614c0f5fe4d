#include "backends/cpu/cpu_context.h"

namespace tandem {

CpuContext::CpuContext() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

}  // namespace tandem
