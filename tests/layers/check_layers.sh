#!/usr/bin/env bash
# The layers of src/ and the only direction their includes may point (docs/ARCHITECTURE.md):
# a file under src/LAYER/ may include headers of LAYER itself and of the layers listed
# for it below, nothing else. CMake links one library per layer in the same direction;
# this check catches the include before it becomes a link-order puzzle.
# usage: tests/layers/check_layers.sh [SRC_DIR]   (default: src beside this script's repo)
# Prints every violation as FILE:LINE: LAYER -> OTHER; exit status 1 if there is any.
set -uo pipefail
src=${1:-"$(dirname "$0")/../../src"}

declare -A allowed=(
  [core]=""
  [perf]="core"
  [gguf]="core"
  [quant]="core"
  [tokenizer]="core gguf"
  [kernels]="core quant"
  [dist]="core"
  [model]="core perf gguf quant kernels dist"
  [grammar]="core"
  [engine]="core perf gguf quant kernels model dist tokenizer grammar"
  [server]="core perf tokenizer grammar engine"
  [tools]="core perf gguf quant kernels model dist tokenizer grammar engine"
  [cli]="core perf gguf quant kernels model dist tokenizer grammar engine server tools"
)

[ -d "$src" ] || { echo "layers: no source directory $src"; exit 2; }
bad=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+x}" ]; then
    echo "layers: src/$layer/ is no known layer (add it to tests/layers/check_layers.sh)"
    bad=1
    continue
  fi
  ok=" $layer ${allowed[$layer]} "
  while IFS=: read -r file line inc; do
    target=${inc%%/*}
    [[ "$ok" == *" $target "* ]] && continue
    echo "${file#"$src"/}:$line: $layer -> $target (${inc})"
    bad=1
  # Every file, any extension; "..." or <...>, with or without a space. An include whose
  # first path component is no layer (<sys/mman.h>, <boost/asio.hpp>) is not ours.
  done < <(grep -rnoE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]+[">]' "$dir" |
             sed -E 's/:[[:space:]]*#[[:space:]]*include[[:space:]]*["<]/:/; s/[">]$//' |
             while IFS=: read -r f l inc; do
               inc=${inc#./}
               while [[ $inc == ../* ]]; do inc=${inc#../}; done  # "../engine/x.h" from src/LAYER/
               first=${inc%%/*}
               [[ $inc == */* && -n "${allowed[$first]+x}" ]] && echo "$f:$l:$inc"
             done)
done
if ((bad)); then
  echo "layers: includes against the direction above"
  exit 1
fi
echo "layers: every include of $(find "$src" -type f | wc -l) files points down"
