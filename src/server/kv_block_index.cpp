#include "server/kv_block_index.h"

#include <cstring>
#include <optional>
#include <string>

#include "engine/kv_events.h"

namespace ridge::server {

namespace {

// A msgpack reader of the subset the events use (msgpack/spec.md): every read checks the
// bounds and the type and fails (false) instead of reading past the payload.
struct Reader {
  std::string_view b;
  size_t i = 0;
  bool ok = true;

  bool need(size_t n) { return ok = ok && i + n <= b.size(); }
  uint64_t be(int n) {
    if (!need(size_t(n))) return 0;
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v = v << 8 | uint8_t(b[i++]);
    return v;
  }
  uint8_t peek() { return need(1) ? uint8_t(b[i]) : 0; }
  std::optional<size_t> array() {
    const uint8_t t = uint8_t(be(1));
    if ((t & 0xf0) == 0x90) return t & 0x0f;
    if (t == 0xdc) return size_t(be(2));
    if (t == 0xdd) return size_t(be(4));
    ok = false;
    return std::nullopt;
  }
  // A map's pair count, if the next value is a map.
  std::optional<size_t> map() {
    const uint8_t t = peek();
    if ((t & 0xf0) == 0x80) return ++i, size_t(t & 0x0f);
    if (t == 0xde) return ++i, size_t(be(2));
    if (t == 0xdf) return ++i, size_t(be(4));
    return std::nullopt;
  }
  bool nil() {
    if (peek() != 0xc0) return false;
    ++i;
    return true;
  }
  std::optional<std::string_view> str() {
    const uint8_t t = uint8_t(be(1));
    size_t n = 0;
    if ((t & 0xe0) == 0xa0) n = t & 0x1f;
    else if (t == 0xd9) n = size_t(be(1));
    else if (t == 0xda) n = size_t(be(2));
    else if (t == 0xdb) n = size_t(be(4));
    else return ok = false, std::nullopt;
    if (!need(n)) return std::nullopt;
    i += n;
    return b.substr(i - n, n);
  }
  std::optional<int64_t> integer() {  // any msgpack integer within int64
    const uint8_t t = uint8_t(be(1));
    if (t < 0x80) return t;
    if (t >= 0xe0) return int8_t(t);
    switch (t) {
      case 0xcc: return int64_t(be(1));
      case 0xcd: return int64_t(be(2));
      case 0xce: return int64_t(be(4));
      case 0xcf: {
        const uint64_t v = be(8);
        if (v >> 63) return ok = false, std::nullopt;
        return int64_t(v);
      }
      case 0xd0: return int8_t(be(1));
      case 0xd1: return int16_t(be(2));
      case 0xd2: return int32_t(be(4));
      case 0xd3: return int64_t(be(8));
      default: return ok = false, std::nullopt;
    }
  }
  // Skips any value (the fields a router does not need), nesting at most 32 deep.
  void skip(int depth = 0) {
    if (!ok || depth > 32) return void(ok = false);
    const uint8_t t = uint8_t(be(1));
    if (!ok) return;
    if (t < 0x80 || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return;
    if ((t & 0xe0) == 0xa0) return void(need(t & 0x1f) && (i += t & 0x1f));
    if ((t & 0xf0) == 0x90 || (t & 0xf0) == 0x80) {
      const size_t n = size_t(t & 0x0f) * ((t & 0xf0) == 0x80 ? 2 : 1);
      for (size_t k = 0; k < n && ok; ++k) skip(depth + 1);
      return;
    }
    switch (t) {
      case 0xcc: case 0xd0: be(1); return;
      case 0xcd: case 0xd1: be(2); return;
      case 0xce: case 0xd2: case 0xca: be(4); return;
      case 0xcf: case 0xd3: case 0xcb: be(8); return;
      case 0xd9: case 0xc4: { const size_t n = size_t(be(1)); need(n) && (i += n); return; }
      case 0xda: case 0xc5: { const size_t n = size_t(be(2)); need(n) && (i += n); return; }
      case 0xdb: case 0xc6: { const size_t n = size_t(be(4)); need(n) && (i += n); return; }
      case 0xdc: case 0xde: {
        const size_t n = size_t(be(2)) * (t == 0xde ? 2 : 1);
        for (size_t k = 0; k < n && ok; ++k) skip(depth + 1);
        return;
      }
      case 0xdd: case 0xdf: {
        const size_t n = size_t(be(4)) * (t == 0xdf ? 2 : 1);
        for (size_t k = 0; k < n && ok; ++k) skip(depth + 1);
        return;
      }
      default: ok = false;
    }
  }
  // A block hash: any non-negative integer (vLLM's use all 64 bits).
  std::optional<uint64_t> hash() {
    if (peek() == 0xcf) return ++i, be(8);
    const auto v = integer();
    if (!v || *v < 0) return ok = false, std::nullopt;
    return uint64_t(*v);
  }
  bool hashes(std::vector<uint64_t>& out) {
    const auto n = array();
    if (!n || *n > b.size()) return ok = false;
    for (size_t k = 0; k < *n && ok; ++k) {
      const auto h = hash();
      if (!h) return ok = false;
      out.push_back(*h);
    }
    return ok;
  }
  // An optional hash (nil: none).
  bool parent(std::optional<uint64_t>& out) {
    if (nil()) return true;
    out = hash();
    return out.has_value();
  }
  bool ids(std::vector<int32_t>& out) {
    const auto n = array();
    if (!n || *n > b.size()) return ok = false;
    for (size_t k = 0; k < *n && ok; ++k) {
      const auto v = integer();
      if (!v || *v < INT32_MIN || *v > INT32_MAX) return ok = false;
      out.push_back(int32_t(*v));
    }
    return ok;
  }
};

}  // namespace

bool KvBlockIndex::apply(int32_t r, std::string_view payload) {
  // Decoded whole first, applied after: a bad payload changes nothing.
  struct Op {
    KvEvent::Kind kind;
    std::vector<uint64_t> hashes;
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
    int32_t block_size = 0;
  };
  std::vector<Op> ops;
  Reader rd{payload};
  const auto top = rd.array();
  if (!top || *top < 2 || *top > 16) return false;
  rd.skip();  // ts
  const auto n = rd.array();
  if (!n || *n > payload.size()) return false;
  for (size_t e = 0; e < *n && rd.ok; ++e) {
    Op op{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0};
    std::string tag;
    bool have_hashes = false, have_bs = false, have_tokens = false;
    auto block_size = [&]() {
      const auto bs = rd.integer();
      if (!bs || *bs < 1 || *bs > (1 << 20)) return rd.ok = false;
      op.block_size = int32_t(*bs);
      return have_bs = true;
    };
    if (const auto pairs = rd.map()) {  // current vLLM: named fields, the tag under "type"
      if (*pairs > payload.size()) return false;
      for (size_t k = 0; k < *pairs && rd.ok; ++k) {
        const auto name = rd.str();
        if (!name) return false;
        if (*name == "type") {
          const auto t = rd.str();
          if (!t) return false;
          tag = *t;
        } else if (*name == "block_hashes") {
          have_hashes = rd.hashes(op.hashes);
        } else if (*name == "parent_block_hash") {
          rd.parent(op.parent);
        } else if (*name == "token_ids") {
          have_tokens = rd.ids(op.tokens);
        } else if (*name == "block_size") {
          block_size();
        } else {
          rd.skip();
        }
      }
    } else {  // vLLM before 2026: the tag, then the fields in order
      const auto fields = rd.array();
      if (!fields || *fields < 1 || *fields > payload.size()) return false;
      const auto t = rd.str();
      if (!t) return false;
      tag = *t;
      size_t used = 1;
      if (tag == "BlockStored" && *fields >= 5) {
        have_hashes = rd.hashes(op.hashes);
        rd.parent(op.parent);
        have_tokens = rd.ids(op.tokens);
        block_size();
        used = 5;
      } else if (tag == "BlockRemoved" && *fields >= 2) {
        have_hashes = rd.hashes(op.hashes);
        used = 2;
      }
      for (size_t k = used; k < *fields && rd.ok; ++k) rd.skip();
    }
    if (!rd.ok) return false;
    if (tag == "BlockStored" && have_hashes && have_bs && have_tokens &&
        int64_t(op.tokens.size()) == int64_t(op.hashes.size()) * op.block_size)
      op.kind = KvEvent::Kind::BlockStored;
    else if (tag == "BlockRemoved" && have_hashes) op.kind = KvEvent::Kind::BlockRemoved;
    else if (tag == "BlockStored" || tag == "BlockRemoved") return false;  // a known event without its fields
    else if (tag != "AllBlocksCleared") continue;  // an event a router need not know
    ops.push_back(std::move(op));
  }
  for (size_t k = 2; k < *top && rd.ok; ++k) rd.skip();  // data_parallel_rank, if any
  if (!rd.ok || rd.i != payload.size()) return false;
  std::lock_guard lk(mu_);
  Replica& rep = r_.at(size_t(r));
  for (const Op& op : ops) {
    if (op.kind == KvEvent::Kind::AllBlocksCleared) rep.held.clear(), rep.mine.clear();
    if (op.kind == KvEvent::Kind::BlockStored) {
      rep.block_size = op.block_size;
      std::optional<uint64_t> parent;  // the router's hash of the block before
      if (op.parent) {
        const auto it = rep.mine.find(*op.parent);
        if (it == rep.mine.end()) continue;  // a chain whose start was never seen
        parent = it->second;
      }
      for (size_t b = 0; b < op.hashes.size(); ++b) {
        const uint64_t h = kv_block_hash(parent, std::span(op.tokens).subspan(b * size_t(op.block_size), size_t(op.block_size)));
        rep.mine[op.hashes[b]] = h;
        rep.held.insert(h);
        parent = h;
      }
    }
    if (op.kind == KvEvent::Kind::BlockRemoved)
      for (uint64_t h : op.hashes) {
        const auto it = rep.mine.find(h);
        if (it == rep.mine.end()) continue;
        rep.held.erase(it->second);
        rep.mine.erase(it);
      }
  }
  return true;
}

void KvBlockIndex::clear(int32_t r) {
  std::lock_guard lk(mu_);
  r_.at(size_t(r)).held.clear();
  r_.at(size_t(r)).mine.clear();
}

int32_t KvBlockIndex::matched_tokens(int32_t r, std::span<const int32_t> tokens) const {
  std::lock_guard lk(mu_);
  const Replica& rep = r_.at(size_t(r));
  const int32_t bs = rep.block_size;
  if (bs <= 0) return 0;
  std::optional<uint64_t> parent;
  int32_t n = 0;
  while (int64_t(n + bs) <= int64_t(tokens.size())) {
    const uint64_t h = kv_block_hash(parent, tokens.subspan(size_t(n), size_t(bs)));
    if (!rep.held.count(h)) break;
    parent = h;
    n += bs;
  }
  return n;
}

int64_t KvBlockIndex::blocks(int32_t r) const {
  std::lock_guard lk(mu_);
  return int64_t(r_.at(size_t(r)).held.size());
}

}  // namespace ridge::server
