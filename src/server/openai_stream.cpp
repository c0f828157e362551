// The response side of the OpenAI API: a Job's progress -> SSE chunks or one JSON body,
// in the completions and chat shapes (they differ in object names, delta vs message and
// the logprobs layout).
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "server/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// JSON has no -inf; vLLM reports impossible tokens as -9999.
double finite_lp(float lp) { return lp < -9999.0f ? -9999.0 : double(lp); }

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() & 15];
  return s;
}

// The consumer's notify function arrives after the job may already be running: the loop
// calls this slot, which forwards once a function is installed.
struct NotifySlot {
  std::mutex mu;
  std::function<void()> fn;
  void call() {
    std::lock_guard lk(mu);
    if (fn) fn();
  }
};

class OpenAIStream : public HttpStream {
 public:
  OpenAIStream(ParsedRequest req, std::shared_ptr<Job> job, const ApiContext& ctx, std::function<void()> on_cancel)
      : req_(std::move(req)), job_(std::move(job)), ctx_(ctx), on_cancel_(std::move(on_cancel)) {
    chat_ = req_.endpoint == Endpoint::Chat;
    id_ = random_id(chat_ ? "chatcmpl-" : "cmpl-");
    created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    acc_.resize(req_.choices.size());
    job_->notify = [slot = slot_] { slot->call(); };
  }

  bool sse() const override { return req_.stream; }

  void set_notify(std::function<void()> notify) override {
    std::lock_guard lk(slot_->mu);
    slot_->fn = std::move(notify);
  }

  void cancel() override {
    if (cancelled_) return;
    cancelled_ = true;
    if (on_cancel_) on_cancel_();
  }

  bool drain(std::string& out, int& status) override {
    if (done_) return true;
    std::lock_guard lk(job_->mu);
    if (!job_->error.empty()) {
      done_ = true;
      HttpResponse e = error_response(400, job_->error);
      if (!req_.stream) {
        status = e.status;
        out = e.body;
      } else {
        out += "data: " + e.body + "\n\ndata: [DONE]\n\n";
      }
      return true;
    }
    for (size_t c = 0; c < acc_.size(); ++c) take(c, job_->state[c], out);
    if (!job_->all_finished()) return false;
    done_ = true;
    if (req_.stream) {
      if (req_.ridge_timings) {
        json t = chunk_base();
        t["choices"] = json::array();
        t["ridge_timings"] = timings();
        out += "data: " + dump(t) + "\n\n";
      }
      if (req_.include_usage) {
        json u = chunk_base();
        u["choices"] = json::array();
        u["usage"] = usage();
        out += "data: " + dump(u) + "\n\n";
      }
      out += "data: [DONE]\n\n";
    } else {
      out = dump(full_response());
    }
    return true;
  }

 private:
  struct CallOut {
    std::string id, name, arguments;
  };
  struct Acc {
    std::string text;
    std::string reasoning;
    std::vector<CallOut> calls;
    std::unique_ptr<ChatOutputParser> parser;  // chat with tools or thinking (req_.parse_output)
    std::vector<TokenOut> tokens;
    size_t text_offset = 0;  // completions logprobs: where the next token's text starts
    bool started = false;    // role (chat) sent
    bool echoed = false;     // completions: the prompt's text (echo) sent
    bool prompt_lp_taken = false;
    std::vector<TokenOut> prompt_lp;  // the prompt's tokens 1.., scored (non-streamed responses)
    bool final_sent = false;
    std::string finish_reason;
  };

