#!/usr/bin/env bash
# Engine throughput (issue 4): `ridge bench throughput` at several concurrencies, and a
# shared-prefix workload with the prefix cache on and off, in one run; prints JSON lines.
#   bench/engine_bench.sh RIDGE MODEL [THREADS]
set -euo pipefail
ridge=$1 model=$2 t=${3:-2}
for c in 1 4 16 64; do
  "$ridge" bench throughput -m "$model" -t "$t" --num-prompts "$c" --max-num-seqs "$c" \
    --input-len 128 --output-len 128 --json
done
for cache in "" --no-prefix-cache; do
  "$ridge" bench throughput -m "$model" -t "$t" --num-prompts 8 --max-num-seqs 8 \
    --input-len 1152 --prefix-len 1024 --output-len 32 --json $cache
done
