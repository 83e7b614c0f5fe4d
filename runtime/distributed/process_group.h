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
// Thread-safety: one thread of the process makes every call. MPI is asked for
// MPI_THREAD_MULTIPLE so that a Channel (a communicator of its own) may serve another
// thread (a simulated GPU's proxy, runtime/distributed/device_collectives.h).
#pragma once

#include <atomic>
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
  /// What the rank says it is in the middle of, should mpirun end it, until the next
  /// collective of the group or set_phase(): a collective the group does not run itself (a
  /// device's, queued while the rank computes). Empty: computing in the phase again.
  void note_activity(const std::string& doing);

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
  /// Ends the job for a collective that failed where the group cannot see it (a device's
  /// between processes, backends/inter_process.h): `failure`, then which ranks did not reach
  /// `doing` (the collective's name, the same on every rank), as a deadline of the group's
  /// own collectives does.
  [[noreturn]] void abort_collective(const std::string& failure, const std::string& doing);
  /// What the rank is doing, for messages: "in step 12", or empty.
  const std::string& phase() const { return phase_; }

  /// Collectives on an MPI communicator of their own (a duplicate of the job's), for one
  /// thread other than the group's caller (a simulated GPU's proxy): they never pair with
  /// the group's own. Each call blocks until done, or until its deadline or cancel():
  /// false then. One call at a time.
  class Channel {
   public:
    ~Channel();
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;
    int rank() const { return rank_; }
    int size() const { return size_; }
    /// In place, added in rank order (MPI's reduction is deterministic for a fixed count of
    /// ranks: every rank gets the same bits).
    bool all_reduce_sum(float* data, int64_t count, std::chrono::steady_clock::time_point deadline);
    bool broadcast(void* data, size_t bytes, int root, std::chrono::steady_clock::time_point deadline);
    /// A call blocked now, or made later, returns false at once (the request is abandoned:
    /// the job is ending).
    void cancel() { cancelled_.store(true); }

   private:
    friend class ProcessGroup;
    Channel(void* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
    bool wait(void* request, std::chrono::steady_clock::time_point deadline);
    void* comm_;  // an MPI_Comm, heap-held
    const int rank_, size_;
    std::atomic<bool> cancelled_{false};
    bool abandoned_ = false;  // a request was left behind: the communicator cannot be freed
  };
  /// Whether MPI lets a thread other than the group's call it (MPI_THREAD_MULTIPLE).
  bool threads_allowed() const;
  /// Every rank opens one together (a collective of the group); null for a group of one, or
  /// when MPI gave no MPI_THREAD_MULTIPLE (then nothing but the group's thread may call MPI).
  std::unique_ptr<Channel> open_channel(const std::string& what);

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
