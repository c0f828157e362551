// The tracer: Chrome trace JSON written by a background thread from two fixed-size
// buffers (see tracer.h for the format and the event vocabulary).
#include "perf/tracer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace ridge::perf {

#if RIDGE_TRACE

namespace detail {
std::atomic<bool> g_trace_on{false};
}

namespace {

constexpr int kEnginePid = 1, kRequestPid = 2;
constexpr int64_t kRequestTidBase = 1'000'000;

using Buf = fmt::memory_buffer;  // 500 bytes inline: formatting an event does not allocate

void put_str(Buf& b, std::string_view s) {
  b.push_back('"');
  const bool plain = std::none_of(s.begin(), s.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
  if (plain) {  // the common case: our own names
    b.append(s);
    b.push_back('"');
    return;
  }
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      b.push_back('\\');
      b.push_back(c);
    } else if (u < 0x20) {
      fmt::format_to(fmt::appender(b), "\\u{:04x}", unsigned(u));
    } else {
      b.push_back(c);  // UTF-8 passes through; names and reasons are ours, not user text
    }
  }
  b.push_back('"');
}

// Integers without a format string: the engine thread formats a few per op.
void put_int(Buf& b, int64_t v) {
  const fmt::format_int f(v);
  b.append(f.data(), f.data() + f.size());
}

// v / 1000 with three decimals: microseconds from nanoseconds, exactly.
void put_milli(Buf& b, int64_t v) {
  if (v < 0) {
    b.push_back('-');
    v = -v;
  }
  put_int(b, v / 1000);
  const int r = int(v % 1000);
  const char d[4] = {'.', char('0' + r / 100), char('0' + r / 10 % 10), char('0' + r % 10)};
  b.append(d, d + 4);
}

// Counts (flops, bytes) exactly, as integers; other numbers to 6 digits: shorter lines,
// less time formatting on the engine thread.
void put_num(Buf& b, double v) {
  if (!std::isfinite(v)) b.append(std::string_view("null"));  // JSON has no inf/nan
  else if (v == std::floor(v) && std::fabs(v) < 9e15) put_int(b, int64_t(v));
  else fmt::format_to(fmt::appender(b), "{:.6g}", v);
}

// Rates and ratios with 3 decimals, in integer arithmetic (formatting a double with a
// precision costs more than the rest of an op's event).
void put_fixed3(Buf& b, double v) {
  if (!std::isfinite(v) || std::fabs(v) >= 1e12) return put_num(b, v);
  put_milli(b, std::llround(v * 1000.0));
}

// Microseconds with nanosecond decimals, exactly.
void put_us(Buf& b, int64_t ns) { put_milli(b, ns); }

// `"k":v,...` without braces.
void put_arg_body(Buf& b, TraceArgs args) {
  bool first = true;
  for (const TraceArg& a : args) {
    if (!first) b.push_back(',');
    first = false;
    put_str(b, a.key);
    b.push_back(':');
    switch (a.kind) {
      case TraceArg::Kind::Int: put_int(b, a.i); break;
      case TraceArg::Kind::Num: put_num(b, a.d); break;
      case TraceArg::Kind::Bool: b.append(std::string_view(a.i ? "true" : "false")); break;
      case TraceArg::Kind::Str: put_str(b, a.s); break;
    }
  }
}

// A per-op span as the engine thread leaves it: the forward emits one per op (hundreds
// per step), so the engine thread only copies these numbers and the writer thread
// formats them (a formatted event costs several times the copy).
struct OpRec {
  int64_t t0, t1, tokens;
  double flops, bytes;
  int32_t tid, layer, seqs, decodes;
  uint8_t name_len;
  char name[39];  // op names are short; longer ones are cut
};

