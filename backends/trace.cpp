#include "backends/trace.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "backends/device_spans.h"
#include "core/error.h"

namespace tandem {

namespace {

using Json = nlohmann::json;

// What closes the document after the last event; every flush writes its events over it and
// then writes it again, so that the file is whole between flushes.
constexpr char kClosing[] = "\n]}\n";
constexpr long kClosingBytes = sizeof(kClosing) - 1;
constexpr auto kFlushEvery = std::chrono::milliseconds(100);

// The process's trace: made by start() or from the environment on first use, and never
// destroyed (a lane may still run a task while statics are destroyed at exit).
std::mutex made_mutex;
std::atomic<Trace*> made_trace{nullptr};
bool environment_read = false;

const char* environment_path(const char** variable) {
  for (const char* name : {"TANDEM_TRACE", "TANDEM_SIM_TRACE"}) {
    const char* path = std::getenv(name);
    if (path && *path) {
      *variable = name;
      return path;
    }
  }
  return nullptr;
}

/// "--trace 'FILE'", or "TANDEM_TRACE='FILE'" for an environment variable.
std::string named(const std::string& source, const std::string& path) {
  return source.starts_with("--") ? source + " '" + path + "'" : source + "='" + path + "'";
}

std::string cannot_write(const std::string& source, const std::string& path, const char* why) {
  return named(source, path) + ": cannot write the trace there (" + why +
         "); name a file in a directory that exists and is writable";
}

// Slices are timed in microseconds from the trace's start.
double micros(Trace::Clock::time_point t, Trace::Clock::time_point origin) {
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

}  // namespace

Trace::Trace(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file), origin_(Clock::now()), last_flush_(origin_) {
  Json process = {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "tandem"}}}};
  std::fputs("{\"traceEvents\": [\n", file_);
  std::fputs(process.dump().c_str(), file_);
  std::fputs(kClosing, file_);
  std::fflush(file_);
}

void Trace::start(const std::string& path, const std::string& source) {
  std::lock_guard lock(made_mutex);
  if (Trace* t = made_trace.load())
    throw UserError(named(source, path) + ": a trace is already being written, to '" + t->path_ + "'");
  std::FILE* file = std::fopen(path.c_str(), "w+");
  if (!file) throw UserError(cannot_write(source, path, std::strerror(errno)));
  made_trace = new Trace(path, file);
  environment_read = true;  // --trace wins over the environment
  std::atexit([] {
    Trace* t = made_trace.load();
    if (!t->flush()) std::fprintf(stderr, "tandem: could not write the trace to %s\n", t->path_.c_str());
  });
}

Trace* Trace::active() {
  // The common case, no trace: one relaxed read after the first call.
  static std::atomic<bool> checked{false};
  if (checked.load(std::memory_order_acquire)) return made_trace.load(std::memory_order_acquire);
  {
    std::unique_lock lock(made_mutex);
    if (!environment_read) {
      environment_read = true;
      const char* variable = nullptr;
      if (const char* path = environment_path(&variable)) {
        lock.unlock();
        try {
          start(path, variable);
        } catch (const UserError&) {
          // no trace: check_environment() refuses the path where devices are made
        }
      }
    }
  }
  checked.store(true, std::memory_order_release);
  return made_trace.load();
}

void Trace::check_environment() {
  const char* variable = nullptr;
  const char* path = environment_path(&variable);
  if (!path) return;
  if (Trace* t = active(); t && t->path_ == path) return;
  std::FILE* probe = std::fopen(path, "a");
  if (!probe) throw UserError(cannot_write(variable, path, std::strerror(errno)) + ", or unset " + variable);
  std::fclose(probe);
}

