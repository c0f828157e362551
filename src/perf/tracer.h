// Chrome trace JSON (opens in Perfetto / chrome://tracing). This header is the contract
// the forward pass relies on; tracer.cpp implements it.
//
// With -DRIDGE_TRACE=OFF (CMake) every call here compiles to nothing.
//
// Turning it on: `--trace FILE.json` on `ridge generate`, `ridge serve` and `ridge bench
// throughput` (TraceSession). Not tracing costs one relaxed atomic load per hook
// (trace_on()); the hooks are written `if (perf::trace_on()) ...`.
//
// File: {"displayTimeUnit":"ms","traceEvents":[...],"otherData":{...}}. Events are
// "X" (complete: ts, dur), "i" (instant, thread-scoped: "s":"t"), "C" (counter) and "M"
// (process/thread names, sort order). ts and dur are microseconds with nanosecond
// decimals, from the trace's start on the steady clock (trace_clock_ns()).
//
// Tracks:
//   pid 1 "ridge": one track per thread that emits, tid 1, 2, ... in order of first use,
//     named by trace_thread_name() ("main", "engine loop", "http"), else "thread N".
//   pid 2 "requests": one track per engine sequence (a request, or one choice of an API
//     request with n > 1), tid 1000000 + sequence id, named "request ID", sorted by id.
//     (tids are unique across pids: viewers key threads by tid.)
//
// Events on a thread track (pid 1), category in brackets:
//   step [engine]         X  one Engine::step; args: step, seqs, tokens, prefill_tokens,
//                            decodes, preempted. Children, in order:
//     schedule [engine]   X  the scheduler's decisions (the instants below fall inside
//                            it); args: chunks, preempted, swap_out, swap_in
//     swap [engine]       X  KV copies to/from the swap space (only when there are any);
//                            args: out, in (sequences)
//     forward [engine]    X  the model; args: seqs, tokens. Children: the per-op spans.
//       <op> [op]         X  one op of the forward, named by perf::op_name (token_embd,
//                            attn_norm, attn_qkv, rope_kv, attention, attn_out,
//                            attn_residual, ffn_norm, ffn_gate_up, ffn_act, ffn_down,
//                            ffn_residual, result_norm, output; tp_comm: a split
//                            model's all-reduces, gathers and stage hand-offs, which
//                            include waiting for the other ranks); args: layer (absent for
//                            whole-model ops), tokens, seqs, decodes (the batch shape),
//                            flops, bytes, intensity (flops/byte), gflop_per_s, gb_per_s
//     sample [engine]     X  logits -> tokens (penalties, sampling, logprobs); args: rows
//     postprocess [engine] X stop checks, prefix-cache inserts, finishing; args: finished
//   Parents start 1 ns before their first child: viewers nest spans of equal start by
//   file order, and a parent is written after its children.
//   Scheduler decisions [sched], instants inside "schedule", every one with req (the
//   sequence id):
//     admit          a waiting request starts running; prompt, prefix_hit (tokens the
//                    prefix cache served), chunk (tokens scheduled now), resumed (it was
//                    preempted by recompute before)
//     chunk          a prompt chunk of a running request; tokens, pos (first position),
//                    remaining (prompt tokens after this chunk)
//     defer          waits a step for a first block another sequence is computing
//     blocked        cannot be admitted without preempting; need_blocks, free_blocks
//     preempt        out of KV blocks: reason "out_of_kv_blocks", mode "recompute" or
//                    "swap", blocks, generated, for (the sequence that needed the
//                    blocks); fallback "swap_space_full" when swap was wanted
//     swap_in        a swapped sequence comes back; blocks
//     evict          prefix-cache blocks evicted to make room; blocks
//   Counters (pid 1), once per step: seqs {running, waiting}, kv_blocks {free, used},
//   batch {tokens, seqs}. At the end: trace_dropped_events {dropped}.
//   Server [server] (HTTP thread): submit (instant; choices, prompt_tokens).
//
// Events on a request track (pid 2), category "request":
//   request     X  arrival to finish; args: prompt_tokens, max_tokens, priority, and at
//                  the end generated, prefix_hit, preemptions, reason
//   queued      X  arrival (HTTP submit in serve) to admission
//   prefill     X  one prompt chunk (the forward it ran in); tokens, pos, recompute
//   decode      X  consecutive decode steps; tokens (steps in the span)
//   preempted   X  preempted by recompute until re-admitted; mode, reason
//   swapped     X  swapped out until swapped back in; mode, reason
//   first_token i  the first token reached the caller (generate's loop, the server's
//                  API layer); ttft_ms from arrival. It may follow "finished" when the
//                  first token was also the last.
//   finished    i  reason ("stop", "length", "abort"; "dropped" when the engine was
//                  destroyed first), cause when the server knows one ("stop_string",
//                  "client_disconnect", "shutdown", "slow_client", "refused")
//   A request still open when the trace closes ends with reason "unfinished".
//
// Bounded memory: events are formatted by the thread that emits them into one of two
// fixed-size buffers; a background thread writes a full (or, every flush period, a
// non-empty) buffer to the file while the other fills. When both are full the event is
// dropped and counted: the count ends the file (trace_dropped_events, otherData). Track
// names ("M") may use a reserve of 1/8 of a buffer beyond that, so that a track whose
// first events were dropped still has its name.
#pragma once
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace ridge::perf {

// One event argument: an integer, a number, a bool or a string (copied when formatted).
struct TraceArg {
  enum class Kind : uint8_t { Int, Num, Bool, Str };
  template <std::integral T>
  constexpr TraceArg(std::string_view k, T v)
      : key(k), kind(std::same_as<T, bool> ? Kind::Bool : Kind::Int), i(static_cast<int64_t>(v)) {}
  constexpr TraceArg(std::string_view k, double v) : key(k), kind(Kind::Num), d(v) {}
  constexpr TraceArg(std::string_view k, std::string_view v) : key(k), kind(Kind::Str), s(v) {}
  constexpr TraceArg(std::string_view k, const char* v) : key(k), kind(Kind::Str), s(v) {}
  TraceArg(std::string_view k, const std::string& v) : key(k), kind(Kind::Str), s(v) {}

  std::string_view key;
  Kind kind;
  int64_t i = 0;
  double d = 0;
  std::string_view s;
};
using TraceArgs = std::initializer_list<TraceArg>;

struct TraceOptions {
  size_t buffer_bytes = size_t(4) << 20;  // each of the two buffers
  int flush_ms = 200;                     // the writer's period
  bool hold_writer = false;               // tests: write nothing until trace_stop (forces drops)
  // Another trace's time origin (trace_origin_ns), so that the files of one job's
  // processes on one machine share a time axis; 0: now.
  int64_t origin_ns = 0;
  std::string process_name = "ridge";     // the engine process's name in the viewer
};

struct TraceStats {
  int64_t events = 0;   // written
  int64_t dropped = 0;  // lost to full buffers
  int64_t bytes = 0;    // of the file
  bool io_error = false;
};

// Opens `path` and starts tracing; throws ridge::Error naming the path when it cannot be
// written, when a trace is already open, or when the build has no tracer.
void trace_start(const std::string& path, const TraceOptions& o = {});
// Ends open request tracks, flushes, writes the footer: the file is valid JSON. Safe to
// call when no trace is open (returns zeros).
TraceStats trace_stop();
// The open trace's file and time origin (on trace_clock_ns' clock); empty and 0 when none.
std::string trace_path();
int64_t trace_origin_ns();

// The commands' guard: starts a trace when a path is given and closes it on every exit
// (return or exception), then reports "LABEL: trace FILE: N events, D dropped" on stderr.
class TraceSession {
 public:
  TraceSession(const std::optional<std::string>& path, std::string label);
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;

 private:
  std::string path_, label_;
};

#if RIDGE_TRACE
namespace detail {
extern std::atomic<bool> g_trace_on;
}
// True while a trace is being written: one relaxed atomic load.
inline bool trace_on() { return detail::g_trace_on.load(std::memory_order_relaxed); }
// Monotonic clock in nanoseconds (the trace's time base): steady_clock since its epoch.
int64_t trace_clock_ns();
// A per-op span of the forward pass on the calling thread's track, with its roofline
// accounting as args.
void trace_op(std::string_view name, int64_t t0_ns, int64_t t1_ns, int32_t layer, int64_t tokens, double flops,
              double bytes);

// Thread tracks (pid 1). Spans must nest properly per thread.
void trace_span(std::string_view name, std::string_view cat, int64_t t0_ns, int64_t t1_ns, TraceArgs args = {});
void trace_instant(std::string_view name, std::string_view cat, TraceArgs args = {});
void trace_counter(std::string_view name, TraceArgs args);
// Names the calling thread's track (once per trace; cheap to repeat).
void trace_thread_name(std::string_view name);
// The batch shape the next trace_op calls on this thread report (with their tokens).
void trace_batch(int32_t seqs, int32_t decodes);

// Request tracks (pid 2), keyed by engine sequence id. The tracer remembers each
// request's open state span and closes it when the next state begins.
// A new request at t_ns: opens the "request" span and the "queued" state.
void trace_req_begin(int64_t id, int64_t t_ns, TraceArgs args = {});
// The request arrived earlier than trace_req_begin said (the server's submit time).
void trace_req_arrival(int64_t id, int64_t t_ns);
// Closes the open state at t_ns and opens `state` (none when empty).
void trace_req_state(int64_t id, std::string_view state, int64_t t_ns, TraceArgs args = {});
// A span of its own (a prefill chunk); closes the open state at t0.
void trace_req_span(int64_t id, std::string_view name, int64_t t0_ns, int64_t t1_ns, TraceArgs args = {});
// One decode step starting at t_ns: extends the open "decode" state or opens one.
void trace_req_decode(int64_t id, int64_t t_ns);
void trace_req_instant(int64_t id, std::string_view name, TraceArgs args = {});
// What the next trace_req_end reports instead of the engine's reason (the server knows
// why it aborted a sequence: a stop string, a client that went away).
void trace_req_note_end(int64_t id, std::string_view reason, std::string_view cause);
// Closes the open state, writes "finished" and the enclosing "request" span.
void trace_req_end(int64_t id, std::string_view reason, TraceArgs args = {});
#else
constexpr bool trace_on() { return false; }
inline int64_t trace_clock_ns() { return 0; }
inline void trace_op(std::string_view, int64_t, int64_t, int32_t, int64_t, double, double) {}
inline void trace_span(std::string_view, std::string_view, int64_t, int64_t, TraceArgs = {}) {}
inline void trace_instant(std::string_view, std::string_view, TraceArgs = {}) {}
inline void trace_counter(std::string_view, TraceArgs) {}
inline void trace_thread_name(std::string_view) {}
inline void trace_batch(int32_t, int32_t) {}
inline void trace_req_begin(int64_t, int64_t, TraceArgs = {}) {}
inline void trace_req_arrival(int64_t, int64_t) {}
inline void trace_req_state(int64_t, std::string_view, int64_t, TraceArgs = {}) {}
inline void trace_req_span(int64_t, std::string_view, int64_t, int64_t, TraceArgs = {}) {}
inline void trace_req_decode(int64_t, int64_t) {}
inline void trace_req_instant(int64_t, std::string_view, TraceArgs = {}) {}
inline void trace_req_note_end(int64_t, std::string_view, std::string_view) {}
inline void trace_req_end(int64_t, std::string_view, TraceArgs = {}) {}
#endif

// A span on the calling thread's track from construction to end() (or destruction),
// so a phase is traced by one line at its top instead of a pair of timestamps. The clock
// is read only while tracing. lead_ns starts it that much early, so an enclosing span
// that begins at the same clock reading as its first child still encloses it.
class TraceScope {
 public:
  TraceScope(std::string_view name, std::string_view cat, int64_t lead_ns = 0)
      : name_(name), cat_(cat), t0_(trace_on() ? trace_clock_ns() - lead_ns : kOff) {}
  ~TraceScope() { end(); }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  // Ends the span now with these args (only the first call counts).
  void end(TraceArgs args = {}) {
    if (t0_ == kOff) return;
    trace_span(name_, cat_, t0_, trace_clock_ns(), args);
    t0_ = kOff;
  }

 private:
  static constexpr int64_t kOff = INT64_MIN;
  std::string_view name_, cat_;
  int64_t t0_;
};

}  // namespace ridge::perf
