#include "engine/grammar_vocab.h"

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ridge {

std::shared_ptr<const grammar::TokenTrie> grammar_vocabulary(const Tokenizer& tok,
                                                             std::span<const int32_t> also_excluded) {
  std::vector<std::string> bytes;
  std::vector<bool> excluded;
  std::vector<int32_t> eog;
  bytes.reserve(size_t(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    bytes.push_back(tok.piece_bytes(id));
    excluded.push_back(tok.is_control(id));
    if (tok.is_eog(id)) eog.push_back(id);
  }
  for (int32_t id : also_excluded)
    if (id >= 0 && id < tok.n_vocab()) excluded[size_t(id)] = true;
  return std::make_shared<const grammar::TokenTrie>(std::move(bytes), excluded, std::move(eog));
}

}  // namespace ridge
