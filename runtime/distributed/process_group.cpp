#include "runtime/distributed/process_group.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "backends/trace.h"
#include "core/bfloat16.h"
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

/// MPI's user function for a bf16 sum: `inout[i] = bf16(in[i] + inout[i])`, each partial
/// sum rounded to bf16 as a bf16 all-reduce over NCCL rounds it.
extern "C" void sum_bf16_bits(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

/// MPI's user function for a float sum that MPI must add in rank order (declared not
/// commutative): every rank gets the same bits, as from NCCL's all-reduce.
extern "C" void sum_float_in_rank_order(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const float*>(in);
  auto* b = static_cast<float*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = a[i] + b[i];
}

/// The bf16 sum, made once. Declared not commutative: MPI then adds in rank order and
/// hands every rank the one result, where a commutative op may leave ranks with sums
/// rounded in other orders, and so with weights that drift apart.
MPI_Op bf16_sum() {
  static MPI_Op op = [] {
    MPI_Op made;
    MPI_Op_create(&sum_bf16_bits, /*commute=*/0, &made);
    return made;
  }();
  return op;
}

/// The thread level MPI gave: MPI_THREAD_MULTIPLE lets a Channel serve another thread.
int mpi_thread_level = MPI_THREAD_SINGLE;

/// Initialises MPI once per process and finalises it at exit (after every group is gone).
void ensure_mpi() {
  static const bool initialised = [] {
    int already = 0;
    MPI_Initialized(&already);
    if (already) {
      MPI_Query_thread(&mpi_thread_level);
    } else {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        throw UserError("MPI could not be initialised (mpirun started this process)");
      mpi_thread_level = provided;
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

// What this rank is doing, readable from a signal handler: when a rank dies, mpirun ends
// the others with SIGTERM, and each says what it was in the middle of (which step, which
// collective) before it goes. Two buffers: the writer fills the one not shown, then flips.
char activity_text[2][1024];
std::atomic<int> activity_shown{0};
char rank_prefix[256];

void show_activity(const std::string& text) {
  const int next = 1 - activity_shown.load(std::memory_order_relaxed);
  const size_t n = std::min(text.size(), sizeof(activity_text[0]) - 1);
  std::memcpy(activity_text[next], text.data(), n);
  activity_text[next][n] = '\0';
  activity_shown.store(next, std::memory_order_release);
}

extern "C" void say_activity_and_exit(int) {
  const char* text = activity_text[activity_shown.load(std::memory_order_acquire)];
  const char* parts[] = {rank_prefix, "ended by mpirun (another rank failed: mpirun names it) while ", text, "\n"};
  for (const char* part : parts) {
    size_t left = std::strlen(part);
    while (left > 0) {
      const ssize_t written = write(STDERR_FILENO, part, left);
      if (written <= 0) break;
      part += written;
      left -= static_cast<size_t>(written);
    }
  }
  _exit(2);
}

void say_activity_when_ended(int rank, const std::string& host) {
  std::snprintf(rank_prefix, sizeof(rank_prefix), "error: rank %d (%s): ", rank, host.c_str());
  show_activity("starting");
  struct sigaction action {};
  action.sa_handler = say_activity_and_exit;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
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

ProcessGroup::ProcessGroup(int rank, int size, int local_rank, int local_size, std::string host, bool mpi,
                           std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      local_rank_(local_rank),
      local_size_(local_size),
      host_(std::move(host)),
      mpi_(mpi),
      timeout_(timeout) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::single() {
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(0, 1, 0, 1, host_name(), false, default_timeout));
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
  const int local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", 1));
  const std::string host = host_name();
  if (size > 1) say_activity_when_ended(rank, host);
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(rank, size, local, local_size, host, true, timeout));
}

void ProcessGroup::set_phase(std::string phase) {
  phase_ = std::move(phase);
  show_activity("computing " + phase_);
}

void ProcessGroup::note_activity(const std::string& doing) {
  show_activity(doing.empty() ? "computing " + phase_ : doing);
}

ProcessGroup::ActivityNote::ActivityNote(const ProcessGroup& group, const std::string& doing)
    : restore_("computing " + group.phase_) {
  show_activity(doing);
}

ProcessGroup::ActivityNote::~ActivityNote() { show_activity(restore_); }

void ProcessGroup::abort(const std::string& message) const {
  std::fprintf(stderr, "error: rank %d (%s): %s\n", rank_, host_.c_str(), message.c_str());
  std::fflush(stderr);
  // mpirun answers MPI_Abort with SIGTERM to every rank, this one too: it has said why
  std::signal(SIGTERM, SIG_DFL);
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, 2);
  std::_Exit(2);
}

void ProcessGroup::abort_collective(const std::string& failure, const std::string& doing) {
  abort(failure + "; " + who_is_missing(doing) + "; the job ends");
}

bool ProcessGroup::threads_allowed() const { return mpi_ && mpi_thread_level >= MPI_THREAD_MULTIPLE; }

std::unique_ptr<ProcessGroup::Channel> ProcessGroup::open_channel(const std::string& what) {
  if (!threads_allowed() || size_ == 1) return nullptr;
  // MPI_Comm_dup is a collective of the whole group: every rank's group thread calls it in
  // the same place. Its own deadline is the group's (a barrier first, waited for as usual).
  barrier(what);
  auto* comm = new MPI_Comm;
  const int code = MPI_Comm_dup(MPI_COMM_WORLD, comm);
  if (code != MPI_SUCCESS) {
    delete comm;
    abort(what + " failed: " + mpi_error(code));
  }
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Channel>(new Channel(comm, rank_, size_));
}

ProcessGroup::Channel::~Channel() {
  auto* comm = static_cast<MPI_Comm*>(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!abandoned_ && !finalized) MPI_Comm_free(comm);
  delete comm;
}

bool ProcessGroup::Channel::wait(void* request, std::chrono::steady_clock::time_point deadline) {
  auto* r = static_cast<MPI_Request*>(request);
  for (int spins = 0;; ++spins) {
    int done = 0;
    if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (cancelled_.load() || std::chrono::steady_clock::now() > deadline) {
      abandoned_ = true;  // MPI cannot cancel a collective: the job ends without it
      return false;
    }
    if (spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool ProcessGroup::Channel::all_reduce_sum(float* data, int64_t count, std::chrono::steady_clock::time_point deadline) {
  if (cancelled_.load()) return false;
  if (count == 0) return true;
  TANDEM_ASSERT(count <= INT32_MAX, "an all-reduce of more than 2^31 elements: split it into buckets");
  // declared non-commutative, as the bf16 sum is: MPI then adds in rank order
  static MPI_Op ordered_sum = [] {
    MPI_Op made;
    MPI_Op_create(&sum_float_in_rank_order, /*commute=*/0, &made);
    return made;
  }();
  auto* request = new MPI_Request;
  if (MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, ordered_sum,
                     *static_cast<MPI_Comm*>(comm_), request) != MPI_SUCCESS) {
    delete request;
    return false;
  }
  const bool done = wait(request, deadline);
  if (done) delete request;  // else MPI may still write it: left for the ending job
  return done;
}

bool ProcessGroup::Channel::broadcast(void* data, size_t bytes, int root, std::chrono::steady_clock::time_point deadline) {
  constexpr size_t kPiece = size_t{1} << 30;  // MPI counts in ints
  for (size_t done = 0; done < bytes; done += kPiece) {
    if (cancelled_.load()) return false;
    auto* request = new MPI_Request;
    const int count = static_cast<int>(std::min(kPiece, bytes - done));
    if (MPI_Ibcast(static_cast<char*>(data) + done, count, MPI_BYTE, root, *static_cast<MPI_Comm*>(comm_), request) !=
        MPI_SUCCESS) {
      delete request;
      return false;
    }
    if (!wait(request, deadline)) return false;
    delete request;
  }
  return true;
}

void ProcessGroup::trace_collective(const std::string& what, std::chrono::steady_clock::time_point started,
                                    size_t bytes) {
  if (Trace* trace = Trace::active())
    trace->add("collectives (MPI)", what, started, std::chrono::steady_clock::now(), 1,
               "{\"bytes\": " + std::to_string(bytes) + "}");
}

void ProcessGroup::wait_for(void* request, const std::string& what, std::chrono::steady_clock::time_point started,
                            size_t bytes) {
  auto* r = static_cast<MPI_Request*>(request);
  const auto deadline = started + timeout_;
  const std::string doing = what + (phase_.empty() ? "" : " (" + phase_ + ")");
  ActivityNote note(*this, "waiting in " + doing);
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int code = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) abort(doing + " failed: " + mpi_error(code));
    if (done) {
      trace_collective(what, started, bytes);
      return;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started);
      abort(doing + " did not finish within " + std::to_string(waited.count()) +
            " s (the collective timeout, --collective-timeout); " + who_is_missing(doing) + "; the job ends");
    }
    // Yield first (a collective of small buffers finishes in microseconds), then sleep so
    // that a long wait does not take a core from the rank's own computing.
    if (spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string ProcessGroup::who_is_missing(const std::string& doing) {
  // Every rank that times out tells the others what it waits in, on a tag no collective
  // uses, then listens for a grace period: the ranks that say nothing are the ones that
  // died, hang or compute elsewhere; one that waits in another collective diverged.
  static std::string mine;  // alive until MPI has sent it: the job ends right after
  mine = doing;
  std::vector<MPI_Request> sends(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r)
    if (r != rank_)
      MPI_Isend(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, r, kStatusTag, MPI_COMM_WORLD,
                &sends[static_cast<size_t>(r)]);
  std::vector<std::optional<std::string>> heard(static_cast<size_t>(size_));
  heard[static_cast<size_t>(rank_)] = doing;
  const auto grace_end = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(3));
  int missing = size_ - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < grace_end) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kStatusTag, MPI_COMM_WORLD, &flag, &status);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text(static_cast<size_t>(length), '\0');
    MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, kStatusTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    auto& slot = heard[static_cast<size_t>(status.MPI_SOURCE)];
    if (!slot) --missing;
    slot = std::move(text);
  }
  std::string silent, elsewhere;
  for (int r = 0; r < size_; ++r) {
    const auto& h = heard[static_cast<size_t>(r)];
    if (!h) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    else if (*h != doing) elsewhere += "; rank " + std::to_string(r) + " waits in " + *h + " instead";
  }
  std::string out;
  if (!silent.empty())
    out = (silent.find(',') == std::string::npos ? "rank " + silent + " did" : "ranks " + silent + " did") +
          " not reach it: it died, hangs, or is still computing";
  if (!elsewhere.empty())
    out += (out.empty() ? "the ranks called collectives in different orders" : "") + elsewhere;
  if (out.empty()) out = "every rank waits in it: the network or MPI failed";
  return out;
}

ProcessGroup::Request::Request(Request&& other) noexcept
    : group_(std::exchange(other.group_, nullptr)),
      what_(std::move(other.what_)),
      started_(other.started_),
      bytes_(other.bytes_),
      request_(std::exchange(other.request_, nullptr)) {}

ProcessGroup::Request& ProcessGroup::Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (request_ && group_) wait();
    group_ = std::exchange(other.group_, nullptr);
    what_ = std::move(other.what_);
    started_ = other.started_;
    bytes_ = other.bytes_;
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
    trace_collective(what_, started_, bytes_);
    delete static_cast<MPI_Request*>(request_);
    request_ = nullptr;
  }
  return finished != 0;
}

