#include "server/kv_events_publisher.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace ridge::server {

namespace {

// The msgpack subset the batch needs (the format's specification, msgpack/spec.md).
struct Pack {
  std::string out;
  void byte(uint8_t b) { out.push_back(char(b)); }
  void be(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) byte(uint8_t(v >> (8 * i)));
  }
  void nil() { byte(0xc0); }
  void array(size_t n) {
    if (n < 16) byte(uint8_t(0x90 | n));
    else if (n <= 0xffff) byte(0xdc), be(n, 2);
    else byte(0xdd), be(n, 4);
  }
  void str(std::string_view s) {
    const size_t n = s.size();
    if (n < 32) byte(uint8_t(0xa0 | n));
    else if (n <= 0xff) byte(0xd9), be(n, 1);
    else if (n <= 0xffff) byte(0xda), be(n, 2);
    else byte(0xdb), be(n, 4);
    out.append(s);
  }
  void uint(uint64_t v) {
    if (v < 128) byte(uint8_t(v));
    else if (v <= 0xff) byte(0xcc), be(v, 1);
    else if (v <= 0xffff) byte(0xcd), be(v, 2);
    else if (v <= 0xffffffffull) byte(0xce), be(v, 4);
    else byte(0xcf), be(v, 8);
  }
  void sint(int64_t v) {
    if (v >= 0) return uint(uint64_t(v));
    if (v >= -32) byte(uint8_t(int8_t(v)));
    else if (v >= -128) byte(0xd0), be(uint64_t(v), 1);
    else if (v >= -32768) byte(0xd1), be(uint64_t(v), 2);
    else if (v >= INT32_MIN) byte(0xd2), be(uint64_t(v), 4);
    else byte(0xd3), be(uint64_t(v), 8);
  }
  void f64(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    byte(0xcb), be(u, 8);
  }
};

std::string be64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint64_t(v) >> (8 * (7 - i)));
  return s;
}

}  // namespace

std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events, const KvEventsFormat& f) {
  const bool map = f.layout == KvEventsFormat::Layout::Map;
  Pack p;
  p.array(map ? 3 : 2);
  p.f64(ts);
  p.array(events.size());
  // A field: its name first in a map, its place alone in an array.
  auto key = [&](std::string_view k) {
    if (map) p.str(k);
  };
  auto head = [&](std::string_view tag, size_t fields) {
    if (map) {
      p.byte(uint8_t(0x80 | (fields + 1)));  // fixmap: every event has under 15 fields
      p.str("type");
    } else {
      p.array(fields + 1);
    }
    p.str(tag);
  };
  auto hashes = [&](const std::vector<uint64_t>& hs) {
    key("block_hashes");
    p.array(hs.size());
    for (uint64_t h : hs) p.uint(h);
  };
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEvent::Kind::BlockStored:
        head("BlockStored", 7);
        hashes(e.hashes);
        key("parent_block_hash");
        if (e.parent) p.uint(*e.parent);
        else p.nil();
        key("token_ids");
        p.array(e.tokens.size());
        for (int32_t t : e.tokens) p.sint(t);
        key("block_size");
        p.sint(e.block_size);
        key("lora_id");
        p.nil();
        key("medium");
        p.str(f.medium);
        key("lora_name");
        p.nil();
        break;
      case KvEvent::Kind::BlockRemoved:
        head("BlockRemoved", 2);
        hashes(e.hashes);
        key("medium");
        p.str(f.medium);
        break;
      case KvEvent::Kind::AllBlocksCleared:
        head("AllBlocksCleared", 0);
        break;
    }
  }
  if (map) p.sint(0);  // data_parallel_rank
  return std::move(p.out);
}

struct KvEventsPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
  std::deque<std::pair<int64_t, std::string>> buffer;  // (seq, payload), the last buffer_steps
};

namespace {
bool binds(const std::string& e) {
  return e.find('*') != std::string::npos || e.find("::") != std::string::npos || e.rfind("ipc://", 0) == 0 ||
         e.rfind("inproc://", 0) == 0;
}
}  // namespace

