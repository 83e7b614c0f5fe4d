#include "backends/trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace tandem {

namespace {

// Queue names are device names ("cuda:0 copies"), task names name layers and tensors.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

}  // namespace

SimTrace* SimTrace::active() {
  // Made on first use and never destroyed (a queue may still run a task while statics are
  // destroyed at exit); the file is written at exit.
  static SimTrace* const trace = [] () -> SimTrace* {
    const char* path = std::getenv("TANDEM_SIM_TRACE");
    if (!path || !*path) return nullptr;
    auto* made = new SimTrace(path);
    std::atexit([] {
      SimTrace* t = active();
      if (!t->write()) std::fprintf(stderr, "tandem: could not write the trace to %s\n", t->path_.c_str());
    });
    return made;
  }();
  return trace;
}

void SimTrace::check_environment() {
  const char* path = std::getenv("TANDEM_SIM_TRACE");
  if (!path || !*path) return;
  if (!std::ofstream(path))
    throw UserError("TANDEM_SIM_TRACE='" + std::string(path) +
                    "': cannot write the trace there; name a file in a directory that exists and is writable, or "
                    "unset TANDEM_SIM_TRACE");
}

void SimTrace::add(const std::string& queue, const std::string& name, std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point stop, int side_by_side) {
  std::lock_guard lock(mutex_);
  auto it = std::find(tracks_.begin(), tracks_.end(), queue);
  const int track = static_cast<int>(it - tracks_.begin());
  if (it == tracks_.end()) tracks_.push_back(queue);
  slices_.push_back({track, name, start, stop, side_by_side});
}

bool SimTrace::write() const {
  std::lock_guard lock(mutex_);
  std::ofstream out(path_);
  if (!out) return false;
  auto origin = slices_.empty() ? std::chrono::steady_clock::time_point{} : slices_.front().start;
  for (const Slice& s : slices_) origin = std::min(origin, s.start);  // they are added as they end
  auto us = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  out << "{\"traceEvents\": [\n";
  bool first = true;
  auto comma = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (size_t i = 0; i < tracks_.size(); ++i) {
    comma();
    out << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": " << i
        << ", \"args\": {\"name\": " << json_string(tracks_[i]) << "}}";
  }
  for (const Slice& s : slices_) {
    comma();
    out << "{\"ph\": \"X\", \"name\": " << json_string(s.name) << ", \"pid\": 0, \"tid\": " << s.track
        << ", \"ts\": " << us(s.start)
        << ", \"dur\": " << us(s.stop) - us(s.start) << ", \"args\": {\"side_by_side\": " << s.side_by_side << "}}";
  }
  out << "\n]}\n";
  return static_cast<bool>(out);
}

// ---- TraceLabel, HostSpan ----------------------------------------------------------------

namespace {
thread_local std::string_view label_what, label_phase;
}  // namespace

TraceLabel::TraceLabel(std::string_view what, std::string_view phase) : outer_what_(label_what), outer_phase_(label_phase) {
  label_what = what;
  label_phase = phase;
}

TraceLabel::~TraceLabel() {
  label_what = outer_what_;
  label_phase = outer_phase_;
}

std::string TraceLabel::current() {
  if (label_what.empty()) return "task";
  std::string name(label_what);
  if (!label_phase.empty()) name.append(" ").append(label_phase);
  return name;
}

HostSpan::HostSpan(const char* name) : name_(name), trace_(SimTrace::active()) {
  if (trace_) start_ = std::chrono::steady_clock::now();
}

HostSpan::~HostSpan() {
  if (trace_) trace_->add("host", name_, start_, std::chrono::steady_clock::now(), 1);
}

}  // namespace tandem