void Trace::add(const std::string& track, const std::string& name, Clock::time_point start, Clock::time_point stop,
                int side_by_side, const std::string& args) {
  Json event = {{"ph", "X"}, {"name", name}, {"pid", 0}, {"ts", micros(start, origin_)},
                {"dur", micros(stop, origin_) - micros(start, origin_)}};
  Json event_args = args.empty() ? Json::object() : Json::parse(args, nullptr, /*allow_exceptions=*/false);
  if (event_args.is_discarded()) event_args = {{"args", args}};  // never lose a slice to its arguments
  if (side_by_side > 1) event_args["side_by_side"] = side_by_side;
  if (!event_args.empty()) event["args"] = std::move(event_args);
  std::lock_guard lock(mutex_);
  auto it = std::find(tracks_.begin(), tracks_.end(), track);
  const int tid = static_cast<int>(it - tracks_.begin());
  if (it == tracks_.end()) {
    tracks_.push_back(track);
    pending_.push_back(Json{{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", tid}, {"args", {{"name", track}}}}
                           .dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  event["tid"] = tid;
  pending_.push_back(event.dump(-1, ' ', false, Json::error_handler_t::replace));  // bytes that are not UTF-8 too
  if (Clock::now() - last_flush_ >= kFlushEvery) {
    append(pending_);
    pending_.clear();
    last_flush_ = Clock::now();
  }
}

bool Trace::flush() {
  std::lock_guard lock(mutex_);
  const bool ok = append(pending_);
  pending_.clear();
  last_flush_ = Clock::now();
  return ok;
}

bool Trace::append(const std::vector<std::string>& events) {
  if (events.empty()) return !failed_;
  std::string text;
  for (const std::string& e : events) text.append(",\n").append(e);
  text += kClosing;
  // one write over the old closing brackets: the file is whole before and after it
  const bool ok = std::fseek(file_, -kClosingBytes, SEEK_END) == 0 && std::fwrite(text.data(), 1, text.size(), file_) == text.size() &&
                  std::fflush(file_) == 0;
  if (!ok && !failed_) std::fprintf(stderr, "tandem: could not write the trace to %s\n", path_.c_str());
  failed_ = failed_ || !ok;
  return ok;
}

// ---- the sink of device-timed spans --------------------------------------------------

namespace {

/// The process's trace as a DeviceSpanSink: labels from this module's thread-locals, spans
/// into this module's trace (device_spans.h says why a backend goes through it).
class ActiveTraceSink final : public DeviceSpanSink {
 public:
  std::string label() const override { return TraceLabel::current(); }
  std::string args() const override { return TraceArgs::current(); }
  void add(const std::string& track, const std::string& name, Trace::Clock::time_point start,
           Trace::Clock::time_point stop, const std::string& args) override {
    if (Trace* trace = Trace::active()) trace->add(track, name, start, stop, 1, args);
  }
};

}  // namespace

DeviceSpanSink* Trace::device_span_sink() {
  static ActiveTraceSink* sink = new ActiveTraceSink();  // never destroyed, as the trace
  return active() ? sink : nullptr;
}

// ---- TraceLabel, TraceArgs, HostSpan ---------------------------------------------------

namespace {
thread_local std::string_view label_what, label_phase;
const std::string no_args;
thread_local const std::string* current_args = &no_args;
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

TraceArgs::TraceArgs(std::string args) : args_(std::move(args)), outer_(current_args) { current_args = &args_; }

TraceArgs::~TraceArgs() { current_args = outer_; }

const std::string& TraceArgs::current() { return *current_args; }

HostSpan::HostSpan(const char* name, const char* track) : track_(track), trace_(Trace::active()) {
  if (!trace_) return;
  name_ = name;
  start_ = Trace::Clock::now();
}

HostSpan::HostSpan(std::string name, const char* track, std::string args)
    : track_(track), trace_(Trace::active()) {
  if (!trace_) return;
  name_ = std::move(name);
  args_ = std::move(args);
  start_ = Trace::Clock::now();
}

HostSpan::~HostSpan() {
  if (trace_) trace_->add(track_, name_, start_, Trace::Clock::now(), 1, args_);
}

}  // namespace tandem
