#!/usr/bin/env bash
# Puts a small real model into ./models for `make run`:
#   1. a .gguf already in ./models: nothing to do;
#   2. download stories260K (TinyStories, Llama architecture) from a pinned URL, when the
#      network allows;
#   3. otherwise copy it from $RIDGE_MODEL_DIR (default: ../shared/models beside the checkout);
#   4. otherwise say what to do.
# The sha256 of the file is checked; a file that does not match is refused, and a model
# found under another name (unknown hash) is reported as unverified.
set -euo pipefail
cd "$(dirname "$0")/.."
name=stories260K.gguf
sha=047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b
url=https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf
mkdir -p models

verify() {  # path -> 0 if the hash matches
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]
}

if [ -f "models/$name" ]; then
  if verify "models/$name"; then echo "get-model: models/$name (sha256 verified)"; exit 0; fi
  echo "get-model: models/$name does not match the pinned sha256; fetching it again" >&2
  rm -f "models/$name"
else
  for f in models/*.gguf; do
    [ -e "$f" ] || continue
    echo "get-model: using $f (unverified: not the pinned stories260K)"
    exit 0
  done
fi

if command -v curl >/dev/null && curl -fsSL --max-time 30 -o "models/$name.part" "$url" 2>/dev/null; then
  if verify "models/$name.part"; then
    mv "models/$name.part" "models/$name"
    echo "get-model: downloaded models/$name (sha256 verified)"
    exit 0
  fi
  echo "get-model: the download from $url does not match the pinned sha256; ignoring it" >&2
fi
rm -f "models/$name.part"

dir=${RIDGE_MODEL_DIR:-../shared/models}
if [ -f "$dir/$name" ]; then
  if verify "$dir/$name"; then
    cp "$dir/$name" "models/$name"
    echo "get-model: copied $dir/$name (sha256 verified)"
    exit 0
  fi
  echo "get-model: $dir/$name does not match the pinned sha256; not using it" >&2
fi

cat >&2 <<MSG
get-model: no model. Either
  - put any llama/qwen2/qwen3 GGUF into ./models (or pass -m / set RIDGE_MODEL), or
  - set RIDGE_MODEL_DIR to a folder holding $name, or
  - make a random-weight one: ./build/ridge mkmodel --preset tiny -o models/tiny.gguf
MSG
exit 1
