#!/usr/bin/env bash
# `ridge bench serve` against `ridge serve` at several concurrencies (docs/BENCHMARKS.md),
# with llama.cpp (node-llama-cpp) running the same shape in the same run as the baseline:
# C sequences with the same prompt and output lengths in one context, all starting
# together (no HTTP: the library's own batching), reported as output tok/s over the run.
#   bench/serve_bench.sh RIDGE MODEL.gguf [CONCURRENCIES] (default "1 8 32"; THREADS=2,
#   INPUT_LEN=128, OUTPUT_LEN=64, PROMPTS_PER_SLOT=4)
set -euo pipefail
ridge=$1 model=$2
concs=${3:-1 8 32}
t=${THREADS:-2} in=${INPUT_LEN:-128} out=${OUTPUT_LEN:-64} per=${PROMPTS_PER_SLOT:-4}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
jq_num() { node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8"));console.log(process.argv[1].split(".").reduce((o,k)=>o[k],j))' "$1"; }

"$ridge" serve -m "$model" -t "$t" --port 0 --kv-cache-memory 2G 2> "$tmp/serve.err" &
srv=$!
for _ in $(seq 600); do grep -q "on http://" "$tmp/serve.err" 2>/dev/null && break; sleep 0.1; done
port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/serve.err" | cut -d: -f2)
[ -n "$port" ] || { cat "$tmp/serve.err"; exit 1; }
vocab=$("$ridge" info -m "$model" | awk '/^model:/ {for (i=1;i<=NF;i++) if ($i=="vocab") {v=$(i+1); sub(",","",v); print v}}')
echo "model $(basename "$model"), $t threads, input $in, output $out tokens, $per prompts per concurrency slot"
echo
echo "| concurrency | requests | req/s | output tok/s | TTFT P50 / P99 ms | TPOT P50 / P99 ms | ITL P50 / P99 ms | llama.cpp output tok/s | ridge / llama.cpp |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for c in $concs; do
  n=$((c * per))
  [ "$n" -lt 8 ] && n=8
  "$ridge" bench serve --url "http://127.0.0.1:$port" --num-prompts "$n" --request-rate inf --max-concurrency "$c" \
    --input-len "$in" --output-len "$out" --vocab-max "$vocab" --json "$tmp/r$c.json" > "$tmp/r$c.txt"
  node "$here/llama_cpp_batch.mjs" --model "$model" --threads "$t" --vocab "$vocab" --batch "$c" --prompt-len "$in" -n "$out" > "$tmp/l$c.json"
  f() { jq_num "$1" < "$tmp/r$c.json"; }
  lt=$(jq_num output_tps < "$tmp/l$c.json")
  printf '| %s | %s | %.2f | %.1f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %.1f | %.2fx |\n' "$c" "$n" \
    "$(f request_throughput)" "$(f output_throughput)" "$(f median_ttft_ms)" "$(f p99_ttft_ms)" \
    "$(f median_tpot_ms)" "$(f p99_tpot_ms)" "$(f median_itl_ms)" "$(f p99_itl_ms)" "$lt" \
    "$(echo "$(f output_throughput) / $lt" | bc -l)"
done