void format_op(Buf& b, const OpRec& r, int64_t origin) {
  b.append(std::string_view("{\"name\":"));
  put_str(b, std::string_view(r.name, r.name_len));
  b.append(std::string_view(",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":"));
  put_int(b, r.tid);
  b.append(std::string_view(",\"ts\":"));
  put_us(b, r.t0 - origin);
  b.append(std::string_view(",\"dur\":"));
  put_us(b, std::max<int64_t>(r.t1 - r.t0, 0));
  b.append(std::string_view(",\"args\":{"));
  if (r.layer >= 0) {
    b.append(std::string_view("\"layer\":"));
    put_int(b, r.layer);
    b.push_back(',');
  }
  b.append(std::string_view("\"tokens\":"));
  put_int(b, r.tokens);
  b.push_back(',');
  if (r.seqs >= 0) {
    b.append(std::string_view("\"seqs\":"));
    put_int(b, r.seqs);
    b.append(std::string_view(",\"decodes\":"));
    put_int(b, r.decodes);
    b.push_back(',');
  }
  const double sec = double(std::max<int64_t>(r.t1 - r.t0, 1)) * 1e-9;
  b.append(std::string_view("\"flops\":"));
  put_num(b, r.flops);
  b.append(std::string_view(",\"bytes\":"));
  put_num(b, r.bytes);
  b.append(std::string_view(",\"intensity\":"));
  put_fixed3(b, r.bytes > 0 ? r.flops / r.bytes : 0.0);
  b.append(std::string_view(",\"gflop_per_s\":"));
  put_fixed3(b, r.flops / sec * 1e-9);
  b.append(std::string_view(",\"gb_per_s\":"));
  put_fixed3(b, r.bytes / sec * 1e-9);
  b.append(std::string_view("}}"));
}

// Buffered records: 'T' + u32 length + a formatted event, or 'O' + an OpRec.
constexpr char kText = 'T', kOp = 'O';

// The file and its two buffers. Emitters append a formatted event to `active_` under the
// mutex (a memcpy); a full buffer is swapped with the empty `out_` and handed to the
// writer thread, which owns `out_` while out_busy_ and writes it without the lock: the
// writer never waits for emitters (it would lose that race to busy threads), and memory
// stays at two buffers whatever the event rate.
class Writer {
 public:
  // A trace still open at exit (a command that forgot its TraceSession) is completed.
  ~Writer() { stop(trace_clock_ns()); }

  void start(const std::string& path, const TraceOptions& o) {
    std::lock_guard lk(mu_);
    if (f_) fail("a trace is already being written to {}", path_);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot write trace file {}: {}", path, std::strerror(errno));
    f_ = f;
    path_ = path;
    cap_ = std::max<size_t>(o.buffer_bytes, 1024);
    meta_reserve_ = cap_ / 8;
    hold_ = o.hold_writer;
    flush_ms_ = std::max(o.flush_ms, 1);
    // Touched now, not by the first events: page faults would land inside the traced
    // steps (a few ms per 4 MiB).
    active_.assign(cap_ + meta_reserve_, '\0');
    out_.assign(cap_ + meta_reserve_, '\0');
    active_.clear();
    out_.clear();
    out_busy_.store(false);
    stopping_.store(false);
    stats_ = {};
    io_error_ = false;
    origin_ns_.store(o.origin_ns > 0 ? o.origin_ns : trace_clock_ns(), std::memory_order_relaxed);
    write_raw("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    open_ = true;
    thread_ = std::thread([this] { loop(); });
  }

  int64_t origin() const { return origin_ns_.load(std::memory_order_relaxed); }
  std::string path() {
    std::lock_guard lk(mu_);
    return f_ ? path_ : std::string();
  }

  // Appends one event (a JSON object without separator); false when it was dropped.
  // Metadata (track names) may use a reserve beyond the buffer's capacity: rare, and
  // without it a busy thread's track would stay unnamed.
  bool emit(const Buf& ev, bool meta = false) {
    const auto len = uint32_t(ev.size());
    return append(kText, &len, sizeof len, ev.data(), ev.size(), meta);
  }
  bool emit_op(const OpRec& r) { return append(kOp, &r, sizeof r, nullptr, 0, false); }

 private:
  bool append(char kind, const void* a, size_t na, const char* b, size_t nb, bool meta) {
    const size_t n = 1 + na + nb;
    bool handed = false;
    {
      std::lock_guard lk(mu_);
      if (!open_) return false;
      if (active_.size() + n > cap_ && !hold_ && !out_busy_.load(std::memory_order_acquire)) {
        // Hand the full buffer to the writer and continue in the empty one.
        std::swap(active_, out_);
        out_busy_.store(true, std::memory_order_release);
        handed = true;
      }
      if (active_.size() + n > cap_ + (meta ? meta_reserve_ : 0)) {
        ++stats_.dropped;
        return false;
      }
      active_.push_back(kind);
      active_.append(static_cast<const char*>(a), na);
      active_.append(b, nb);
      ++stats_.events;
    }
    if (handed) wake_.release();
    return true;
  }

 public:
  // Writes what is buffered and the footer with the drop count; closes the file.
  TraceStats stop(int64_t end_ns) {
    {
      std::lock_guard lk(mu_);
      if (!f_) return {};
      open_ = false;
    }
    stopping_.store(true, std::memory_order_release);
    wake_.release();
    if (thread_.joinable()) thread_.join();
    // The writer has drained out_; nobody else touches the buffers now.
    if (out_busy_.load()) write_records(out_);
    write_records(active_);
    Buf b;
    fmt::format_to(fmt::appender(b),
                   "{{\"name\":\"trace_dropped_events\",\"ph\":\"C\",\"pid\":{},\"tid\":0,\"ts\":", kEnginePid);
    put_us(b, std::max<int64_t>(end_ns - origin(), 0));
    fmt::format_to(fmt::appender(b),
                   ",\"args\":{{\"dropped\":{}}}}}\n],\"otherData\":{{\"writer\":\"ridge\",\"events\":{},"
                   "\"dropped_events\":{}}}}}\n",
                   stats_.dropped, stats_.events, stats_.dropped);
    write_raw(std::string_view(b.data(), b.size()));
    if (std::fclose(f_) != 0) io_error_ = true;
    f_ = nullptr;
    std::string().swap(active_);  // give the memory back
    std::string().swap(out_);
    TraceStats s = stats_;
    s.bytes = bytes_;
    s.io_error = io_error_;
    bytes_ = 0;
    return s;
  }

 private:
  // Writer thread (or start/stop while it does not run).
  void write_raw(std::string_view s) {
    if (s.empty()) return;
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size()) io_error_ = true;
    bytes_ += int64_t(s.size());
  }

  // Formats the records into JSON lines and writes them.
  void write_records(const std::string& recs) {
    const int64_t origin = this->origin();
    text_.clear();
    for (size_t i = 0; i < recs.size();) {
      const char kind = recs[i++];
      if (kind == kText) {
        uint32_t len;
        std::memcpy(&len, recs.data() + i, sizeof len);
        i += sizeof len;
        text_.append(recs.data() + i, recs.data() + i + len);
        i += len;
      } else {
        OpRec r;
        std::memcpy(&r, recs.data() + i, sizeof r);
        i += sizeof r;
        format_op(text_, r, origin);
      }
      text_.append(std::string_view(",\n"));
      if (text_.size() >= (size_t(1) << 20)) {
        write_raw(std::string_view(text_.data(), text_.size()));
        text_.clear();
      }
    }
    write_raw(std::string_view(text_.data(), text_.size()));
    text_.clear();
  }

  void loop() {
    for (;;) {
      (void)wake_.try_acquire_for(std::chrono::milliseconds(flush_ms_));
      const bool stopping = stopping_.load(std::memory_order_acquire);
      if (hold_ && !stopping) continue;
      if (!hold_ && !out_busy_.load(std::memory_order_acquire)) {
        // The periodic flush. When emitters hold the lock they are busy and will hand
        // over full buffers themselves: no need to queue behind them. out_busy_ is read
        // again under the lock: an emitter may have handed over a full buffer since the
        // check above, and swapping then would put its older events back in active_,
        // to be written after the newer ones.
        std::unique_lock lk(mu_, std::try_to_lock);
        if (lk.owns_lock() && !out_busy_.load(std::memory_order_relaxed) && !active_.empty()) {
          std::swap(active_, out_);
          out_busy_.store(true, std::memory_order_release);
        }
      }
      if (out_busy_.load(std::memory_order_acquire)) {
        write_records(out_);
        std::fflush(f_);
        out_.clear();
        out_busy_.store(false, std::memory_order_release);
      }
      if (stopping) return;
    }
  }

  std::mutex mu_;  // active_, open_, stats_; out_ while !out_busy_
  std::counting_semaphore<64> wake_{0};  // a buffer was handed over, or stop
  std::FILE* f_ = nullptr;
  std::string path_;
  std::string active_, out_;
  Buf text_;  // writer thread: formatted JSON on its way to the file (up to 1 MiB)
  size_t cap_ = 0, meta_reserve_ = 0;
  bool hold_ = false, open_ = false;
  std::atomic<bool> out_busy_{false}, stopping_{false};
  int flush_ms_ = 200;
  std::atomic<int64_t> origin_ns_{0};  // read by emitters without the lock
  int64_t bytes_ = 0;     // writer thread, then stop()
  bool io_error_ = false;  // writer thread, then stop()
  TraceStats stats_;
  std::thread thread_;
};

Writer g_writer;
std::atomic<uint64_t> g_generation{0};  // one per trace: thread names are written once per trace
std::atomic<int32_t> g_next_tid{1};

struct ThreadTrack {
  int32_t tid = 0;
  uint64_t gen = 0;
  std::string name;
};
thread_local ThreadTrack t_track;

struct BatchShape {
  int32_t seqs = -1;  // -1: no engine step set it (a forward run on its own)
  int32_t decodes = 0;
};
thread_local BatchShape t_batch;

// Event prefix up to and including "ts":..., for a track.
void head(Buf& b, std::string_view name, std::string_view cat, char ph, int pid, int64_t tid, int64_t t_ns) {
  b.append(std::string_view("{\"name\":"));
  put_str(b, name);
  if (!cat.empty()) {
    b.append(std::string_view(",\"cat\":"));
    put_str(b, cat);
  }
  const char ph_field[] = {',', '"', 'p', 'h', '"', ':', '"', ph, '"'};
  b.append(ph_field, ph_field + sizeof ph_field);
  b.append(std::string_view(",\"pid\":"));
  put_int(b, pid);
  b.append(std::string_view(",\"tid\":"));
  put_int(b, tid);
  b.append(std::string_view(",\"ts\":"));
  put_us(b, t_ns - g_writer.origin());
}

void put_dur(Buf& b, int64_t t0, int64_t t1) {
  b.append(std::string_view(",\"dur\":"));
  put_us(b, std::max<int64_t>(t1 - t0, 0));
}

void emit_meta(std::string_view what, int pid, int64_t tid, TraceArgs args) {
  Buf b;
  b.append(std::string_view("{\"name\":"));
  put_str(b, what);
  fmt::format_to(fmt::appender(b), ",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{", pid, tid);
  put_arg_body(b, args);
  b.append(std::string_view("}}"));
  g_writer.emit(b, /*meta=*/true);
}

void emit_thread_name(int32_t tid, const std::string& name) {
  if (name.empty()) emit_meta("thread_name", kEnginePid, tid, {{"name", fmt::format("thread {}", tid)}});
  else emit_meta("thread_name", kEnginePid, tid, {{"name", name}});
  emit_meta("thread_sort_index", kEnginePid, tid, {{"sort_index", tid}});
}

// The calling thread's tid; names its track on its first event of this trace.
int32_t thread_tid() {
  ThreadTrack& t = t_track;
  if (t.tid == 0) t.tid = g_next_tid.fetch_add(1);
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (t.gen != gen) {
    t.gen = gen;
    emit_thread_name(t.tid, t.name);
  }
  return t.tid;
}

// The args object (pre-rendered extra first, then the typed args), the closing brace,
// and the event into the writer.
void close_event(Buf& b, TraceArgs args, std::string_view extra_args) {
  if (args.size() || !extra_args.empty()) {
    b.append(std::string_view(",\"args\":{"));
    b.append(extra_args);
    if (args.size() && !extra_args.empty()) b.push_back(',');
    put_arg_body(b, args);
    b.push_back('}');
  }
  b.push_back('}');
  g_writer.emit(b);
}

void emit_x(std::string_view name, std::string_view cat, int pid, int64_t tid, int64_t t0, int64_t t1, TraceArgs args,
            std::string_view extra_args = {}) {
  Buf b;
  head(b, name, cat, 'X', pid, tid, t0);
  put_dur(b, t0, t1);
  close_event(b, args, extra_args);
}

void emit_i(std::string_view name, std::string_view cat, int pid, int64_t tid, int64_t t, TraceArgs args,
            std::string_view extra_args = {}) {
  Buf b;
  head(b, name, cat, 'i', pid, tid, t);
  b.append(std::string_view(",\"s\":\"t\""));
  close_event(b, args, extra_args);
}

std::string arg_body(TraceArgs args) {
  Buf b;
  put_arg_body(b, args);
  return fmt::to_string(b);
}

// Per-request state: the "request" span's start and args, the open state span.
class Requests {
 public:
  void begin(int64_t id, int64_t t, TraceArgs args) {
    std::lock_guard lk(mu_);
    Req& r = get(id, t);
    r.t_begin = t;
    r.begin_args = arg_body(args);
    open(r, "queued", t, {});
  }

  void arrival(int64_t id, int64_t t) {
    std::lock_guard lk(mu_);
    auto it = reqs_.find(id);
    if (it == reqs_.end()) return;  // ended already (max_tokens 0)
    Req& r = it->second;
    if (t < r.t_begin) {
      if (r.state == "queued" && r.t_state == r.t_begin) r.t_state = t;
      r.t_begin = t;
    }
  }

  void state(int64_t id, std::string_view st, int64_t t, TraceArgs args) {
    std::lock_guard lk(mu_);
    Req& r = get(id, t);
    close(id, r, t);
    if (!st.empty()) open(r, st, t, args);
  }

  void span(int64_t id, std::string_view name, int64_t t0, int64_t t1, TraceArgs args) {
    std::lock_guard lk(mu_);
    Req& r = get(id, t0);
    close(id, r, t0);
    emit_x(name, "request", kRequestPid, kRequestTidBase + id, t0, t1, args);
  }

  void decode(int64_t id, int64_t t) {
    std::lock_guard lk(mu_);
    Req& r = get(id, t);
    if (r.state != "decode") {
      close(id, r, t);
      open(r, "decode", t, {});
    }
    ++r.count;
  }

  // May follow the request's end (the API layer sees a last token after the engine
  // finished it): it opens no state then.
  void instant(int64_t id, std::string_view name, TraceArgs args) {
    std::lock_guard lk(mu_);
    emit_i(name, "request", kRequestPid, kRequestTidBase + id, trace_clock_ns(), args);
  }

  void note_end(int64_t id, std::string_view reason, std::string_view cause) {
    std::lock_guard lk(mu_);
    auto it = reqs_.find(id);
    if (it == reqs_.end()) return;  // already ended
    it->second.end_reason = reason;
    it->second.end_cause = cause;
  }

  void end(int64_t id, std::string_view reason, TraceArgs args) {
    std::lock_guard lk(mu_);
    end_locked(id, reason, args, trace_clock_ns());
  }

  // The trace closes: requests still open end here.
  void end_all(int64_t t) {
    std::lock_guard lk(mu_);
    while (!reqs_.empty()) end_locked(reqs_.begin()->first, "unfinished", {}, t);
  }

 private:
  struct Req {
    int64_t t_begin = 0;
    std::string begin_args;
    std::string state;  // open state span ("" when none)
    int64_t t_state = 0;
    std::string state_args;
    int64_t count = 0;  // decode steps in the open "decode" span
    std::string end_reason, end_cause;
  };

  Req& get(int64_t id, int64_t t) {
    auto [it, fresh] = reqs_.try_emplace(id);
    if (fresh) {
      it->second.t_begin = t;
      const int64_t tid = kRequestTidBase + id;
      emit_meta("thread_name", kRequestPid, tid, {{"name", fmt::format("request {}", id)}});
      emit_meta("thread_sort_index", kRequestPid, tid, {{"sort_index", id}});
    }
    return it->second;
  }

  static void open(Req& r, std::string_view st, int64_t t, TraceArgs args) {
    r.state = st;
    r.t_state = t;
    r.state_args = arg_body(args);
    r.count = 0;
  }

  static void close(int64_t id, Req& r, int64_t t) {
    if (r.state.empty()) return;
    if (r.state == "decode") {
      emit_x(r.state, "request", kRequestPid, kRequestTidBase + id, r.t_state, t, {{"tokens", r.count}});
    } else {
      emit_x(r.state, "request", kRequestPid, kRequestTidBase + id, r.t_state, t, {}, r.state_args);
    }
    r.state.clear();
  }

  void end_locked(int64_t id, std::string_view reason, TraceArgs args, int64_t t) {
    get(id, t);  // a request the trace saw no beginning of still gets its track
    auto it = reqs_.find(id);
    Req& r = it->second;
    close(id, r, t);
    const std::string why = r.end_reason.empty() ? std::string(reason) : r.end_reason;
    const int64_t tid = kRequestTidBase + id;
    if (r.end_cause.empty()) emit_i("finished", "request", kRequestPid, tid, t, {{"reason", why}});
    else emit_i("finished", "request", kRequestPid, tid, t, {{"reason", why}, {"cause", r.end_cause}});
    // 1 ns early: the parent of a "queued" span that starts at the same instant.
    std::string extra = r.begin_args;
    if (!extra.empty()) extra += ',';
    Buf b;
    put_arg_body(b, {{"reason", why}});
    extra.append(b.data(), b.size());
    emit_x("request", "request", kRequestPid, tid, r.t_begin - 1, t, args, extra);
    reqs_.erase(it);
  }

  std::mutex mu_;
  std::unordered_map<int64_t, Req> reqs_;
};

Requests g_requests;

}  // namespace

int64_t trace_clock_ns() {
  return int64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void trace_start(const std::string& path, const TraceOptions& o) {
  g_writer.start(path, o);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  emit_meta("process_name", kEnginePid, 0, {{"name", o.process_name}});
  emit_meta("process_sort_index", kEnginePid, 0, {{"sort_index", 1}});
  emit_meta("process_name", kRequestPid, 0, {{"name", "requests"}});
  emit_meta("process_sort_index", kRequestPid, 0, {{"sort_index", 2}});
  detail::g_trace_on.store(true, std::memory_order_release);
}

std::string trace_path() { return trace_on() ? g_writer.path() : std::string(); }
int64_t trace_origin_ns() { return trace_on() ? g_writer.origin() : 0; }

TraceStats trace_stop() {
  const int64_t t = trace_clock_ns();
  g_requests.end_all(t);
  detail::g_trace_on.store(false, std::memory_order_release);
  return g_writer.stop(t);
}

void trace_op(std::string_view name, int64_t t0_ns, int64_t t1_ns, int32_t layer, int64_t tokens, double flops,
              double bytes) {
  if (!trace_on()) return;
  OpRec r;
  r.t0 = t0_ns;
  r.t1 = t1_ns;
  r.tokens = tokens;
  r.flops = flops;
  r.bytes = bytes;
  r.tid = thread_tid();
  r.layer = layer;
  r.seqs = t_batch.seqs;
  r.decodes = t_batch.decodes;
  r.name_len = uint8_t(std::min(name.size(), sizeof r.name));
  std::memcpy(r.name, name.data(), r.name_len);
  g_writer.emit_op(r);
}

void trace_span(std::string_view name, std::string_view cat, int64_t t0_ns, int64_t t1_ns, TraceArgs args) {
  if (!trace_on()) return;
  emit_x(name, cat, kEnginePid, thread_tid(), t0_ns, t1_ns, args);
}

void trace_instant(std::string_view name, std::string_view cat, TraceArgs args) {
  if (!trace_on()) return;
  emit_i(name, cat, kEnginePid, thread_tid(), trace_clock_ns(), args);
}

void trace_counter(std::string_view name, TraceArgs args) {
  if (!trace_on()) return;
  Buf b;
  head(b, name, {}, 'C', kEnginePid, 0, trace_clock_ns());
  b.append(std::string_view(",\"args\":{"));
  put_arg_body(b, args);
  b.append(std::string_view("}}"));
  g_writer.emit(b);
}

void trace_thread_name(std::string_view name) {
  if (!trace_on()) return;
  ThreadTrack& t = t_track;
  if (t.name == name && t.gen == g_generation.load(std::memory_order_acquire)) return;
  t.name = name;
  t.gen = 0;  // (re)written by thread_tid
  thread_tid();
}

void trace_batch(int32_t seqs, int32_t decodes) { t_batch = {seqs, decodes}; }

void trace_req_begin(int64_t id, int64_t t_ns, TraceArgs args) {
  if (trace_on()) g_requests.begin(id, t_ns, args);
}
void trace_req_arrival(int64_t id, int64_t t_ns) {
  if (trace_on()) g_requests.arrival(id, t_ns);
}
void trace_req_state(int64_t id, std::string_view state, int64_t t_ns, TraceArgs args) {
  if (trace_on()) g_requests.state(id, state, t_ns, args);
}
void trace_req_span(int64_t id, std::string_view name, int64_t t0_ns, int64_t t1_ns, TraceArgs args) {
  if (trace_on()) g_requests.span(id, name, t0_ns, t1_ns, args);
}
void trace_req_decode(int64_t id, int64_t t_ns) {
  if (trace_on()) g_requests.decode(id, t_ns);
}
void trace_req_instant(int64_t id, std::string_view name, TraceArgs args) {
  if (trace_on()) g_requests.instant(id, name, args);
}
void trace_req_note_end(int64_t id, std::string_view reason, std::string_view cause) {
  if (trace_on()) g_requests.note_end(id, reason, cause);
}
void trace_req_end(int64_t id, std::string_view reason, TraceArgs args) {
  if (trace_on()) g_requests.end(id, reason, args);
}

#else  // RIDGE_TRACE

void trace_start(const std::string& path, const TraceOptions&) {
  fail("--trace {}: this ridge was built without the tracer (cmake -DRIDGE_TRACE=OFF)", path);
}
TraceStats trace_stop() { return {}; }
std::string trace_path() { return {}; }
int64_t trace_origin_ns() { return 0; }

#endif  // RIDGE_TRACE

TraceSession::TraceSession(const std::optional<std::string>& path, std::string label) : label_(std::move(label)) {
  if (!path) return;
  if (path->empty()) fail("--trace needs a file name");
  trace_start(*path);
  path_ = *path;
  trace_thread_name("main");
}

TraceSession::~TraceSession() {
  if (path_.empty()) return;
  const TraceStats s = trace_stop();
  std::fprintf(stderr, "%s: trace %s: %lld events, %lld dropped%s\n", label_.c_str(), path_.c_str(),
               static_cast<long long>(s.events), static_cast<long long>(s.dropped),
               s.io_error ? " (write error: the file is incomplete)" : "");
}

}  // namespace ridge::perf
