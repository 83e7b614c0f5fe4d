// What the cpu runs a layer's matrix work in when its precision (graph/precision.h) asks
// for less than fp32. bf16 needs avx512_bf16 (oneDNN's avx512_core_bf16 ISA, or above):
// without it oneDNN would emulate bf16 more slowly than fp32 runs, so the cpu runs fp32
// instead. fp16 matrix work has no fast path on this CPU's ISA, so it runs fp32 too. Each
// fallback is told once per process, on stderr, as a note.
#pragma once

#include <cstdint>
#include <string_view>

#include "backends/kernel.h"
#include "graph/precision.h"

namespace tandem::cpu {

/// Whether oneDNN may use avx512_bf16 here (its effective ISA: ONEDNN_MAX_CPU_ISA can
/// lower it, which is how the fallback is tested on a CPU that has it). Thread-safe.
bool cpu_has_bf16();

/// The precision the cpu's kernels run `requested` in: bf16 where cpu_has_bf16(), fp32
/// otherwise (with the note). Thread-safe.
Precision cpu_precision(Precision requested);

/// Whether the cpu has a bf16 kernel for `op` (linear, matmul, conv2d,
/// multi_head_attention); gru and lstm run fp32 on the cpu, as torch 1.13's cpu autocast
/// runs them (their outputs stay float32 under it).
bool cpu_has_bf16_kernel(std::string_view op);
/// Whether a linear or matmul of `multiply_adds` (inner size `k`) runs as the plain fp32
/// loop rather than through oneDNN: up to 2048 multiply-adds the loop is faster (measured
/// on Zen 4, 2 threads: a 10->20 linear at batch 1 takes 0.1 us as a loop, 0.29 us through
/// oneDNN; 64->64 0.39 us as a loop, 0.33 us through oneDNN), and bf16 would gain nothing.
bool runs_as_fp32_loop(int64_t multiply_adds, int64_t k);

/// The precision the cpu's kernel for `spec` runs its matrix work in, and why when it is
/// not spec.precision: the one rule the kernel factories follow and `tandem plan` shows.
/// fp32 for an op without matrix work, for fp16 (no fast path here), without avx512_bf16,
/// for gru and lstm (no bf16 kernel), and for a linear or matmul small enough for the
/// plain loop. Pure and thread-safe (the notes are make_kernel's).
PrecisionChoice kernel_precision(const KernelSpec& spec);

/// Tells once per op, on stderr, that a layer of `op` asked for `requested` and runs fp32.
void note_runs_fp32(std::string_view op, Precision requested);

}  // namespace tandem::cpu
