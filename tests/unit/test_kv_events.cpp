// KV-cache events' wire format (server/kv_events_publisher.h): vLLM's array-like
// KVEventBatch in msgpack, byte by byte against the msgpack specification. The events
// themselves: test_engine_host.cpp (RadixCache.Events...); decoded by an independent
// decoder over ZeroMQ from a running server: tests/server/kv_events.py.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/kv_events.h"
#include "server/kv_block_index.h"
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
  const KvEventsFormat arr{KvEventsFormat::Layout::Array, "CPU"};
  const std::vector<KvEvent> cleared{KvEvent{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0}};
  EXPECT_EQ(encode_kv_event_batch(1.5, cleared, arr),
            bytes({0x92}) + f64(1.5) + bytes({0x91, 0x91, 0xb0}) + "AllBlocksCleared");

  // Hashes in 1, 2, 4 and 8 bytes; a parent; token ids past fixint; block_size; lora_id
  // nil; medium "CPU"; lora_name nil.
  KvEvent st{KvEvent::Kind::BlockStored, {5, 200, 70000, 0x123456789ull}, 7ull, {1, 300, 127, 128}, 1};
  std::string want = bytes({0x92}) + f64(2.0) + bytes({0x91, 0x98, 0xab}) + "BlockStored";
  want += bytes({0x94, 0x05, 0xcc, 200, 0xce, 0x00, 0x01, 0x11, 0x70, 0xcf, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0x89});
  want += bytes({0x07, 0x94, 0x01, 0xcd, 0x01, 0x2c, 0x7f, 0xcc, 0x80, 0x01, 0xc0, 0xa3}) + "CPU" + bytes({0xc0});
  EXPECT_EQ(encode_kv_event_batch(2.0, std::vector<KvEvent>{st}, arr), want);

  // No parent: nil. Removed blocks, then a long token list (array16).
  st.parent.reset();
  st.hashes = {1};
  st.tokens.assign(20, 3);
  const KvEvent rm{KvEvent::Kind::BlockRemoved, {9, 10}, {}, {}, 0};
  std::string got = encode_kv_event_batch(0.0, std::vector<KvEvent>{st, rm}, arr);
  want = bytes({0x92}) + f64(0.0) + bytes({0x92, 0x98, 0xab}) + "BlockStored" + bytes({0x91, 0x01, 0xc0, 0xdc, 0x00, 20});
  want += std::string(20, char(3)) + bytes({0x01, 0xc0, 0xa3}) + "CPU" + bytes({0xc0});
  want += bytes({0x93, 0xac}) + "BlockRemoved" + bytes({0x92, 0x09, 0x0a, 0xa3}) + "CPU";
  EXPECT_EQ(got, want);
}

