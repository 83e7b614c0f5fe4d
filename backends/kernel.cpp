#include "backends/kernel.h"

namespace tandem {

void Kernel::backward(const BackwardArgs&) {
  TANDEM_ASSERT(false, "this kernel has no backward");
}

}  // namespace tandem
