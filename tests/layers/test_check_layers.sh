#!/usr/bin/env bash
# The layer check itself: it passes on src/, and fails, naming the file and the edge, on
# a copy of src/ with one planted include against the direction (core -> server), on one
# that reaches up (kernels -> model), and on a folder that is no layer.
set -uo pipefail
cd "$(dirname "$0")/../.."
check=tests/layers/check_layers.sh
tmp=$(mktemp -d /tmp/ridge-layers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect_fail() {  # name, needle
  local out
  if out=$(bash "$check" "$tmp/src" 2>&1); then
    echo "FAIL $1: the check passed"
    fail=1
  elif ! grep -qF "$2" <<<"$out"; then
    echo "FAIL $1: the check failed without naming '$2':"
    echo "$out"
    fail=1
  else
    echo "ok   $1: $(grep -F "$2" <<<"$out" | head -1)"
  fi
}
bash "$check" src || { echo "FAIL src/ itself breaks the layers"; fail=1; }

cp -r src "$tmp/src"
echo '#include "server/server.h"' >>"$tmp/src/core/error.h"
expect_fail "a planted core -> server include" "core/error.h:"

rm -rf "$tmp/src" && cp -r src "$tmp/src"
sed -i '0,/#include "kernels\/kv_view.h"/s//#include "model\/kv_cache.h"/' "$tmp/src/kernels/cpu/attention.h"
expect_fail "kernels reaching up into model" "kernels -> model"

rm -rf "$tmp/src" && cp -r src "$tmp/src"
echo '#include<engine/engine.h>' >>"$tmp/src/quant/quant.h"
expect_fail "an angle-bracket include with no space" "quant -> engine"

rm -rf "$tmp/src" && cp -r src "$tmp/src"
echo '#include "../server/server.h"' >>"$tmp/src/model/model.h"
expect_fail "a relative include up the tree" "model -> server"

rm -rf "$tmp/src" && cp -r src "$tmp/src"
mkdir "$tmp/src/misc" && echo '#include "core/error.h"' >"$tmp/src/misc/x.cpp"
expect_fail "a folder that is no layer" "src/misc/ is no known layer"

((fail)) && exit 1
echo "layer check: all cases behave"
