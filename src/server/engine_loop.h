// The engine's own thread. HTTP handlers submit Jobs (one per API request, one engine
// sequence per choice); the loop adds them to the engine, steps it while there is work,
// turns each new token into text (UTF-8-safe streaming detokenization, stop strings held
// back and never emitted), and appends it to the job's pending output, then notifies the
// job's consumer. It never waits on a consumer: a slow client's output accumulates in its
// job (bounded by its max_tokens, and by max_pending_bytes, past which it is aborted).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/request_trace.h"
#include "server/auto_tune.h"
#include "server/kv_events_publisher.h"

namespace ridge {
class Tokenizer;
class Metrics;
}

namespace ridge::server {

// One generated token as the API reports it (logprobs).
struct TokenOut {
  int32_t id;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  int32_t rank = 0;  // 1 + the tokens more likely than it (0: not known)
};

struct ChoiceSpec {
  std::vector<int32_t> prompt;
  RequestParams params;
  std::vector<std::string> stop;  // stop strings: the text ends before the first one
  bool show_control = false;      // control tokens' text in the output (a tool-call parser reads it)
};

// What the consumer reads: text and tokens not yet taken, and the final state.
struct ChoiceState {
  std::string text;                // new text since the last take
  std::vector<TokenOut> tokens;    // new tokens since the last take (when logprobs are on)
  // The prompt's tokens after the first, scored (params.prompt_logprobs), set once with
  // the choice's first output.
  std::vector<TokenOut> prompt_logprobs;
  bool prompt_scored = false;
  bool finished = false;
  std::string finish_reason;       // "stop", "length", "abort"
  int32_t n_generated = 0;
  int32_t n_cached = 0;            // prompt tokens served by the prefix cache
  // Attribution (set when finished): shares of the steps it rode in, by kind of work.
  double prefill_s = 0, decode_s = 0, recompute_s = 0;
  int32_t preemptions = 0;
  int32_t spec_draft_tokens = 0, spec_accepted_tokens = 0;  // speculative decoding
};

struct Job {
  std::vector<ChoiceSpec> choices;
  double arrival_s = 0;            // steady clock, set by submit

  // Shared between the loop (writer) and the consumer (reader).
  std::mutex mu;
  std::vector<ChoiceState> state;  // [choices]
  std::string error;               // set (and every choice finished) when the engine refused it
  double queued_s = -1;            // arrival to first scheduled (set once scheduled)
  std::atomic<int64_t> pending_bytes{0};  // output not yet taken, for the slow-client bound
  std::function<void()> notify;    // set by the consumer before submit
  std::atomic<bool> cancelled{false};

  bool all_finished() const {
    for (const auto& c : state)
      if (!c.finished) return false;
    return true;
  }
};

struct LoopOptions {
  int32_t max_waiting = 1024;          // requests waiting beyond this are refused (503)
  int64_t max_pending_bytes = 16 << 20;  // output a client has not read; beyond: abort
  // --record: every finished choice is appended to this trace (engine/request_trace.h).
  std::shared_ptr<TraceRecorder> recorder;
  AutoTuneOptions auto_tune;  // --auto-tune
  // --kv-events-endpoint: the prefix cache's events, published after each step.
  std::shared_ptr<KvEventsPublisher> kv_events;
};

class EngineLoop {
 public:
  EngineLoop(Engine& engine, const Tokenizer& tok, Metrics& metrics, const LoopOptions& o);
  ~EngineLoop();

  // Queues the job; false when the waiting queue is full or the loop is shutting down.
  bool submit(const std::shared_ptr<Job>& job);
  // The consumer is gone: abort the job's sequences (any thread).
  void cancel(const std::shared_ptr<Job>& job);
  // Finish in-flight jobs for up to grace_s seconds, then abort the rest.
  void shutdown(double grace_s);
  // No job in flight or queued.
  bool idle() const { return n_jobs_.load() == 0; }
  int32_t n_waiting() const { return n_waiting_.load(); }

 private:
  struct Active;
  void run();
  void admit(const std::shared_ptr<Job>& job);
  void on_token(Active& a, size_t c, const TokenEvent& ev);
  void finish_choice(Active& a, size_t c, const std::string& reason, bool abort_seq);
  void finish_job_if_done(Active& a);
  void abort_job(Active& a);
  void update_gauges(bool force);
  void publish_kv_events();  // the events the engine recorded since the last call, as one batch

  Engine& engine_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  LoopOptions opt_;

  std::mutex mu_;  // guards inbox_, stopping_, grace_deadline_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> inbox_;
  bool stopping_ = false;     // shutdown: refuse new jobs
  bool exit_ = false;         // destructor: leave the thread
  double grace_deadline_ = 0;
  std::atomic<int32_t> n_jobs_{0}, n_waiting_{0};
  std::atomic<bool> wake_{false};

  std::vector<std::unique_ptr<Active>> active_;  // loop thread only
  std::unordered_map<int64_t, std::pair<Active*, size_t>> by_seq_;  // engine sequence -> (job, choice)
  double last_gauges_s_ = 0;
  KvUsage kv_;  // the last census (update_gauges)
  std::unique_ptr<AutoTuner> tuner_;  // loop thread only
  std::thread thread_;
};

double steady_seconds();

}  // namespace ridge::server
