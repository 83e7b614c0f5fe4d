#include "backends/cpu/cpu_precision.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/linear_plan.h"
#include "backends/matmul_plan.h"

namespace tandem::cpu {
namespace {

/// Prints `message` as a note the first time `told` is set.
void note_once(std::atomic<bool>& told, const char* message) {
  if (!told.exchange(true)) std::fprintf(stderr, "tandem: note: %s\n", message);
}

}  // namespace

bool cpu_has_bf16() {
  // oneDNN's ISA values are nested bit sets: every bit of avx512_core_bf16 set means it or
  // a superset of it (AMX).
  static const bool has = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return has;
}

Precision cpu_precision(Precision requested) {
  static std::atomic<bool> told_bf16{false}, told_fp16{false};
  switch (requested) {
    case Precision::bf16:
      if (cpu_has_bf16()) return Precision::bf16;
      note_once(told_bf16, "this CPU lacks avx512_bf16 (as oneDNN sees it): bf16 layers run in fp32 on the cpu");
      return Precision::fp32;
    case Precision::fp16:
      note_once(told_fp16, "the cpu has no fast fp16 matrix work: fp16 layers run in fp32 on the cpu (bf16 runs "
                           "in half precision here where the CPU has avx512_bf16)");
      return Precision::fp32;
    default: return Precision::fp32;
  }
}

}  // namespace tandem::cpu

namespace tandem::cpu {

bool runs_as_fp32_loop(int64_t multiply_adds, int64_t k) {
  constexpr int64_t kLoopMaxMultiplyAdds = 2048;
  return multiply_adds <= kLoopMaxMultiplyAdds || k == 0;
}

PrecisionChoice kernel_precision(const KernelSpec& spec) {
  const Precision asked = spec.precision;
  if (asked == Precision::fp32 || !op_runs_in_reduced_precision(spec.op)) return {Precision::fp32, {}};
  if (asked == Precision::fp16) return {Precision::fp32, "the cpu has no fast fp16 matrix work"};
  if (!cpu_has_bf16()) return {Precision::fp32, "this CPU lacks avx512_bf16"};
  if (!cpu_has_bf16_kernel(spec.op))
    return {Precision::fp32, "the cpu has no bf16 " + spec.op + " kernel (as torch 1.13's cpu autocast)"};
  if (spec.op == "linear") {
    const LinearPlan p = plan_linear(spec);
    if (runs_as_fp32_loop(p.m * p.n * p.k, p.k))
      return {Precision::fp32, std::to_string(p.m * p.n * p.k) + " multiply-adds: small enough for the fp32 loop"};
  } else if (spec.op == "matmul") {
    const MatmulPlan p = plan_matmul(spec.inputs.at(0).shape, spec.inputs.at(1).shape);
    const int64_t multiply_adds = p.batches * p.m * p.n * p.k;
    if (runs_as_fp32_loop(multiply_adds, p.k))
      return {Precision::fp32, std::to_string(multiply_adds) + " multiply-adds: small enough for the fp32 loop"};
  }
  return {asked, {}};
}

bool cpu_has_bf16_kernel(std::string_view op) {
  return op == "linear" || op == "matmul" || op == "conv2d" || op == "conv1d" || op == "multi_head_attention";
}

void note_runs_fp32(std::string_view op, Precision requested) {
  static std::mutex mutex;
  static std::set<std::string> told;
  std::lock_guard lock(mutex);
  if (!told.insert(std::string(op)).second) return;
  std::fprintf(stderr,
               "tandem: note: the cpu has no %s kernel for %.*s: those layers run in fp32 (as torch 1.13's cpu "
               "autocast runs gru and lstm)\n",
               std::string(precision_name(requested)).c_str(), static_cast<int>(op.size()), op.data());
}

}  // namespace tandem::cpu
