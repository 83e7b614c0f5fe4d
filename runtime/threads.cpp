#include "runtime/threads.h"

#include <omp.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>

#include "backends/host_lanes.h"
#include "core/error.h"

namespace tandem {
namespace {

// Who chose the thread count, for `tandem devices`, and the count set_threads() chose (0:
// none).
std::string chosen_by;
std::atomic<int> chosen_threads{0};

// OMP_NUM_THREADS's first number (libgomp reads "4,2" as 4 at the outer level), or 0.
int environment_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || !*env) return 0;
  char* end = nullptr;
  const long threads = std::strtol(env, &end, 10);
  return threads >= 1 && threads <= 1024 ? static_cast<int>(threads) : 0;
}

}  // namespace

void set_threads(int threads, const std::string& by) {
  if (threads < 1 || threads > 1024)
    throw UserError(by + ": " + std::to_string(threads) + " is out of range: ask for 1 to 1024 (this process may run on " +
                    std::to_string(usable_cores()) + " cores)");
  omp_set_num_threads(threads);
  HostLaneEngine::set_threads(threads);  // the lanes' threads, which do not inherit it
  chosen_by = by;
  chosen_threads.store(threads, std::memory_order_relaxed);
}

int compute_threads() {
  if (int chosen = chosen_threads.load(std::memory_order_relaxed)) return chosen;
  if (int from_environment = environment_threads()) return from_environment;
  return usable_cores();
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return omp_get_num_procs();
  return CPU_COUNT(&set);
}

std::string compute_threads_reason() {
  if (!chosen_by.empty()) return chosen_by;
  if (environment_threads()) return "OMP_NUM_THREADS";
  return "the cores this process may run on";
}

std::string thread_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  if (policy && *policy) return "OMP_WAIT_POLICY=" + std::string(policy);
  if (spins && *spins) return "spin " + std::string(spins) + " rounds, then sleep (GOMP_SPINCOUNT=" + spins + ")";
  return "OpenMP's default (spin 300000 rounds, then sleep)";
}

}  // namespace tandem
