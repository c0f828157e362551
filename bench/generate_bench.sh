#!/usr/bin/env bash
# Prefill and decode tok/s of `ridge generate` and of llama.cpp (node-llama-cpp) on the
# same files and prompt ids, for each model x thread count, REPS runs each; prints
# medians and the ridge/llama.cpp ratio as a Markdown table.
#   bench/generate_bench.sh RIDGE_BINARY N_PREDICT REPS MODEL.gguf [MODEL.gguf ...]
# THREADS="1 2" by default.
set -euo pipefail
ridge=$1 n=$2 reps=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# ~128 prompt tokens of plain English (the exact count is printed).
prompt="The history of the city begins with a small village on the river, where farmers and fishermen traded grain, wool and salt with travelers from the hills. Over the centuries the village grew into a market town, then into a city with walls, bridges, churches and a university. Merchants built warehouses along the docks, and the river carried boats to the sea. Today the old town is a place of narrow streets, small shops and cafes, and visitors come from far away to see it."

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "| model | threads | prompt tokens | ridge prefill tok/s | llama.cpp prefill tok/s | ratio | ridge decode tok/s | llama.cpp decode tok/s | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for m in "$@"; do
  for t in ${THREADS:-1 2}; do
    : > "$tmp/rp"; : > "$tmp/rd"; : > "$tmp/lp"; : > "$tmp/ld"
    for ((r = 0; r < reps; r++)); do
      "$ridge" generate -m "$m" -p "$prompt" -n "$n" --temp 0 --ignore-eos -t "$t" --dump-json "$tmp/d.json" \
        > /dev/null 2> "$tmp/err"
      grep -oP 'prefill: \K[0-9.]+' "$tmp/err" >> "$tmp/rp"
      grep -oP 'decode: \K[0-9.]+' "$tmp/err" >> "$tmp/rd"
      node "$here/llama_cpp_speed.mjs" --model "$m" --ids-from "$tmp/d.json" -n "$n" --threads "$t" > "$tmp/l.json"
      node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(j.prefill_tps)' "$tmp/l.json" >> "$tmp/lp"
      node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(j.decode_tps)' "$tmp/l.json" >> "$tmp/ld"
    done
    np=$(grep -oP '"prompt_ids":\[\K[^\]]*' "$tmp/d.json" | tr ',' '\n' | wc -l)
    rp=$(median < "$tmp/rp"); rd=$(median < "$tmp/rd"); lp=$(median < "$tmp/lp"); ld=$(median < "$tmp/ld")
    printf '| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n' "$(basename "$m")" "$t" "$np" \
      "$rp" "$lp" "$(awk "BEGIN{print $rp / $lp}")" "$rd" "$ld" "$(awk "BEGIN{print $rd / $ld}")"
  done
done
