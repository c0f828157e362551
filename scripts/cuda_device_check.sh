#!/usr/bin/env bash
# One lease on a lent GPU (the device tool; docs/BENCHMARKS.md has what it measured): the
# CUDA tests against the CPU backend, the device's ceilings, then decode, prefill and
# throughput on random-weight models made there, against transformers' generate in the
# same lease. Runs from the repository root with build/ridge and build/ridge_tests built
# here (carried) and, in .devlibs/, the shared libraries the binaries take from Debian
# that the device's image may lack. Logs go to $OUT; the table comes last.
#   bash scripts/cuda_device_check.sh [quick|kernels|8b|hf|1b|all]   (quick: tests and peaks only)
set -u
OUT=${OUT:-/tmp/cuda_out}
mkdir -p "$OUT"
B=${BUILD:-build}
M=/tmp/models
mkdir -p $M
cublas=$(find / -name 'libcublas.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devlibs:$(dirname "${cublas:-/x/x}"):${LD_LIBRARY_PATH:-}
export RIDGE_KERNEL_CACHE=off RIDGE_KERNEL_AUTOTUNE=0
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
step() {  # name, timeout, command...: its output to $OUT/name.log
  local name=$1 t=$2 t0=$(date +%s)
  shift 2
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "[$name] rc=$rc $(($(date +%s) - t0)) s"
  return $rc
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$summary"
note "cublas: ${cublas:-not found}; python: $(python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)' 2>&1 | tail -1)"
if ldd $B/ridge | grep -q "not found"; then ldd $B/ridge | grep "not found" | tee -a "$summary"; fi

step tests 150 $B/ridge_tests --gtest_filter='*Cuda*' --gtest_brief=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|rel_err|error" "$OUT/tests.log" | head -60 | tee -a "$summary"
step peaks 120 $B/ridge peaks --device cuda
cat "$OUT/peaks.log" | tee -a "$summary"
[ "${1:-}" = quick ] && exit 0

gen() {  # name, model, extra args: bench throughput on the device
  local name=$1 m=$2
  shift 2
  step "$name" 240 $B/ridge bench throughput -m "$m" --device cuda "$@"
  grep -E "tok/s|elapsed|error" "$OUT/$name.log" | sed "s/^/  $name: /" | tee -a "$summary"
}
mk8b() {  # the 8B shape; where writing 16 GB takes too long, its first 8 layers
  step mk_8b 150 $B/ridge mkmodel --preset llama3-8b --dtype bf16 -o $M/8b-bf16.gguf ||
    step mk_8b_l8 150 $B/ridge mkmodel --preset llama3-8b --dtype bf16 --layers 8 -o $M/8b-bf16.gguf
}
gemv_shapes="8,4 4,4 4,8 8,8 2,8"  # cuda_kernels.h GemvShape candidates
case "${1:-all}" in
  kernels | all)
    for v in $gemv_shapes; do
      export RIDGE_CUDA_GEMV=$v
      step "gemv_$v" 120 $B/ridge bench kernels --device cuda --preset llama3-8b --types bf16 --m 1 \
        --shapes attn_q,attn_kv,ffn_up,ffn_down --ring 512M --seconds 0.2
      grep -E "^(attn|ffn)" "$OUT/gemv_$v.log" | sed "s/^/  gemv $v: /" | tee -a "$summary"
    done
    unset RIDGE_CUDA_GEMV
    step kernels_q 180 $B/ridge bench kernels --device cuda --preset llama3-8b --types q8_0,q4_k,q6_k,f16 --m 1,8 \
      --shapes attn_q,ffn_up,ffn_down --ring 512M --seconds 0.2
    grep -E "^(attn|ffn)" "$OUT/kernels_q.log" | tee -a "$summary"
    step kernels_gemm 180 $B/ridge bench kernels --device cuda --preset llama3-8b --types bf16,q4_k --m 64,512,4096 \
      --shapes attn_q,ffn_up,ffn_down,output --ring 64M --seconds 0.2
    grep -E "^(attn|ffn|output)" "$OUT/kernels_gemm.log" | tee -a "$summary"
    ;;&
  8b | all)
    mk8b
    for v in $gemv_shapes; do
      export RIDGE_CUDA_GEMV=$v
      gen "dec_8b_gemv_$v" $M/8b-bf16.gguf --num-prompts 1 --input-len 32 --output-len 256
    done
    unset RIDGE_CUDA_GEMV
    gen pre_8b_bf16 $M/8b-bf16.gguf --num-prompts 1 --input-len 4096 --output-len 1 --max-num-batched-tokens 4096
    export RIDGE_CUDA_ATTN=tc
    gen pre_8b_bf16_tc_attn $M/8b-bf16.gguf --num-prompts 1 --input-len 4096 --output-len 1 \
      --max-num-batched-tokens 4096
    unset RIDGE_CUDA_ATTN
    gen thr_8b_bf16 $M/8b-bf16.gguf --num-prompts 64 --input-len 128 --output-len 128
    step roofline_8b 240 $B/ridge roofline -m $M/8b-bf16.gguf --device cuda --batch 1,64 --prompt 512 --decode-steps 16
    grep -vE "^\s*$" "$OUT/roofline_8b.log" | head -80 | tee -a "$summary"
    ;;&
  hf | all)
    step hf_8b 240 python3 bench/hf_generate.py --preset llama3-8b
    tail -1 "$OUT/hf_8b.log" | tee -a "$summary"
    ;;&
  1b | all)
    step mk_1b 120 $B/ridge mkmodel --preset llama3.2-1b --dtype bf16 -o $M/1b-bf16.gguf
    step mk_1b_q4k 120 $B/ridge quantize $M/1b-bf16.gguf $M/1b-q4_k.gguf --type q4_k
    gen dec_1b_bf16 $M/1b-bf16.gguf --num-prompts 1 --input-len 32 --output-len 256
    gen dec_1b_q4k $M/1b-q4_k.gguf --num-prompts 1 --input-len 32 --output-len 256
    ;;
esac
ls -la $M | tee -a "$summary"
