// ProcessGroup: the processes of one training job and the collectives among them, over
// MPI (Open MPI's mpirun starts one process per GPU, or per host's cpu, as Horovod and
// torch.distributed do). A process started without mpirun is a group of one, and every
// collective is then nothing.
//
// Failures end the job, never hang it: every collective has a deadline, polled from the
// calling thread; a rank that passes it reports which collective of which step it was
// waiting for, and how long, and aborts the whole job (MPI_Abort, exit code 2), so that no
// other rank waits for ever either. A rank that dies takes the job down through mpirun.
// Nothing assumes ULFM.
//
// Thread-safety: one thread of the process makes every call (MPI_THREAD_FUNNELED).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

class ProcessGroup {
 public:
  /// The default deadline of a collective.
  static constexpr std::chrono::seconds default_timeout{300};

  /// The job this process belongs to: MPI's world when mpirun started it (its environment
  /// says so), else a group of one. MPI is initialised once per process, at the first call.
  static std::shared_ptr<ProcessGroup> from_environment(std::chrono::milliseconds timeout = default_timeout);
  /// A group of one (a process on its own).
  static std::shared_ptr<ProcessGroup> single();

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This rank among those on its host (OMPI_COMM_WORLD_LOCAL_RANK): which GPU it takes.
  int local_rank() const { return local_rank_; }
  /// The ranks on this rank's host (OMPI_COMM_WORLD_LOCAL_SIZE): how its GPUs are shared.
  int local_size() const { return local_size_; }
  /// This rank's host name.
  const std::string& host() const { return host_; }
  bool distributed() const { return size_ > 1; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  /// What the rank is doing, for messages: "step 12" (set by the trainer). A rank that
  /// mpirun ends because another failed says it too.
  void set_phase(std::string phase);

  /// A collective started and not yet finished: wait() for it, or poll done().
  class Request {
   public:
    Request() = default;
    Request(Request&&) noexcept;
    Request& operator=(Request&&) noexcept;
    ~Request();
    /// Whether it has finished (advancing MPI's progress).
    bool done();
    /// Waits for it up to the group's deadline; past it, aborts the job.
    void wait();

   private:
    friend class ProcessGroup;
    ProcessGroup* group_ = nullptr;
    std::string what_;
    std::chrono::steady_clock::time_point started_;
    size_t bytes_ = 0;
    void* request_ = nullptr;  // an MPI_Request, heap-held so that this header needs no mpi.h
  };

  /// Starts the in-place elementwise sum of `count` floats at `data` over every rank; `data`
  /// must stay alive and unread until the request is done. `what` names it in errors.
  Request all_reduce_sum_async(float* data, int64_t count, std::string what);
  /// The same for bf16 values (their bits): each partial sum is rounded to bf16, in the
  /// same order on every rank, so every rank gets the same bits (compressed gradients).
  Request all_reduce_sum_bf16_async(uint16_t* data, int64_t count, std::string what);
  /// The same, waited for.
  void all_reduce_sum(float* data, int64_t count, const std::string& what);
  /// The same for doubles (metrics, norms).
  void all_reduce_sum(double* data, int64_t count, const std::string& what);
  /// Every rank's `bytes` at `data` become rank `root`'s.
  void broadcast(void* data, size_t bytes, int root, const std::string& what);
  /// Every rank's `text` becomes rank `root`'s (of any length).
  void broadcast(std::string& text, int root, const std::string& what);
  /// Every rank's string, in rank order.
  std::vector<std::string> all_gather(const std::string& mine, const std::string& what);
  /// Every rank waits for every other.
  void barrier(const std::string& what);

  /// Prints "rank R (HOST): message" and ends the whole job with exit code 2.
  [[noreturn]] void abort(const std::string& message) const;

 private:
  ProcessGroup(int rank, int size, int local_rank, int local_size, std::string host, bool mpi,
               std::chrono::milliseconds timeout);
  enum class SumOf { float32, float64, bfloat16 };
  Request start_all_reduce_sum(void* data, int64_t count, SumOf type, std::string what);
  /// Waits for `request` to finish within the deadline, naming `what` if it does not.
  void wait_for(void* request, const std::string& what, std::chrono::steady_clock::time_point started,
                size_t bytes = 0);
  /// Puts a finished collective on the trace's "collectives" track (backends/trace.h).
  static void trace_collective(const std::string& what, std::chrono::steady_clock::time_point started, size_t bytes);
  /// Past a deadline: which ranks did not reach the collective `doing`, or reached another.
  std::string who_is_missing(const std::string& doing);
  /// The tag of what a rank past its deadline tells the others (collectives use none).
  static constexpr int kStatusTag = 7001;

  /// Shows what the rank waits in for as long as it lives (then "computing" the phase again).
  class ActivityNote {
   public:
    ActivityNote(const ProcessGroup& group, const std::string& doing);
    ~ActivityNote();

   private:
    std::string restore_;
  };

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool mpi_ = false;
  std::chrono::milliseconds timeout_;
  std::string phase_;
};

/// Whether this process was started by mpirun (Open MPI's or PMIx's variables are set).
bool launched_by_mpirun();

}  // namespace tandem
