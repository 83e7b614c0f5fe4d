// The precision a device runs one layer's matrix work in, as `tandem plan` shows it: the
// layer's (graph/precision.h), or fp32 where the device keeps it (a linear small enough
// for the cpu's plain loop, a CPU without avx512_bf16), with the reason.
#pragma once

#include <string>

#include "graph/precision.h"

namespace tandem {

struct PrecisionChoice {
  Precision precision = Precision::fp32;
  std::string why;  // empty when it is the layer's own
};

}  // namespace tandem
