// How many threads Tandem computes with on the cpu, and how they wait (docs/architecture.md,
// "Threads").
//
// One OpenMP team does all the cpu's work: oneDNN's kernels (Debian's oneDNN is built on
// OpenMP) and the host lanes that run the cpu's and the simulated GPUs' kernels
// (backends/host_lanes.h); the data loader's few workers are plain threads that mostly
// wait for the disk. TBB is not used: a second pool beside OpenMP's would put two busy
// threads on each core, and its arenas would buy nothing that one team does not.
//
// Note [waiting threads]: a thread of an OpenMP team that waits at a barrier spins by
// default (libgomp: 300,000 rounds) before it sleeps. On a machine where other processes
// keep the cores busy, a spinning thread takes a core that the thread it waits for needs,
// and every barrier costs a scheduler time slice: an epoch of the character GRU took 69 s
// beside two busy processes instead of 0.42 s quiet. Sleeping at once (passive) costs a
// wake-up at every parallel region instead: 1.06 s quiet. 1,000 rounds (a few
// microseconds) keep the quiet machine's 0.43 s and take 1.6 s beside the busy ones
// (bench/bench_threads.py). The CLI therefore starts with GOMP_SPINCOUNT=1000 unless the
// environment chooses (OMP_WAIT_POLICY or GOMP_SPINCOUNT: runtime/cli/main.cpp); libgomp
// reads it only when it loads, so the CLI sets it and starts itself again, and a program
// of one's own (or Python) sets it before it starts (the Python package does).
#pragma once

#include <string>

namespace tandem {

/// What the CLI and the Python package set GOMP_SPINCOUNT to (Note [waiting threads]).
inline constexpr char kSpinsBeforeSleeping[] = "1000";

/// The threads the cpu computes with from now on (each device's kernels are made after
/// this): omp_set_num_threads. `by` names the caller in messages and in
/// compute_threads_reason(). UserError unless 1 <= threads <= 1024.
void set_threads(int threads, const std::string& by = "set_threads()");
/// The threads the cpu computes with, and why that many: "2 (the cores this process may
/// run on)", "1 (OMP_NUM_THREADS)", "3 (--threads)". Tandem's own choice, whatever another
/// library in the process has since set the calling thread's OpenMP team to (torch does
/// when it is imported); the Python package computes with this many (python/src/compute_scope.h).
int compute_threads();
std::string compute_threads_reason();
/// How the team's threads wait, as the environment chose it: "spin 1000 rounds, then sleep
/// (GOMP_SPINCOUNT=1000)", "OMP_WAIT_POLICY=passive", or "OpenMP's default (spin 300000
/// rounds, then sleep)".
std::string thread_wait_policy();
/// The cores this process may run on (its affinity mask).
int usable_cores();

}  // namespace tandem