void ProcessGroup::Request::wait() {
  if (!request_) return;
  group_->wait_for(request_, what_, started_, bytes_);
  delete static_cast<MPI_Request*>(request_);
  request_ = nullptr;
}

ProcessGroup::Request ProcessGroup::all_reduce_sum_async(float* data, int64_t count, std::string what) {
  return start_all_reduce_sum(data, count, SumOf::float32, std::move(what));
}

ProcessGroup::Request ProcessGroup::all_reduce_sum_bf16_async(uint16_t* data, int64_t count, std::string what) {
  return start_all_reduce_sum(data, count, SumOf::bfloat16, std::move(what));
}

ProcessGroup::Request ProcessGroup::start_all_reduce_sum(void* data, int64_t count, SumOf type, std::string what) {
  Request r;
  if (!mpi_ || size_ == 1 || count == 0) return r;
  TANDEM_ASSERT(count <= INT32_MAX, "an all-reduce of more than 2^31 elements: split it into buckets");
  // the element's MPI type and bytes, and the sum (bf16's is a user op, bf16_sum())
  const MPI_Datatype element = type == SumOf::float32 ? MPI_FLOAT : type == SumOf::float64 ? MPI_DOUBLE : MPI_UINT16_T;
  const size_t element_bytes = type == SumOf::float32 ? sizeof(float) : type == SumOf::float64 ? sizeof(double) : 2;
  auto* request = new MPI_Request;
  const int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), element,
                                  type == SumOf::bfloat16 ? bf16_sum() : MPI_SUM, MPI_COMM_WORLD, request);
  if (code != MPI_SUCCESS) {
    delete request;
    abort(what + " could not start: " + mpi_error(code));
  }
  r.group_ = this;
  r.what_ = std::move(what);
  r.started_ = std::chrono::steady_clock::now();
  r.bytes_ = static_cast<size_t>(count) * element_bytes;
  r.request_ = request;
  return r;
}

void ProcessGroup::all_reduce_sum(float* data, int64_t count, const std::string& what) {
  all_reduce_sum_async(data, count, what).wait();
}

void ProcessGroup::all_reduce_sum(double* data, int64_t count, const std::string& what) {
  start_all_reduce_sum(data, count, SumOf::float64, what).wait();
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
    wait_for(&request, what, std::chrono::steady_clock::now(), static_cast<size_t>(count));
  }
}

void ProcessGroup::broadcast(std::string& text, int root, const std::string& what) {
  if (!mpi_ || size_ == 1) return;
  uint64_t length = text.size();
  broadcast(&length, sizeof(length), root, what);
  text.resize(length);
  broadcast(text.data(), length, root, what);
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
  wait_for(&request, what, std::chrono::steady_clock::now(), static_cast<size_t>(total));
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
