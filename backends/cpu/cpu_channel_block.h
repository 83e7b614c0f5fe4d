// How many channels oneDNN's fast fp32 convolutions take together on this CPU: its blocked
// layouts group channels by the vector width of the ISA it runs (nChw16c: 16 floats of an
// AVX-512 register; nChw8c: 8 of an AVX2 or SSE4.1 one). A layout picked for another ISA
// is not wrong but slow: oneDNN 2.6 has no jit kernel for it and runs its reference
// convolution, a hundred times slower (an FCN-ResNet50 forward in nChw16c on an AVX2 EPYC:
// 104 s against torch's 0.23 s). Code that lays tensors out itself asks here.
#pragma once

#include <cstdint>

#include <oneapi/dnnl/dnnl.hpp>

namespace tandem::cpu {

/// 16 where oneDNN may use AVX-512 (its effective ISA: ONEDNN_MAX_CPU_ISA can lower it),
/// else 8. Thread-safe.
int64_t channel_block();

/// The fp32 blocked layout of a 4-d activation for channel_block(): nChw16c or nChw8c.
dnnl::memory::format_tag blocked_activation_tag();

}  // namespace tandem::cpu
