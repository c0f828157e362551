#!/usr/bin/env bash
# The roofline targets of the CPU-kernels work (docs/BENCHMARKS.md), ridge and llama.cpp
# (node-llama-cpp) on the same files in the same run, against `ridge peaks`:
#   decode b1:   128 new tokens after a 128-token prompt, effective weight bandwidth
#                (streamed weight bytes x tok/s) as % of the 2-thread DRAM read ceiling;
#   prefill 512: useful multiply-adds/s (layer matrices x 512 + the head once) as % of
#                the int8 VNNI peak (quantized) or the fp32 FMA peak (f16);
#   decode b16:  16 sequences decoding together, tok/s and the ratio to b1.
#   bench/roofline_targets.sh RIDGE REPS MODEL.gguf [MODEL.gguf ...]    (THREADS=2)
set -euo pipefail
ridge=$1 reps=$2
shift 2
t=${THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
jq_num() { node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8"));const v=process.argv[1].split(".").reduce((o,k)=>o[k],j);console.log(v)' "$1"; }

"$ridge" peaks -t "$t" --json "$tmp/peaks.json" > "$tmp/peaks.txt"
bw=$(jq_num "dram_read_gbs.$t" < "$tmp/peaks.json")
vnni=$(jq_num compute.int8_vnni.all_gflops < "$tmp/peaks.json")
fma=$(jq_num compute.fp32_fma.all_gflops < "$tmp/peaks.json")
echo "ceilings ($t threads): DRAM read $bw GB/s, int8 VNNI $vnni GOP/s, fp32 FMA $fma GFLOP/s"
echo
echo "| model | metric | ridge | llama.cpp | ridge/llama.cpp | ceiling | ridge % of ceiling | llama.cpp % of ceiling |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for m in "$@"; do
  name=$(basename "$m" .gguf)
  read -r bytes layer_macs head_macs < <("$ridge" info -m "$m" | awk '/^per token:/ {print $3, $7, $10}')
  vocab=$("$ridge" info -m "$m" | awk '/^model:/ {for (i=1;i<=NF;i++) if ($i=="vocab") {v=$(i+1); sub(",","",v); print v}}')
  case "$name" in *f16*|*bf16*|*f32*) peak=$fma; peakname="fp32 FMA" ;; *) peak=$vnni; peakname="int8 VNNI" ;; esac
  for f in rd1 rp rd16 ld1 lp ld16; do : > "$tmp/$f"; done
  for ((r = 0; r < reps; r++)); do
    "$ridge" bench throughput -m "$m" -t "$t" --num-prompts 1 --input-len 128 --output-len 128 --json | jq_num decode_tok_per_s >> "$tmp/rd1"
    "$ridge" bench throughput -m "$m" -t "$t" --num-prompts 1 --input-len 512 --output-len 1 --json | jq_num prefill_tok_per_s >> "$tmp/rp"
    "$ridge" bench throughput -m "$m" -t "$t" --num-prompts 16 --input-len 128 --output-len 128 --json | jq_num decode_tok_per_s >> "$tmp/rd16"
    node "$here/llama_cpp_batch.mjs" --model "$m" --threads "$t" --vocab "$vocab" --batch 1 --prompt-len 128 -n 128 | jq_num decode_tps >> "$tmp/ld1"
    node "$here/llama_cpp_batch.mjs" --model "$m" --threads "$t" --vocab "$vocab" --batch 1 --prompt-len 512 -n 2 | jq_num prefill_tps >> "$tmp/lp"
    node "$here/llama_cpp_batch.mjs" --model "$m" --threads "$t" --vocab "$vocab" --batch 16 --prompt-len 128 -n 128 | jq_num decode_tps >> "$tmp/ld16"
  done
  rd1=$(median < "$tmp/rd1"); rp=$(median < "$tmp/rp"); rd16=$(median < "$tmp/rd16")
  ld1=$(median < "$tmp/ld1"); lp=$(median < "$tmp/lp"); ld16=$(median < "$tmp/ld16")
  awk -v n="$name" -v bytes="$bytes" -v lm="$layer_macs" -v hm="$head_macs" -v bw="$bw" -v pk="$peak" -v pkn="$peakname" \
      -v rd1="$rd1" -v rp="$rp" -v rd16="$rd16" -v ld1="$ld1" -v lp="$lp" -v ld16="$ld16" 'BEGIN {
    # decode: GB/s of weights; prefill: useful GOP/s = 2 x (512 x layer + head) MACs per 512 tokens
    rg = bytes * rd1 / 1e9; lg = bytes * ld1 / 1e9
    printf "| %s | decode b1 tok/s (weight GB/s) | %.2f (%.1f) | %.2f (%.1f) | %.2f | %.1f GB/s DRAM | %.0f%% | %.0f%% |\n", n, rd1, rg, ld1, lg, rd1/ld1, bw, 100*rg/bw, 100*lg/bw
    rf = 2 * (512 * lm + hm) * rp / 512 / 1e9; lf = 2 * (512 * lm + hm) * lp / 512 / 1e9
    printf "| %s | prefill 512 tok/s (useful GOP/s) | %.1f (%.0f) | %.1f (%.0f) | %.2f | %.0f GOP/s %s | %.0f%% | %.0f%% |\n", n, rp, rf, lp, lf, rp/lp, pk, pkn, 100*rf/pk, 100*lf/pk
    printf "| %s | decode b16 tok/s (x b1) | %.1f (%.1fx) | %.1f (%.1fx) | %.2f | | | |\n", n, rd16, rd16/rd1, ld16, ld16/ld1, rd16/ld16
  }'
done
