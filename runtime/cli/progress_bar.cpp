#include "runtime/cli/progress_bar.h"

#include <fmt/core.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace tandem::cli {

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

std::string progress_line(const ProgressState& state, int columns) {
  const double per_step = state.done > 0 ? state.epoch_seconds / state.done : 0;
  // this epoch's steps left, then the later epochs' at this epoch's pace (validation apart)
  const double left = per_step * ((state.total - state.done) + state.total * (state.epochs - state.epoch));
  const int digits = static_cast<int>(std::to_string(state.total).size());
  const std::string head = fmt::format("epoch {:>3}/{}", state.epoch, state.epochs);
  const std::string tail =
      fmt::format("{:>{}}/{}  {:.0f} samples/s  loss {:.4f}  {} left", state.done, digits, state.total,
                  state.samples / std::max(state.epoch_seconds, 1e-9), state.loss, duration_text(left));
  const int room = columns - 1 - static_cast<int>(head.size() + tail.size()) - 4;  // " [" "] "
  if (room < 10) return (head + "  " + tail).substr(0, static_cast<size_t>(std::max(columns - 1, 0)));
  const int width = std::min(room, 30);
  const int filled = static_cast<int>(width * state.done / std::max<int64_t>(state.total, 1));
  return head + " [" + std::string(filled, '#') + std::string(width - filled, '.') + "] " + tail;
}

int terminal_columns(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

ProgressBar::ProgressBar(std::FILE* out, int64_t epochs) : out_(out), epochs_(epochs) {
  epoch_start_ = Clock::now();
  last_draw_ = epoch_start_ - kRedrawInterval;  // the first step draws
}

void ProgressBar::start_epoch() {
  epoch_start_ = Clock::now();
  samples_ = 0;
}

void ProgressBar::step(int64_t epoch, int64_t done, int64_t total, int64_t samples, double loss) {
  samples_ += samples;
  const Clock::time_point now = Clock::now();
  if (done < total && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const ProgressState state{.epoch = epoch, .epochs = epochs_, .done = done, .total = total, .samples = samples_,
                            .loss = loss, .epoch_seconds = std::chrono::duration<double>(now - epoch_start_).count()};
  std::string line = progress_line(state, terminal_columns(fileno(out_)));
  const size_t length = line.size();
  if (length < drawn_) line.append(drawn_ - length, ' ');  // what a longer line left
  fmt::print(out_, "\r{}", line);
  std::fflush(out_);
  drawn_ = length;
  ++draws_;
}

void ProgressBar::clear() {
  if (drawn_ == 0) return;
  fmt::print(out_, "\r{}\r", std::string(drawn_, ' '));
  std::fflush(out_);
  drawn_ = 0;
}

}  // namespace tandem::cli