  // Moves choice c's new output out of the job (under job_->mu) into SSE chunks or the
  // accumulated response.
  void take(size_t c, ChoiceState& st, std::string& out) {
    Acc& a = acc_[c];
    std::string text = std::move(st.text);
    std::vector<TokenOut> toks = std::move(st.tokens);
    st.text.clear();
    st.tokens.clear();
    job_->pending_bytes.store(0);
    // The prompt's logprobs come with the choice's first output (the loop sets them before
    // any text); echo waits for them when they are asked for, so its text and its tokens'
    // logprobs go out together.
    const bool want_plp = req_.prompt_logprobs >= 0 || (req_.echo && req_.logprobs >= 0);
    std::vector<TokenOut> plp;
    bool plp_now = false;
    if (want_plp && !a.prompt_lp_taken && (st.prompt_scored || st.finished)) {
      plp = std::move(st.prompt_logprobs);
      a.prompt_lp_taken = plp_now = true;
    }
    bool echo_now = false;
    if (!chat_ && req_.echo && !a.echoed && (req_.logprobs < 0 || a.prompt_lp_taken)) {
      text = req_.prompt_texts[c / size_t(req_.n)] + text;
      a.echoed = echo_now = true;
    }
    const std::vector<int32_t>& prompt = req_.prompts[c / size_t(req_.n)];
    const bool finish_now = st.finished && !a.final_sent;
    OutputDelta d;
    if (chat_ && req_.parse_output) {
      if (!a.parser) a.parser = std::make_unique<ChatOutputParser>(req_.output);
      d = a.parser->feed(text);
      if (finish_now) d.append(a.parser->finish());
    } else {
      d.content = std::move(text);
    }
    if (finish_now) {
      a.finish_reason = st.finish_reason;
      // A reply that called tools ends for the client to run them (OpenAI's reason); one cut
      // short by max_tokens says so.
      if (a.parser && a.parser->n_calls() > 0 && st.finish_reason == "stop") a.finish_reason = "tool_calls";
    }
    for (const ToolCallDelta& tc : d.calls) {
      if (size_t(tc.index) >= a.calls.size()) a.calls.resize(size_t(tc.index) + 1);
      CallOut& co = a.calls[size_t(tc.index)];
      if (!tc.id.empty()) co.id = tc.id, co.name = tc.name;
      co.arguments += tc.arguments;
    }
    if (!req_.stream) {
      a.started = true;
      if (plp_now) a.prompt_lp = std::move(plp);
      a.text += d.content;
      a.reasoning += d.reasoning;
      a.tokens.insert(a.tokens.end(), std::make_move_iterator(toks.begin()), std::make_move_iterator(toks.end()));
      a.final_sent |= st.finished;
      return;
    }
    if (chat_ && !a.started) {
      json ch = {{"index", c}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
      emit(ch, out);
    }
    a.started = true;
    if (!d.empty() || !toks.empty() || finish_now || plp_now) {
      json ch = {{"index", c}};
      if (plp_now && req_.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(plp);
      if (chat_) {
        json delta = json::object();
        if (!d.content.empty() || (!a.parser && !(finish_now && toks.empty()))) delta["content"] = d.content;
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.calls.empty()) {
          json calls = json::array();
          for (const ToolCallDelta& tc : d.calls) {
            json call = {{"index", tc.index}};
            if (!tc.id.empty()) {
              call["id"] = tc.id;
              call["type"] = "function";
              call["function"] = {{"name", tc.name}, {"arguments", tc.arguments}};
            } else {
              call["function"] = {{"arguments", tc.arguments}};
            }
            calls.push_back(std::move(call));
          }
          delta["tool_calls"] = std::move(calls);
        }
        if (delta.empty() && !finish_now) delta["content"] = "";
        ch["delta"] = std::move(delta);
        ch["logprobs"] = req_.logprobs >= 0 && !toks.empty() ? chat_logprobs(toks) : json(nullptr);
      } else {
        ch["text"] = d.content;
        if (echo_now && req_.logprobs >= 0) {  // the prompt's tokens first, the first without a logprob
          json lp = completion_logprobs(prompt_entries(prompt, plp), a);
          a.text_offset = req_.prompt_texts[c / size_t(req_.n)].size();
          json gen = completion_logprobs(toks, a);
          for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (auto& v : gen[k]) lp[k].push_back(std::move(v));
          ch["logprobs"] = std::move(lp);
        } else {
          ch["logprobs"] = req_.logprobs >= 0 ? completion_logprobs(toks, a) : json(nullptr);
        }
      }
      ch["finish_reason"] = finish_now ? json(a.finish_reason) : json(nullptr);
      emit(ch, out);
    }
    if (finish_now) a.final_sent = true;
  }

  json chunk_base() const {
    json j = {{"id", id_}, {"object", chat_ ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
              {"model", ctx_.model_name}};
    return j;
  }

  void emit(const json& choice, std::string& out) const {
    json j = chunk_base();
    j["choices"] = json::array({choice});
    if (req_.include_usage) j["usage"] = nullptr;
    out += "data: " + dump(j) + "\n\n";
  }

  json usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (const auto& p : req_.prompts) prompt += int64_t(p.size());
    for (size_t c = 0; c < job_->state.size(); ++c) {
      completion += job_->state[c].n_generated;
      if (c % size_t(req_.n) == 0) cached += job_->state[c].n_cached;
    }
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  // Where the request's time went: queued, then its share of every batched step it rode
  // in, by kind of work (ridge's extension, asked for with "ridge_timings": true).
  json timings() const {
    json choices = json::array();
    for (size_t c = 0; c < job_->state.size(); ++c) {
      const ChoiceState& st = job_->state[c];
      json ch = {{"index", c}, {"prefill_ms", 1e3 * st.prefill_s}, {"decode_ms", 1e3 * st.decode_s},
                 {"recompute_ms", 1e3 * st.recompute_s}, {"preemptions", st.preemptions},
                 {"cached_tokens", st.n_cached}, {"generated_tokens", st.n_generated}};
      if (st.spec_draft_tokens > 0)
        ch["speculative"] = {{"draft_tokens", st.spec_draft_tokens},
                             {"accepted_tokens", st.spec_accepted_tokens},
                             {"acceptance_rate", double(st.spec_accepted_tokens) / st.spec_draft_tokens}};
      choices.push_back(std::move(ch));
    }
    return {{"queued_ms", job_->queued_s >= 0 ? json(1e3 * job_->queued_s) : json(nullptr)},
            {"choices", std::move(choices)}};
  }

  json full_response() {
    json choices = json::array();
    for (size_t c = 0; c < acc_.size(); ++c) {
      Acc& a = acc_[c];
      json ch = {{"index", c}};
      if (chat_) {
        const bool no_answer = a.text.empty() && (!a.calls.empty() || !a.reasoning.empty());
        json msg = {{"role", "assistant"}, {"content", no_answer ? json(nullptr) : json(a.text)}};
        if (req_.parse_output && req_.output.think) msg["reasoning_content"] = a.reasoning.empty() ? json(nullptr) : json(a.reasoning);
        else if (!a.reasoning.empty()) msg["reasoning_content"] = a.reasoning;
        if (!a.calls.empty()) {
          json calls = json::array();
          for (const CallOut& co : a.calls)
            calls.push_back({{"id", co.id}, {"type", "function"}, {"function", {{"name", co.name}, {"arguments", co.arguments}}}});
          msg["tool_calls"] = std::move(calls);
        }
        ch["message"] = std::move(msg);
        ch["logprobs"] = req_.logprobs >= 0 ? chat_logprobs(a.tokens) : json(nullptr);
      } else {
        ch["text"] = a.text;
        Acc tmp;
        json lp = json::object();
        if (req_.echo && req_.logprobs >= 0) lp = completion_logprobs(prompt_entries(req_.prompts[c / size_t(req_.n)], a.prompt_lp), tmp);
        if (req_.echo) tmp.text_offset = req_.prompt_texts[c / size_t(req_.n)].size();
        if (req_.logprobs >= 0) {
          json gen = completion_logprobs(a.tokens, tmp);
          if (lp.empty()) lp = std::move(gen);
          else
            for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
              for (auto& v : gen[k]) lp[k].push_back(std::move(v));
        }
        ch["logprobs"] = req_.logprobs >= 0 ? std::move(lp) : json(nullptr);
        if (req_.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(a.prompt_lp);
      }
      ch["finish_reason"] = a.finish_reason;
      choices.push_back(std::move(ch));
    }
    json r = {{"id", id_}, {"object", chat_ ? "chat.completion" : "text_completion"}, {"created", created_},
              {"model", ctx_.model_name}, {"choices", std::move(choices)}, {"usage", usage()}};
    // vLLM puts a chat request's prompt logprobs beside its choices (one prompt for all).
    if (chat_ && req_.prompt_logprobs >= 0 && !acc_.empty()) r["prompt_logprobs"] = vllm_prompt_logprobs(acc_[0].prompt_lp);
    if (req_.ridge_timings) r["ridge_timings"] = timings();
    return r;
  }

  // The prompt as logprob entries: its first token has none (logprob NaN marks it).
  static std::vector<TokenOut> prompt_entries(const std::vector<int32_t>& prompt, const std::vector<TokenOut>& plp) {
    std::vector<TokenOut> e;
    if (prompt.empty()) return e;
    e.push_back({prompt[0], std::numeric_limits<float>::quiet_NaN(), {}, 0});
    e.insert(e.end(), plp.begin(), plp.end());
    return e;
  }

  // vLLM's form: null for the first token, then {token id: {logprob, rank, decoded_token}}
  // with the prompt's token and its most likely alternatives.
  json vllm_prompt_logprobs(const std::vector<TokenOut>& plp) const {
    json out = json::array({nullptr});
    for (const TokenOut& t : plp) {
      json m = json::object();
      m[std::to_string(t.id)] = {{"logprob", finite_lp(t.logprob)}, {"rank", t.rank},
                                 {"decoded_token", token_text(*ctx_.tok, t.id)}};
      int32_t rank = 0;
      for (auto [id, lp] : t.top) {
        ++rank;
        if (!m.contains(std::to_string(id)))
          m[std::to_string(id)] = {{"logprob", finite_lp(lp)}, {"rank", rank}, {"decoded_token", token_text(*ctx_.tok, id)}};
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  json bytes_of(const std::string& s) const {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(int(ch));
    return b;
  }

  json chat_logprobs(const std::vector<TokenOut>& toks) const {
    json content = json::array();
    for (const TokenOut& t : toks) {
      json top = json::array();
      for (auto [id, lp] : t.top)
        top.push_back({{"token", token_text(*ctx_.tok, id)}, {"logprob", finite_lp(lp)},
                       {"bytes", bytes_of(ctx_.tok->piece_bytes(id))}});
      content.push_back({{"token", token_text(*ctx_.tok, t.id)}, {"logprob", finite_lp(t.logprob)},
                         {"bytes", bytes_of(ctx_.tok->piece_bytes(t.id))}, {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }

  // The legacy shape: parallel lists, top alternatives as {text: logprob} (the sampled
  // token always among them, as OpenAI documents).
  json completion_logprobs(const std::vector<TokenOut>& toks, Acc& a) const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    for (const TokenOut& t : toks) {
      const std::string text = token_text(*ctx_.tok, t.id);
      tokens.push_back(text);
      if (std::isnan(t.logprob)) {  // a prompt's first token: nothing came before it
        lps.push_back(nullptr);
        tops.push_back(nullptr);
        offs.push_back(a.text_offset);
        a.text_offset += text.size();
        continue;
      }
      lps.push_back(finite_lp(t.logprob));
      json top = json::object();
      for (auto [id, lp] : t.top) {
        const std::string k = token_text(*ctx_.tok, id);
        if (!top.contains(k)) top[k] = finite_lp(lp);
      }
      if (!top.contains(text)) top[text] = finite_lp(t.logprob);
      tops.push_back(std::move(top));
      offs.push_back(a.text_offset);
      a.text_offset += text.size();
    }
    return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offs)}};
  }

  ParsedRequest req_;
  std::shared_ptr<Job> job_;
  const ApiContext& ctx_;
  std::function<void()> on_cancel_;
  std::shared_ptr<NotifySlot> slot_ = std::make_shared<NotifySlot>();
  bool chat_ = false;
  std::string id_;
  int64_t created_ = 0;
  std::vector<Acc> acc_;
  bool done_ = false;
  bool cancelled_ = false;
};

}  // namespace

std::shared_ptr<HttpStream> make_openai_stream(ParsedRequest req, std::shared_ptr<Job> job, const ApiContext& ctx,
                                               std::function<void()> on_cancel) {
  return std::make_shared<OpenAIStream>(std::move(req), std::move(job), ctx, std::move(on_cancel));
}

}  // namespace ridge::server
