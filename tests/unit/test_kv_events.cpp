// KV-cache events' wire format (server/kv_events_publisher.h): vLLM's array-like
// KVEventBatch in msgpack, byte by byte against the msgpack specification. The events
// themselves: test_engine_host.cpp (RadixCache.Events...); decoded by an independent
// decoder over ZeroMQ from a running server: tests/server/kv_events.py.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "server/kv_events_publisher.h"

namespace ridge::server {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(char(x));
  return s;
}

std::string f64(double d) {  // 0xcb and the big-endian bits
  uint64_t u;
  std::memcpy(&u, &d, 8);
  std::string s(1, char(0xcb));
  for (int i = 7; i >= 0; --i) s.push_back(char(u >> (8 * i)));
  return s;
}

TEST(KvEvents, BatchesEncodeAsVllmsArrayLikeStructs) {
  const std::vector<KvEvent> cleared{KvEvent{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0}};
  EXPECT_EQ(encode_kv_event_batch(1.5, cleared),
            bytes({0x92}) + f64(1.5) + bytes({0x91, 0x91, 0xb0}) + "AllBlocksCleared");

  // Hashes in 1, 2, 4 and 8 bytes; a parent; token ids past fixint; block_size; lora_id
  // nil; medium "CPU"; lora_name nil.
  KvEvent st{KvEvent::Kind::BlockStored, {5, 200, 70000, 0x123456789ull}, 7ull, {1, 300, 127, 128}, 1};
  std::string want = bytes({0x92}) + f64(2.0) + bytes({0x91, 0x98, 0xab}) + "BlockStored";
  want += bytes({0x94, 0x05, 0xcc, 200, 0xce, 0x00, 0x01, 0x11, 0x70, 0xcf, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0x89});
  want += bytes({0x07, 0x94, 0x01, 0xcd, 0x01, 0x2c, 0x7f, 0xcc, 0x80, 0x01, 0xc0, 0xa3}) + "CPU" + bytes({0xc0});
  EXPECT_EQ(encode_kv_event_batch(2.0, std::vector<KvEvent>{st}), want);

  // No parent: nil. Removed blocks, then a long token list (array16).
  st.parent.reset();
  st.hashes = {1};
  st.tokens.assign(20, 3);
  const KvEvent rm{KvEvent::Kind::BlockRemoved, {9, 10}, {}, {}, 0};
  std::string got = encode_kv_event_batch(0.0, std::vector<KvEvent>{st, rm});
  want = bytes({0x92}) + f64(0.0) + bytes({0x92, 0x98, 0xab}) + "BlockStored" + bytes({0x91, 0x01, 0xc0, 0xdc, 0x00, 20});
  want += std::string(20, char(3)) + bytes({0x01, 0xc0, 0xa3}) + "CPU" + bytes({0xc0});
  want += bytes({0x93, 0xac}) + "BlockRemoved" + bytes({0x92, 0x09, 0x0a, 0xa3}) + "CPU";
  EXPECT_EQ(got, want);
}

TEST(KvEvents, AnEndpointThatCannotBeUsedIsAnErrorNamingIt) {
  KvEventsOptions o;
  o.endpoint = "tcp://*:notaport";
  try {
    KvEventsPublisher p(o);
    FAIL() << "bound " << o.endpoint;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-events-endpoint tcp://*:notaport"), std::string::npos) << e.what();
  }
  o.endpoint = "inproc://kv-events-test";
  o.replay_endpoint = "bogus://x";
  EXPECT_THROW(KvEventsPublisher p(o), std::exception);
}

}  // namespace
}  // namespace ridge::server
