// What a training run says when it is interrupted (Ctrl-C, SIGTERM from a scheduler or
// from mpirun): the step it reached, the last checkpoint and the command that resumes it;
// then it ends as the signal ends a process (status 130 for SIGINT, 143 for SIGTERM in a
// shell), leaving no temporary checkpoint behind.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::cli {

/// Installs SIGINT and SIGTERM handlers for its lifetime (one at a time per process). The
/// message is formatted by update() on the training thread and only written by the handler,
/// which does nothing but async-signal-safe calls: write, unlink, the default disposition
/// and raise. Not thread-safe: update() from one thread.
class InterruptNote {
 public:
  /// `speaks`: this process prints the message (rank 0 of a job); every rank removes its own
  /// temporary files. `resume_command`: the command that resumes from the checkpoint.
  InterruptNote(bool speaks, std::string checkpoint, std::string resume_command);
  ~InterruptNote();
  InterruptNote(const InterruptNote&) = delete;
  InterruptNote& operator=(const InterruptNote&) = delete;

  /// The run reached step `step` (of the run, from 1) in epoch `epoch` (from 1), and the
  /// last checkpoint written holds `checkpoint_epochs` epochs (0: none yet).
  void update(int64_t step, int64_t epoch, int64_t epochs, int64_t checkpoint_epochs);

 private:
  bool speaks_;
  std::string checkpoint_, resume_command_;
};

/// This process's command line as a shell reads it back (each argument quoted where it
/// needs to be), with `--resume CKPT` in place of any --resume and --save: the command that
/// continues a run saved to CKPT. `ranks` > 1 puts "mpirun -np N" in front.
std::string resume_command(const std::string& checkpoint, int ranks);

}  // namespace tandem::cli
