#!/usr/bin/env bash
# ridge against llama.cpp itself (node-llama-cpp's prebuilt binary), on ridge-written
# random models of every architecture and dtype, plus llama.cpp against the stories260K
# reference continuations (so that ridge == llama.cpp == reference is one chain).
#   usage: tests/oracle/run_oracle.sh path/to/ridge
# f32 / f16 files: every greedy step whose top-2 margin exceeds 1e-3 must agree.
# bf16 / q8_0 / q4_0 files: llama.cpp rounds the activations of those matmuls (to bf16,
# or to q8_0 blocks with f16 scales) where ridge keeps f32 (bf16) or uses 8-bit blocks
# with f32 scales; that moves logits by ~1e-2 (observed margins of disagreement up to
# 0.03), so those steps are compared where the margin exceeds 0.1.
set -uo pipefail
ridge=${1:?usage: run_oracle.sh RIDGE_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
failn=0

check() {  # name, command...
  local name=$1
  shift
  if out=$("$@" 2>&1); then
    pass=$((pass + 1))
    echo "PASS $name: $(echo "$out" | grep -E '^oracle:|OK|passed' | tail -1)"
  else
    failn=$((failn + 1))
    echo "FAIL $name"
    echo "$out" | tail -20 | sed 's/^/    /'
  fi
}

shared=${RIDGE_SHARED_DIR:-$here/../../../shared}
if [ -f "$shared/models/stories260K.gguf" ]; then
  check "llama.cpp reproduces stories260K reference" node "$here/smoke_stories.mjs" --model "$shared/models/stories260K.gguf" --tsv "$shared/models/stories260K.greedy.tsv"
  check "stories260K f32 ridge vs llama.cpp" node "$here/check_greedy.mjs" --ridge "$ridge" --model "$shared/models/stories260K.gguf" --prompt "Once upon a time" -n 100
elif [ "${CI:-}" = true ]; then
  echo "FAIL: $shared/models/stories260K.gguf is missing (required under CI=true)"
  failn=$((failn + 1))
else
  echo "SKIP: $shared/models/stories260K.gguf not found"
fi

prompts=("hello world" "the quick brown fox jumps over the lazy dog" "a")
for spec in llama:tiny qwen2:tiny qwen3:tiny llama:tiny-llama3; do
  arch=${spec%%:*}
  preset=${spec##*:}
  for dtype in f32 f16 bf16 q8_0 q4_0; do
    m="$tmp/$preset-$arch-$dtype.gguf"
    "$ridge" mkmodel --arch "$arch" --preset "$preset" --dtype "$dtype" --seed 11 -o "$m" 2>/dev/null || {
      echo "FAIL mkmodel $arch $preset $dtype"; failn=$((failn + 1)); continue; }
    margin=1e-3
    case $dtype in bf16|q8_0|q4_0) margin=0.1 ;; esac
    for p in "${prompts[@]}"; do
      check "$preset/$arch/$dtype \"$p\"" node "$here/check_greedy.mjs" --ridge "$ridge" --model "$m" --prompt "$p" -n 40 --min-margin $margin
    done
  done
done
echo "oracle: $pass passed, $failn failed"
[ "$failn" = 0 ]