// Current vLLM (map): [ts, [{"type": ..., fields by name}], data_parallel_rank].
TEST(KvEvents, BatchesEncodeAsCurrentVllmsTaggedMaps) {
  const KvEvent st{KvEvent::Kind::BlockStored, {5}, {}, {1, 2}, 2};
  const KvEvent rm{KvEvent::Kind::BlockRemoved, {5}, {}, {}, 0};
  const KvEvent cl{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0};
  auto s = [](std::string_view x) { return std::string(1, char(0xa0 | x.size())) + std::string(x); };
  std::string want = bytes({0x93}) + f64(3.0) + bytes({0x93});
  want += bytes({0x88}) + s("type") + s("BlockStored") + s("block_hashes") + bytes({0x91, 0x05}) + s("parent_block_hash") +
          bytes({0xc0}) + s("token_ids") + bytes({0x92, 0x01, 0x02}) + s("block_size") + bytes({0x02}) + s("lora_id") +
          bytes({0xc0}) + s("medium") + s("GPU") + s("lora_name") + bytes({0xc0});
  want += bytes({0x83}) + s("type") + s("BlockRemoved") + s("block_hashes") + bytes({0x91, 0x05}) + s("medium") + s("GPU");
  want += bytes({0x81}) + s("type") + s("AllBlocksCleared");
  want += bytes({0x00});  // data_parallel_rank
  EXPECT_EQ(encode_kv_event_batch(3.0, std::vector<KvEvent>{st, rm, cl}), want);
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

// The router's view of a replica (server/kv_block_index.h) from its batches, in either
// layout: the prompt prefix it holds, in whole blocks, as the chain of hashes says.
TEST(KvBlockIndex, FollowsStoredAndRemovedBlocksInBothLayouts) {
  for (auto layout : {KvEventsFormat::Layout::Map, KvEventsFormat::Layout::Array}) {
    const KvEventsFormat f{layout, "GPU"};
    KvBlockIndex ix(2);
    const std::vector<int32_t> p{1, 2, 3, 4, 5, 6, 7, 8, 9};  // blocks of 4: two whole ones
    const uint64_t h0 = kv_block_hash(std::nullopt, std::span(p).first(4));
    const uint64_t h1 = kv_block_hash(h0, std::span(p).subspan(4, 4));
    EXPECT_EQ(ix.matched_tokens(0, p), 0);
    const KvEvent st{KvEvent::Kind::BlockStored, {h0, h1}, {}, {1, 2, 3, 4, 5, 6, 7, 8}, 4};
    ASSERT_TRUE(ix.apply(0, encode_kv_event_batch(1.0, std::vector<KvEvent>{st}, f)));
    EXPECT_EQ(ix.matched_tokens(0, p), 8);
    EXPECT_EQ(ix.matched_tokens(1, p), 0);  // the other replica holds nothing
    const std::vector<int32_t> q{1, 2, 3, 4, 9, 9, 9, 9};
    EXPECT_EQ(ix.matched_tokens(0, q), 4);  // diverges in the second block
    const KvEvent rm{KvEvent::Kind::BlockRemoved, {h1}, {}, {}, 0};
    ASSERT_TRUE(ix.apply(0, encode_kv_event_batch(2.0, std::vector<KvEvent>{rm}, f)));
    EXPECT_EQ(ix.matched_tokens(0, p), 4);
    const KvEvent cl{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0};
    ASSERT_TRUE(ix.apply(0, encode_kv_event_batch(3.0, std::vector<KvEvent>{cl, st}, f)));
    EXPECT_EQ(ix.blocks(0), 2);
    ix.clear(0);
    EXPECT_EQ(ix.blocks(0), 0);

    // Every truncation of a valid payload, and garbage: refused or applied, never a crash,
    // and a refused payload changes nothing.
    const std::string good = encode_kv_event_batch(4.0, std::vector<KvEvent>{st, rm, cl}, f);
    for (size_t n = 0; n < good.size(); ++n) {
      KvBlockIndex one(1);
      one.apply(0, encode_kv_event_batch(0.0, std::vector<KvEvent>{st}, f));
      if (!one.apply(0, std::string_view(good).substr(0, n))) {
        EXPECT_EQ(one.blocks(0), 2) << n;
      }
    }
    std::string bad = good;
    for (size_t i = 0; i < bad.size(); i += 3) {
      bad[i] = char(0xdd);  // an array claiming 4 G elements
      KvBlockIndex one(1);
      one.apply(0, bad);
    }
  }
}

// Another engine's hashes (vLLM's: sha256-based, all 64 bits): the index keys blocks by
// its own chain over the token ids, so they match ridge's prompts all the same; a chain
// whose parent was never announced cannot be keyed; unknown event types are skipped.
TEST(KvBlockIndex, MatchesAnyEnginesEventsByTheirTokenIds) {
  KvBlockIndex ix(1);
  const std::vector<int32_t> p{5, 6, 7, 8, 9, 10, 11, 12};
  const KvEvent a{KvEvent::Kind::BlockStored, {0xF000000000000001ull}, {}, {5, 6, 7, 8}, 4};
  const KvEvent b{KvEvent::Kind::BlockStored, {0xF000000000000002ull}, 0xF000000000000001ull, {9, 10, 11, 12}, 4};
  const KvEvent orphan{KvEvent::Kind::BlockStored, {0xE000000000000009ull}, 0xDEADull, {1, 1, 1, 1}, 4};
  ASSERT_TRUE(ix.apply(0, encode_kv_event_batch(1.0, std::vector<KvEvent>{a, b, orphan})));
  EXPECT_EQ(ix.matched_tokens(0, p), 8);
  EXPECT_EQ(ix.blocks(0), 2);  // the orphan left out
  const KvEvent rm{KvEvent::Kind::BlockRemoved, {0xF000000000000002ull}, {}, {}, 0};
  ASSERT_TRUE(ix.apply(0, encode_kv_event_batch(2.0, std::vector<KvEvent>{rm})));
  EXPECT_EQ(ix.matched_tokens(0, p), 4);

  // A batch with an event of a type the router does not know: the rest still applies.
  std::string batch = encode_kv_event_batch(3.0, std::vector<KvEvent>{b});
  // [ts, [ev], 0] -> [ts, [{"type": "Future"}, ev], 0]: the events array grows by one.
  const size_t at = 1 + 9;  // fixarray(3) + float64
  ASSERT_EQ(uint8_t(batch[at]), 0x91);
  batch[at] = char(0x92);
  batch.insert(at + 1, std::string("\x81\xa4" "type" "\xa6" "Future", 13));
  ASSERT_TRUE(ix.apply(0, batch));
  EXPECT_EQ(ix.matched_tokens(0, p), 8);
}

}  // namespace
}  // namespace ridge::server
