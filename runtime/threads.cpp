#include "runtime/threads.h"

#include <omp.h>
#include <sched.h>

#include <cstdlib>

#include "backends/host_lanes.h"
#include "core/error.h"

namespace tandem {
namespace {

// Who chose the thread count, for `tandem devices`.
std::string chosen_by;

}  // namespace

void set_threads(int threads, const std::string& by) {
  if (threads < 1 || threads > 1024)
    throw UserError(by + ": " + std::to_string(threads) + " is out of range: ask for 1 to 1024 (this process may run on " +
                    std::to_string(usable_cores()) + " cores)");
  omp_set_num_threads(threads);
  HostLaneEngine::set_threads(threads);  // the lanes' threads, which do not inherit it
  chosen_by = by;
}

int compute_threads() { return omp_get_max_threads(); }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return omp_get_num_procs();
  return CPU_COUNT(&set);
}

std::string compute_threads_reason() {
  if (!chosen_by.empty()) return chosen_by;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) return "OMP_NUM_THREADS";
  return compute_threads() == usable_cores() ? "the cores this process may run on" : "OpenMP's default";
}

std::string thread_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  if (policy && *policy) return "OMP_WAIT_POLICY=" + std::string(policy);
  if (spins && *spins) return "spin " + std::string(spins) + " rounds, then sleep (GOMP_SPINCOUNT=" + spins + ")";
  return "OpenMP's default (spin 300000 rounds, then sleep)";
}

}  // namespace tandem