KvEventsPublisher::KvEventsPublisher(const KvEventsOptions& o) : opt_(o), z_(std::make_unique<Sockets>()) {
  RIDGE_CHECK(!o.endpoint.empty(), "--kv-events-endpoint: empty");
  RIDGE_CHECK(o.buffer_steps >= 1, "kv events: a replay buffer of {} batches", o.buffer_steps);
  auto open = [](zmq::socket_t& s, const std::string& e, bool bind, const char* flag) {
    try {
      if (bind) s.bind(e);
      else s.connect(e);
    } catch (const zmq::error_t& err) {
      fail("{} {}: cannot {} it ({})", flag, e, bind ? "bind" : "connect to", err.what());
    }
  };
  z_->pub.set(zmq::sockopt::sndhwm, o.hwm);
  z_->pub.set(zmq::sockopt::linger, 1000);
  open(z_->pub, o.endpoint, binds(o.endpoint), "--kv-events-endpoint");
  if (!o.replay_endpoint.empty()) {
    z_->replay = std::make_unique<zmq::socket_t>(z_->ctx, zmq::socket_type::router);
    z_->replay->set(zmq::sockopt::linger, 0);
    // A whole buffer's replay is queued at once: a high-water mark above it (libzmq's
    // default of 1000 would drop the rest, the end marker too, without a word), bounded
    // so that a client that asks and never reads cannot grow it further. Requests are 8 bytes.
    z_->replay->set(zmq::sockopt::sndhwm, int(std::min<int64_t>(o.buffer_steps + 2, 1 << 30)));
    z_->replay->set(zmq::sockopt::maxmsgsize, int64_t(64));
    open(*z_->replay, o.replay_endpoint, true, "--kv-events-replay-endpoint");
  }
  thread_ = std::thread([this] { run(); });
}

KvEventsPublisher::~KvEventsPublisher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void KvEventsPublisher::publish(double ts, std::vector<KvEvent> events) {
  {
    std::lock_guard lk(mu_);
    queue_.emplace_back(ts, std::move(events));
  }
  cv_.notify_one();
}

int64_t KvEventsPublisher::published() const {
  std::lock_guard lk(mu_);
  return sent_;
}

void KvEventsPublisher::run() {
  // Signals go to the other threads (the server's handler): none interrupts a send here
  // halfway through a message's frames.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  int64_t seq = 0;
  const std::string topic = opt_.topic;
  for (;;) {
    std::vector<std::pair<double, std::vector<KvEvent>>> items;
    bool stopping;
    {
      std::unique_lock lk(mu_);
      // Replay requests are looked at every 20 ms while nothing is queued.
      cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); });
      items.swap(queue_);
      stopping = stop_;
    }
    for (auto& [ts, events] : items) {
      std::string payload = encode_kv_event_batch(ts, events, opt_.format);
      try {
        z_->pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z_->pub.send(zmq::buffer(be64(seq)), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        z_->pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        std::fprintf(stderr, "serve: kv events: batch %lld not sent (%s); replay has it\n", (long long)seq, e.what());
      }
      z_->buffer.emplace_back(seq, std::move(payload));
      if (int64_t(z_->buffer.size()) > opt_.buffer_steps) z_->buffer.pop_front();
      ++seq;
      std::lock_guard lk(mu_);
      ++sent_;
    }
    for (int served = 0; z_->replay && served < 16; ++served) {  // then the queue again
      std::vector<zmq::message_t> req;
      zmq::recv_result_t got;
      try {
        got = zmq::recv_multipart(*z_->replay, std::back_inserter(req), zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& e) {
        std::fprintf(stderr, "serve: kv events: replay request not read (%s)\n", e.what());
        break;
      }
      if (!got) break;
      // [identity, empty, start]: as vLLM, anything else is ignored. The start is unsigned
      // and big-endian, of up to 8 bytes.
      if (req.size() != 3 || req[2].size() == 0 || req[2].size() > 8) {
        std::fprintf(stderr, "serve: kv events: a malformed replay request (%zu frames) ignored\n", req.size());
        continue;
      }
      uint64_t start_u = 0;
      for (size_t i = 0; i < req[2].size(); ++i) start_u = start_u << 8 | req[2].data<uint8_t>()[i];
      const int64_t start = start_u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(start_u);
      const std::string id = req[0].to_string();
      auto reply = [&](const std::string& s, std::string_view body) {
        try {
          z_->replay->send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z_->replay->send(zmq::buffer(std::string_view()), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z_->replay->send(zmq::buffer(s), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          z_->replay->send(zmq::buffer(body), zmq::send_flags::dontwait);
        } catch (const zmq::error_t&) {
        }
      };
      for (const auto& [s, payload] : z_->buffer)
        if (s >= start) reply(be64(s), payload);
      reply(be64(-1), {});
    }
    if (stopping) {
      std::lock_guard lk(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace ridge::server
