#include "runtime/cli/interrupt_note.h"

#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "runtime/io/safetensors.h"

namespace tandem::cli {
namespace {

// What the handler writes. update() fills the buffer the handler is not reading and then
// publishes it, so that the handler never sees half a message.
constexpr size_t kMessageBytes = 16384;
char messages[2][kMessageBytes];
size_t lengths[2];
std::atomic<int> published{-1};
std::atomic<bool> speaks{false};
struct sigaction previous_int, previous_term;

void write_all(const char* text, size_t n) {
  while (n > 0) {
    ssize_t done = ::write(STDERR_FILENO, text, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return;
    text += done;
    n -= static_cast<size_t>(done);
  }
}

void on_signal(int signal) {
  const int saved = errno;
  // the checkpoint being written, if one is: a half-written temporary must not stay
  if (const char* tmp = safetensors_temporary_in_progress()) ::unlink(tmp);
  // Under mpirun, SIGTERM is how the job ends when a rank fails, as when mpirun is
  // interrupted: the process group's handler says what this rank was doing and exits, and it
  // keeps that word; this one adds where the run stands.
  const struct sigaction& previous = signal == SIGINT ? previous_int : previous_term;
  const bool chained = previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN;
  const int k = published.load();
  if (speaks.load() && k >= 0) {
    const char* name = chained               ? "\nstopped (SIGTERM from mpirun) "
                       : signal == SIGINT ? "\ninterrupted (SIGINT) "
                                          : "\ninterrupted (SIGTERM) ";
    write_all(name, std::strlen(name));
    write_all(messages[k], lengths[k]);
  }
  errno = saved;
  if (chained) {
    previous.sa_handler(signal);  // exits
    return;
  }
  // end as the signal ends a process: the shell's 130 or 143, mpirun's "killed by signal"
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

/// `arg` as a POSIX shell reads it back.
std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789_./:=,+-@%") == std::string::npos;
  if (plain) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

InterruptNote::InterruptNote(bool speaks_now, std::string checkpoint, std::string resume_command)
    : speaks_(speaks_now), checkpoint_(std::move(checkpoint)), resume_command_(std::move(resume_command)) {
  speaks.store(speaks_);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

InterruptNote::~InterruptNote() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
  published.store(-1);
}

void InterruptNote::update(int64_t step, int64_t epoch, int64_t epochs, int64_t checkpoint_epochs) {
  std::string text = fmt::format("at step {}, in epoch {} of {}", step, epoch, epochs);
  if (checkpoint_.empty())
    text += "; no checkpoint is written (no --save), so the run cannot be resumed: give --save PATH to be able to\n";
  else if (checkpoint_epochs == 0)
    text += fmt::format("; no checkpoint was written yet (the first comes at the end of epoch 1, to {})\n", checkpoint_);
  else
    text += fmt::format("; the last checkpoint is epoch {} at {}; resume with:\n  {}\n", checkpoint_epochs, checkpoint_,
                        resume_command_);
  const int k = published.load() == 0 ? 1 : 0;
  const size_t n = std::min(text.size(), kMessageBytes);
  std::memcpy(messages[k], text.data(), n);
  lengths[k] = n;
  published.store(k);
}

std::string resume_command(const std::string& checkpoint, int ranks) {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  std::string command = ranks > 1 ? fmt::format("mpirun -np {} ", ranks) : "";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // the resumed run saves where it resumes from: its --save and --resume give way
    if (a == "--save" || a == "--resume") {
      ++i;
      continue;
    }
    if (a.starts_with("--save=") || a.starts_with("--resume=") || a == "--no-save") continue;
    command += shell_quoted(a) + " ";
  }
  return command + "--resume " + shell_quoted(checkpoint);
}

}  // namespace tandem::cli
