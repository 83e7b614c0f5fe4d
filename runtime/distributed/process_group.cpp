#include "runtime/distributed/process_group.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "core/error.h"

namespace tandem {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

/// Initialises MPI once per process and finalises it at exit (after every group is gone).
void ensure_mpi() {
  static const bool initialised = [] {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw UserError("MPI could not be initialised (mpirun started this process)");
      // Errors come back as codes that the calls below check, rather than ending the job
      // without a word.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    return true;
  }();
  (void)initialised;
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

ProcessGroup::ProcessGroup(int rank, int size, int local_rank, std::string host, bool mpi,
                           std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), local_rank_(local_rank), host_(std::move(host)), mpi_(mpi), timeout_(timeout) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::single() {
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(0, 1, 0, host_name(), false, default_timeout));
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment(std::chrono::milliseconds timeout) {
  if (!launched_by_mpirun()) {
    auto group = single();
    group->timeout_ = timeout;
    return group;
  }
  ensure_mpi();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("MPI_LOCALRANKID", 0));
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(rank, size, local, host_name(), true, timeout));
}

void ProcessGroup::abort(const std::string& message) const {
  std::fprintf(stderr, "error: rank %d (%s): %s\n", rank_, host_.c_str(), message.c_str());
  std::fflush(stderr);
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, 2);
  std::_Exit(2);
}

void ProcessGroup::wait_for(void* request, const std::string& what, std::chrono::steady_clock::time_point started) {
  auto* r = static_cast<MPI_Request*>(request);
  const auto deadline = started + timeout_;
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int code = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) abort(what + (phase_.empty() ? "" : " (" + phase_ + ")") + " failed: " + mpi_error(code));
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started);
      abort(what + (phase_.empty() ? "" : " (" + phase_ + ")") + " did not finish within " +
            std::to_string(waited.count()) + " s (the collective timeout, --collective-timeout): another rank " +
            "died, hangs, or called collectives in another order; the job ends");
    }
    // Yield first (a collective of small buffers finishes in microseconds), then sleep so
    // that a long wait does not take a core from the rank's own computing.
    if (spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

ProcessGroup::Request::Request(Request&& other) noexcept
    : group_(std::exchange(other.group_, nullptr)),
      what_(std::move(other.what_)),
      started_(other.started_),
      request_(std::exchange(other.request_, nullptr)) {}

ProcessGroup::Request& ProcessGroup::Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (request_ && group_) wait();
    group_ = std::exchange(other.group_, nullptr);
    what_ = std::move(other.what_);
    started_ = other.started_;
    request_ = std::exchange(other.request_, nullptr);
  }
  return *this;
}

ProcessGroup::Request::~Request() {
  if (request_ && group_) wait();  // a buffer must not go while MPI still writes it
  delete static_cast<MPI_Request*>(request_);
}

bool ProcessGroup::Request::done() {
  if (!request_) return true;
  int finished = 0;
  MPI_Test(static_cast<MPI_Request*>(request_), &finished, MPI_STATUS_IGNORE);
  if (finished) {
    delete static_cast<MPI_Request*>(request_);
    request_ = nullptr;
  }
  return finished != 0;
}

void ProcessGroup::Request::wait() {
  if (!request_) return;
  group_->wait_for(request_, what_, started_);
  delete static_cast<MPI_Request*>(request_);
  request_ = nullptr;
}

ProcessGroup::Request ProcessGroup::all_reduce_sum_async(float* data, int64_t count, std::string what) {
  Request r;
  if (!mpi_ || size_ == 1 || count == 0) return r;
  TANDEM_ASSERT(count <= INT32_MAX, "an all-reduce of more than 2^31 elements: split it into buckets");
  auto* request = new MPI_Request;
  const int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, request);
  if (code != MPI_SUCCESS) {
    delete request;
    abort(what + " could not start: " + mpi_error(code));
  }
  r.group_ = this;
  r.what_ = std::move(what);
  r.started_ = std::chrono::steady_clock::now();
  r.request_ = request;
  return r;
}

void ProcessGroup::all_reduce_sum(float* data, int64_t count, const std::string& what) {
  all_reduce_sum_async(data, count, what).wait();
}

void ProcessGroup::all_reduce_sum(double* data, int64_t count, const std::string& what) {
  if (!mpi_ || size_ == 1 || count == 0) return;
  MPI_Request request;
  const int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
  if (code != MPI_SUCCESS) abort(what + " could not start: " + mpi_error(code));
  wait_for(&request, what, std::chrono::steady_clock::now());
}

void ProcessGroup::broadcast(void* data, size_t bytes, int root, const std::string& what) {
  if (!mpi_ || size_ == 1 || bytes == 0) return;
  // in pieces of at most 1 GiB: MPI counts in ints
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t done = 0; done < bytes; done += kPiece) {
    MPI_Request request;
    const int count = static_cast<int>(std::min(kPiece, bytes - done));
    const int code = MPI_Ibcast(static_cast<char*>(data) + done, count, MPI_BYTE, root, MPI_COMM_WORLD, &request);
    if (code != MPI_SUCCESS) abort(what + " could not start: " + mpi_error(code));
    wait_for(&request, what, std::chrono::steady_clock::now());
  }
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& mine, const std::string& what) {
  if (!mpi_ || size_ == 1) return {mine};
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size_));
  MPI_Request request;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request);
  wait_for(&request, what, std::chrono::steady_clock::now());
  std::vector<int> offsets(static_cast<size_t>(size_));
  int total = 0;
  for (int r = 0; r < size_; ++r) offsets[static_cast<size_t>(r)] = total, total += lengths[static_cast<size_t>(r)];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD,
                  &request);
  wait_for(&request, what, std::chrono::steady_clock::now());
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                             static_cast<size_t>(lengths[static_cast<size_t>(r)])));
  return out;
}

void ProcessGroup::barrier(const std::string& what) {
  if (!mpi_ || size_ == 1) return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_for(&request, what, std::chrono::steady_clock::now());
}

}  // namespace tandem
