// The size classes of the CUDA caching allocators (device memory and pinned host
// staging): a request is rounded up to at least 512 bytes, and above that to one of four
// steps per power of two (1.25, 1.5, 1.75 and 2 times 2^k). So a block wastes under a
// quarter of its size, and requests of nearby sizes (the last, shorter batch of an epoch,
// a sequence a few tokens longer) share a class and reuse each other's blocks.
#pragma once

#include <bit>
#include <cstddef>

namespace tandem::cuda {

inline constexpr size_t kMinBlockBytes = 512;

/// The bytes of the block that serves a request of `bytes`; 0 when that overflows.
constexpr size_t size_class(size_t bytes) {
  if (bytes <= kMinBlockBytes) return kMinBlockBytes;
  const int shift = static_cast<int>(std::bit_width(bytes - 1)) - 3;  // keep the top three bits
  const size_t step = size_t{1} << shift;
  const size_t rounded = (bytes + step - 1) / step * step;
  return rounded < bytes ? 0 : rounded;
}

static_assert(size_class(1) == 512 && size_class(512) == 512 && size_class(513) == 640);
static_assert(size_class(1024) == 1024 && size_class(1025) == 1280 && size_class(1537) == 1792);

}  // namespace tandem::cuda
