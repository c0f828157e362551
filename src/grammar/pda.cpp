#include "grammar/pda.h"

#include <algorithm>

namespace ridge::grammar {

int32_t Pda::node(int32_t pos, int32_t count, int32_t parent) {
  const Node n{pos, count, parent};
  auto [it, added] = index_.try_emplace(n, int32_t(nodes_.size()));
  if (added) {
    nodes_.push_back(n);
    stamp_.push_back(0);
  }
  return it->second;
}

void Pda::rollback(size_t n) {
  for (size_t i = n; i < nodes_.size(); ++i) index_.erase(nodes_[i]);
  nodes_.resize(n);
  stamp_.resize(n);
  walk_mark_ = n;
}

// Expands node id until every stack's top is a byte set: a reference pushes the rule's
// alternatives over the element after it, a repetition leaves (enough iterations done)
// or pushes the rule over itself counted one more (fewer than hi), the end of an
// alternative pops to its parent (the end of the root: the grammar may end here; a
// sentinel: recorded in pops). Nodes already seen in this closure are skipped, so
// ambiguous grammars cost their distinct stacks only.
void Pda::close(int32_t id, PdaState& out) {
  const Grammar& g = *g_;
  work_.push_back(id);
  while (!work_.empty()) {
    if (out.tops.size() > kMaxTops || nodes_.size() - walk_mark_ > kMaxWalkNodes) {
      failed_ = true;  // past the budget: the caller sees an empty state
      work_.clear();
      out = PdaState{};
      return;
    }
    const int32_t n = work_.back();
    work_.pop_back();
    if (stamp_[size_t(n)] == gen_) continue;
    stamp_[size_t(n)] = gen_;
    const Node nd = nodes_[size_t(n)];
    const Elem& e = g.elems[size_t(nd.pos)];
    switch (e.kind) {
      case Elem::Bytes: out.tops.push_back(n); break;
      case Elem::Ref: {
        // A reference last in its alternative continues where the alternative would:
        // no frame for it (x* and other right recursion keep flat stacks, and a nullable
        // x under * comes back to a node already seen instead of growing forever).
        const int32_t cont =
            g.elems[size_t(nd.pos) + 1].kind == Elem::End ? nd.parent : node(nd.pos + 1, 0, nd.parent);
        const auto& alts = g.alts[size_t(e.arg)];
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back(node(*it, 0, cont));
        break;
      }
      case Elem::Repeat: {
        int32_t next = -1;  // the frame of one more iteration
        if (nd.count >= kRelative) {
          // A token table's frame: the real count is c0 + j, c0 known only at run time, so
          // both ways are taken and the one out carries j down to the sentinel.
          const int32_t j = nd.count - kRelative;
          work_.push_back(node(nd.pos + 1, 0, node(kSentinel, j, -1)));
          if (j + 1 <= e.hi) next = node(nd.pos, nd.count + 1, nd.parent);
        } else {
          if (nd.count >= e.lo) work_.push_back(node(nd.pos + 1, 0, nd.parent));
          if (nd.count < e.hi) next = node(nd.pos, nd.count + 1, nd.parent);
        }
        if (next >= 0) {
          const auto& alts = g.alts[size_t(e.arg)];
          for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back(node(*it, 0, next));
        }
        break;
      }
      case Elem::End:
        if (nd.parent < 0) out.accept = true;
        else if (nodes_[size_t(nd.parent)].pos == kSentinel) out.pops.push_back(nodes_[size_t(nd.parent)].count);
        else work_.push_back(nd.parent);
        break;
    }
  }
}

void Pda::finish(PdaState& out) {
  std::sort(out.tops.begin(), out.tops.end());
  if (out.pops.size() > 1) {
    std::sort(out.pops.begin(), out.pops.end());
    out.pops.erase(std::unique(out.pops.begin(), out.pops.end()), out.pops.end());
  }
}

void Pda::start(PdaState& out) {
  out = PdaState{};
  ++gen_;
  begin_walk();
  for (int32_t a : g_->alts[size_t(g_->root)]) close(node(a, 0, -1), out);
  finish(out);
}

void Pda::close_from(int32_t id, PdaState& out) {
  out.tops.clear();
  out.pops.clear();
  out.accept = false;
  ++gen_;
  close(id, out);
  finish(out);
}

bool Pda::advance(const PdaState& s, uint8_t b, PdaState& out) {
  out.tops.clear();
  out.pops.clear();
  out.accept = false;
  ++gen_;
  const Grammar& g = *g_;
  for (int32_t t : s.tops) {
    const Node nd = nodes_[size_t(t)];
    if (g.sets[size_t(g.elems[size_t(nd.pos)].arg)].has(b)) close(node(nd.pos + 1, 0, nd.parent), out);
    if (failed_) return false;
  }
  finish(out);
  return !out.tops.empty() || out.accept || !out.pops.empty();
}

}  // namespace ridge::grammar
