#include "backends/kernel.h"

namespace tandem {

void Kernel::backward(const BackwardArgs&) {
  TANDEM_ASSERT(false, "this kernel has no backward");
}

void Kernel::look_up_again(const KernelArgs&, std::span<const int64_t>) {
  TANDEM_ASSERT(false, "this kernel does not look up rows again");
}

}  // namespace tandem
